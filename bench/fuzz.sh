#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# libFuzzer over the C++ runtime: blob parsing + EthosUNGBackend init/execute
# with fuzzed IO tensors (runtime/fuzz/fuzz_delegate.cpp).
#
#   bench/fuzz.sh SECONDS [libFuzzer args...]   build if needed, fuzz for SECONDS
#   bench/fuzz.sh --replay                      run every file under tests/runtime/corpus/ once
#
# Seeds: tests/runtime/corpus/seeds/ (real blobs, tests/runtime/make_seeds.py). New
# coverage goes to $BUILD/corpus (not committed). A crash, leak, timeout or OOM
# writes its input to tests/runtime/corpus/crashers/: fix the runtime, keep the file
# (the replay runs it forever after) and rerun.
#
# FUZZ_TARGET=fuzz_npu_model fuzzes the NPU model instead (runtime/fuzz/fuzz_npu_model.cpp;
# corpus tests/runtime/corpus_npu_model/, seeds from tests/runtime/make_npu_model_seeds.py).
#
# Env: CC/CXX (default clang/clang++); PYTHON, the interpreter with executorch
# (default $VIRTUAL_ENV/bin/python, else .venv/bin/python, else python3); CMAKE,
# cmake >= 3.28 (default: next to $PYTHON, else on PATH); FUZZ_BUILD_DIR (default
# build/fuzz), FUZZ_NICE (default 15), FUZZ_BUILD_JOBS (default 1). One fuzzing
# process only: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { echo "usage: bench/fuzz.sh SECONDS [libFuzzer args...] | --replay" >&2; exit 2; }
[ $# -ge 1 ] || usage
MODE=$1
shift
if [ "$MODE" != "--replay" ] && ! [[ "$MODE" =~ ^[0-9]+$ ]]; then usage; fi

die() { echo "bench/fuzz.sh: $*" >&2; exit 3; }

CC=${CC:-clang}
CXX=${CXX:-clang++}
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    PYTHON=$VIRTUAL_ENV/bin/python
  elif [ -x "$ROOT/.venv/bin/python" ]; then
    PYTHON=$ROOT/.venv/bin/python
  else
    PYTHON=$(command -v python3 || true)
  fi
fi
PYTHON=$(command -v "$PYTHON" || true)
[ -n "$PYTHON" ] || die "no Python interpreter (set PYTHON=...)"
"$PYTHON" -c "import executorch" 2>/dev/null \
  || die "$PYTHON cannot import executorch (set PYTHON to the project's interpreter)"
cmake_ok() { # cmake >= 3.28?
  local v
  v=$("$1" --version 2>/dev/null | head -1 | awk '{print $3}') || return 1
  [ -n "$v" ] && printf '3.28\n%s\n' "$v" | sort -V -C
}
if [ -z "${CMAKE:-}" ]; then
  for cand in "$(dirname "$PYTHON")/cmake" "$(command -v cmake || true)"; do
    if [ -x "$cand" ] && cmake_ok "$cand"; then CMAKE=$cand; break; fi
  done
fi
{ [ -n "${CMAKE:-}" ] && cmake_ok "$CMAKE"; } \
  || die "need cmake >= 3.28 (set CMAKE=..., or pip install 'cmake>=3.28' next to $PYTHON)"
BUILD=${FUZZ_BUILD_DIR:-$ROOT/build/fuzz}
NICE=${FUZZ_NICE:-15}
JOBS=${FUZZ_BUILD_JOBS:-1}
TARGET=${FUZZ_TARGET:-fuzz_delegate}
case "$TARGET" in
  fuzz_delegate) CORPUS=$ROOT/tests/runtime/corpus; WORK=$BUILD/corpus ;;
  fuzz_npu_model) CORPUS=$ROOT/tests/runtime/corpus_npu_model; WORK=$BUILD/corpus_npu_model ;;
  *) echo "bench/fuzz.sh: unknown FUZZ_TARGET $TARGET" >&2; exit 2 ;;
esac
SEEDS=$CORPUS/seeds
CRASHERS=$CORPUS/crashers

command -v "$CXX" >/dev/null || die "$CXX not found (apt-get install clang libclang-rt-14-dev)"

# One configure and build at a time (parallel test workers share the build tree).
mkdir -p "$BUILD"
exec 9>"$BUILD/.fuzz-build.lock"
flock 9
# Configured = a generated build system exists (a failed configure can leave CMakeCache.txt).
if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then
  GEN=()
  if command -v ninja >/dev/null; then GEN=(-G Ninja); fi
  echo "bench/fuzz.sh: configuring $BUILD (cmake $CMAKE, python $PYTHON)" >&2
  CC=$CC CXX=$CXX nice -n "$NICE" "$CMAKE" -S "$ROOT" -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETHOSU_NG_FUZZ=ON -DETHOSU_NG_WERROR=ON \
    -DETHOSU_NG_BUILD_TESTS=OFF -DETHOSU_NG_PYTHON="$PYTHON" >"$BUILD/configure.log" 2>&1 \
    || die "cmake configure failed (see $BUILD/configure.log)"
fi
nice -n "$NICE" "$CMAKE" --build "$BUILD" --target "$TARGET" --parallel "$JOBS" \
  || die "building $TARGET failed (output above)"
exec 9>&-
FUZZER=$BUILD/$TARGET
mkdir -p "$CRASHERS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "$MODE" = "--replay" ]; then
  # Every committed input once (seeds and former crashers): all must pass.
  mapfile -t FILES < <(find "$CORPUS" -type f ! -name '*.md' | sort)
  exec nice -n "$NICE" "$FUZZER" -runs=1 "${FILES[@]}"
fi

mkdir -p "$WORK"
exec nice -n "$NICE" "$FUZZER" "$WORK" "$SEEDS" "$CRASHERS" \
  -max_total_time="$MODE" -timeout=10 -rss_limit_mb=2048 -use_value_profile=1 \
  -print_final_stats=1 -artifact_prefix="$CRASHERS/" "$@"
