#!/usr/bin/env bash
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
# Env: CC/CXX (default clang/clang++), CMAKE, PYTHON (locates executorch),
# FUZZ_BUILD_DIR (default build/fuzz), FUZZ_NICE (default 15), FUZZ_BUILD_JOBS
# (default 1). One fuzzing process only: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { echo "usage: bench/fuzz.sh SECONDS [libFuzzer args...] | --replay" >&2; exit 2; }
[ $# -ge 1 ] || usage
MODE=$1
shift
if [ "$MODE" != "--replay" ] && ! [[ "$MODE" =~ ^[0-9]+$ ]]; then usage; fi

CC=${CC:-clang}
CXX=${CXX:-clang++}
CMAKE=${CMAKE:-cmake}
PYTHON=${PYTHON:-python3}
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

command -v "$CXX" >/dev/null || { echo "bench/fuzz.sh: $CXX not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 3; }

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  CC=$CC CXX=$CXX nice -n "$NICE" "$CMAKE" -S "$ROOT" -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETHOSU_NG_FUZZ=ON -DETHOSU_NG_WERROR=ON \
    -DETHOSU_NG_BUILD_TESTS=OFF -DETHOSU_NG_PYTHON="$(command -v "$PYTHON")" >/dev/null
fi
nice -n "$NICE" "$CMAKE" --build "$BUILD" --target "$TARGET" --parallel "$JOBS"
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
