// SPDX-License-Identifier: BSD-3-Clause
// Minimal declarations of the Ethos-U core driver entry points we call, used
// when the build is not given the real ethos-u-core-driver headers
// (CMake option ETHOSU_NG_CORE_DRIVER_INCLUDE). They match ethosu_driver.h of
// ethos-u-core-driver (v3 invoke API); the firmware links the real driver.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ethosu_driver; // opaque: only ever handled by pointer

struct ethosu_driver* ethosu_reserve_driver(void);
void ethosu_release_driver(struct ethosu_driver* drv);

// Returns 0 on success, negative on failure. base_addr/base_addr_size hold
// num_base_addr regions (0 weights, 1 scratch, 2 fast scratch for Vela).
int ethosu_invoke_v3(
    struct ethosu_driver* drv,
    const void* custom_data_ptr,
    const int custom_data_size,
    uint64_t* const base_addr,
    const size_t* base_addr_size,
    const int num_base_addr,
    void* user_arg);

#ifdef __cplusplus
} // extern "C"
#endif
