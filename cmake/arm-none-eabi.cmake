# SPDX-License-Identifier: BSD-3-Clause
# Toolchain file: bare-metal Arm Cortex-M with Debian's gcc-arm-none-eabi
# (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi
# libstdc++-arm-none-eabi-newlib). Builds static libraries only.
#
#   cmake -S . -B build/cortex-m55 -DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake \
#         -DETHOSU_NG_TARGET_CPU=cortex-m55   # or cortex-m85
#
# Cache variables:
#   ETHOSU_NG_TARGET_CPU   cortex-m55 (default) | cortex-m85
#   ETHOSU_NG_FLOAT_ABI    hard (default) | softfp
#   ETHOSU_NG_ARM_TOOLCHAIN_PREFIX  e.g. /opt/arm/bin/arm-none-eabi- (default: from PATH)
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)

set(ETHOSU_NG_TARGET_CPU "cortex-m55" CACHE STRING "Cortex-M CPU: cortex-m55 or cortex-m85")
set_property(CACHE ETHOSU_NG_TARGET_CPU PROPERTY STRINGS cortex-m55 cortex-m85)
set(ETHOSU_NG_FLOAT_ABI "hard" CACHE STRING "Float ABI: hard or softfp")
set(ETHOSU_NG_ARM_TOOLCHAIN_PREFIX "arm-none-eabi-" CACHE STRING "Compiler prefix")
# try_compile projects re-read this file; hand them the same choices.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES
     ETHOSU_NG_TARGET_CPU ETHOSU_NG_FLOAT_ABI ETHOSU_NG_ARM_TOOLCHAIN_PREFIX)

set(CMAKE_C_COMPILER "${ETHOSU_NG_ARM_TOOLCHAIN_PREFIX}gcc")
set(CMAKE_CXX_COMPILER "${ETHOSU_NG_ARM_TOOLCHAIN_PREFIX}g++")
set(CMAKE_ASM_COMPILER "${ETHOSU_NG_ARM_TOOLCHAIN_PREFIX}gcc")
set(CMAKE_AR "${ETHOSU_NG_ARM_TOOLCHAIN_PREFIX}ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "${ETHOSU_NG_ARM_TOOLCHAIN_PREFIX}ranlib" CACHE FILEPATH "")
# No semihosting/startup code here: compiler checks build a static library.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

if(ETHOSU_NG_TARGET_CPU STREQUAL "cortex-m55")
  set(_ethosu_ng_cpu_flags "-mcpu=cortex-m55")
elseif(ETHOSU_NG_TARGET_CPU STREQUAL "cortex-m85")
  # -mcpu=cortex-m85 arrived in GCC 13; Debian bookworm ships 12. Fall back to
  # the architecture M85 implements (v8.1-M with MVE-FP and a double-precision
  # FPU); the optional PACBTI extension is left off, which M85 runs unchanged.
  execute_process(
    COMMAND "${CMAKE_C_COMPILER}" -mcpu=cortex-m85 -mthumb -x c -E -
    INPUT_FILE /dev/null OUTPUT_QUIET ERROR_QUIET RESULT_VARIABLE _ethosu_ng_m85_rc)
  if(_ethosu_ng_m85_rc EQUAL 0)
    set(_ethosu_ng_cpu_flags "-mcpu=cortex-m85")
  else()
    set(_ethosu_ng_cpu_flags "-march=armv8.1-m.main+mve.fp+fp.dp")
    if(NOT _ethosu_ng_m85_note)
      message(STATUS "ethosu_ng: ${CMAKE_C_COMPILER} has no -mcpu=cortex-m85; using ${_ethosu_ng_cpu_flags}")
      set(_ethosu_ng_m85_note ON)
    endif()
  endif()
else()
  message(FATAL_ERROR "ETHOSU_NG_TARGET_CPU must be cortex-m55 or cortex-m85, not '${ETHOSU_NG_TARGET_CPU}'")
endif()

set(_ethosu_ng_arch "${_ethosu_ng_cpu_flags} -mthumb -mfloat-abi=${ETHOSU_NG_FLOAT_ABI}")
set(CMAKE_C_FLAGS_INIT "${_ethosu_ng_arch} -ffunction-sections -fdata-sections")
set(CMAKE_CXX_FLAGS_INIT "${_ethosu_ng_arch} -ffunction-sections -fdata-sections -fno-exceptions -fno-rtti")
set(CMAKE_ASM_FLAGS_INIT "${_ethosu_ng_arch}")

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
