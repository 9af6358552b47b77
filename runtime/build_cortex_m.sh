#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Cross-compile the firmware delegate library (libethosu_ng_delegate.a) for
# Cortex-M with gcc-arm-none-eabi, warnings as errors, then check the archive:
# no exception, RTTI or heap symbols on the device path. It compiles against
# the executorch wheel's headers without the wheel's host-only definitions;
# firmware/ builds a whole image (ExecuTorch runtime from source, the delegate
# with that runtime's definitions) and runs it on an emulated Cortex-M55.
#
# Usage: runtime/build_cortex_m.sh [cortex-m55|cortex-m85|all]   (default: all)
# Environment:
#   PYTHON      interpreter with the executorch wheel (headers come from it);
#               default: $VIRTUAL_ENV/bin/python, else python3
#   CMAKE       cmake >= 3.28 (default: cmake on PATH, else next to $PYTHON)
#   BUILD_ROOT  build directory root (default: <repo>/build/cortex-m)
#   ETHOSU_NG_CORE_DRIVER_INCLUDE  ethos-u-core-driver include dir (optional)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
which_cpu="${1:-all}"
case "$which_cpu" in
  all) cpus=(cortex-m55 cortex-m85) ;;
  cortex-m55|cortex-m85) cpus=("$which_cpu") ;;
  *) echo "usage: $0 [cortex-m55|cortex-m85|all]" >&2; exit 2 ;;
esac

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    PYTHON="$VIRTUAL_ENV/bin/python"
  else
    PYTHON="$(command -v python3)"
  fi
fi
cmake_ok() { # cmake >= 3.28?
  local v
  v="$("$1" --version 2>/dev/null | head -1 | awk '{print $3}')" || return 1
  [[ -n "$v" ]] && printf '3.28\n%s\n' "$v" | sort -V -C
}
if [[ -z "${CMAKE:-}" ]]; then
  for cand in "$(dirname "$PYTHON")/cmake" "$(command -v cmake || true)"; do
    if [[ -x "$cand" ]] && cmake_ok "$cand"; then CMAKE="$cand"; break; fi
  done
fi
if [[ -z "${CMAKE:-}" ]] || ! cmake_ok "$CMAKE"; then
  echo "need cmake >= 3.28 (set CMAKE=..., or pip install 'cmake>=3.28' next to $PYTHON)" >&2
  exit 1
fi
command -v arm-none-eabi-g++ >/dev/null || {
  echo "arm-none-eabi-g++ not found: apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib" >&2
  exit 1
}
# The C++ standard headers come from libstdc++-arm-none-eabi-newlib (-dev), which
# gcc-arm-none-eabi does not pull in by itself.
if ! printf '#include <cstdint>\n#include <new>\n' |
    arm-none-eabi-g++ -mthumb -mcpu=cortex-m55 -x c++ -fsyntax-only - 2>/dev/null; then
  echo "arm-none-eabi-g++ has no C++ standard headers: apt-get install libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib" >&2
  exit 1
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
build_root="${BUILD_ROOT:-$repo/build/cortex-m}"
driver_args=()
[[ -n "${ETHOSU_NG_CORE_DRIVER_INCLUDE:-}" ]] &&
  driver_args=(-DETHOSU_NG_CORE_DRIVER_INCLUDE="$ETHOSU_NG_CORE_DRIVER_INCLUDE")

for cpu in "${cpus[@]}"; do
  build="$build_root/$cpu"
  mkdir -p "$build"
  echo "== ethosu_ng delegate for $cpu -> $build"
  "$CMAKE" -S "$repo" -B "$build" "${generator[@]}" \
    -DCMAKE_TOOLCHAIN_FILE="$repo/cmake/arm-none-eabi.cmake" \
    -DETHOSU_NG_TARGET_CPU="$cpu" \
    -DCMAKE_BUILD_TYPE=MinSizeRel \
    -DETHOSU_NG_WERROR=ON \
    -DETHOSU_NG_PYTHON="$PYTHON" \
    "${driver_args[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
  "$CMAKE" --build "$build" --target ethosu_ng_delegate
  lib="$build/libethosu_ng_delegate.a"
  [[ -f "$lib" ]] || { echo "missing $lib" >&2; exit 1; }

  # Device-path rules, checked on the object code.
  undefined="$(arm-none-eabi-nm -u "$lib" | awk '{print $2}' | sort -u)"
  bad="$(grep -E '^(__cxa_throw|__cxa_allocate_exception|__gxx_personality_v0|_Unwind_Resume|malloc|calloc|realloc|free|_Znwj|_Znaj|_ZdlPv|_ZdaPv|_ZdlPvj)$' <<<"$undefined" || true)"
  if [[ -n "$bad" ]]; then
    echo "libethosu_ng_delegate.a references forbidden symbols:" >&2
    echo "$bad" >&2
    exit 1
  fi
  if arm-none-eabi-nm -C "$lib" | grep -q "typeinfo for ethosu_ng"; then
    echo "libethosu_ng_delegate.a carries RTTI" >&2
    exit 1
  fi
  arm-none-eabi-size -t "$lib" | tail -1 | awk -v cpu="$cpu" '{print "== " cpu ": text " $1 " B, data " $2 " B, bss " $3 " B"}'
done
