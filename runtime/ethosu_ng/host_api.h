// SPDX-License-Identifier: BSD-3-Clause
// C API of the host runtime, which the extension module ethosu_ng._host_runtime
// binds for Python (runtime/python/host_runtime.cpp). Host only: firmware never
// sees it.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ETHOSU_NG_EXPORT __attribute__((visibility("default")))
#else
#define ETHOSU_NG_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Bumped whenever a signature below changes or one is added.
#define ETHOSU_NG_HOST_ABI_VERSION 3

// Runs one delegate's embedded TOSA flatbuffer. Called by the host NpuDriver
// with the inputs already in the NPU scratch buffer and the outputs to be
// written there, each at its IO entry's offset, dense in the entry's
// dim_order (the "NPU layout"). Shapes are given in that memory order (they
// are the TOSA graph's tensor shapes), `shapes` holds 6 int64 per tensor
// (unused entries 0). dtype codes are the blob's: 1 int8, 2 uint8, 3 int16,
// 4 uint16, 5 int32. `byte_sizes` is what each buffer holds. Return 0 on
// success; otherwise write a message into err (NUL-terminated, at most
// err_cap bytes) and return non-zero.
typedef int (*ethosu_ng_tosa_callback)(
    const uint8_t* tosa,
    size_t tosa_len,
    int n_in,
    const void* const* in_ptrs,
    const int* in_dtypes,
    const int* in_ranks,
    const int64_t* in_shapes,
    const int64_t* in_byte_sizes,
    int n_out,
    void* const* out_ptrs,
    const int* out_dtypes,
    const int* out_ranks,
    const int64_t* out_shapes,
    const int64_t* out_byte_sizes,
    char* err,
    size_t err_cap);

// Registers (or with NULL, clears) the callback. Without one, executing a
// delegate on the host fails with an Error.
ETHOSU_NG_EXPORT void ethosu_ng_set_tosa_callback(ethosu_ng_tosa_callback cb);

ETHOSU_NG_EXPORT int ethosu_ng_host_abi_version(void);

// Number of delegate invocations the host driver ran (for tests).
ETHOSU_NG_EXPORT uint64_t ethosu_ng_host_invoke_count(void);

// What ethosu_ng_host_run_with_pools measured. Byte counts include the
// alignment padding the allocators inserted (every pool starts 16-byte
// aligned). Host pointers are 8 bytes: the method allocator figure is for a
// 64-bit host, a 32-bit Cortex-M needs less.
typedef struct ethosu_ng_pool_usage {
  size_t method_allocator_used; // high-water mark of the method allocator
  size_t temp_allocator_peak; // high-water mark of the temp allocator
  int error; // the executorch::runtime::Error of the failing step, else 0
} ethosu_ng_pool_usage;

// Return codes of ethosu_ng_host_run_with_pools: which step failed.
#define ETHOSU_NG_POOLS_OK 0
#define ETHOSU_NG_POOLS_BAD_ARGUMENTS 1
#define ETHOSU_NG_POOLS_LOAD_PROGRAM 2
#define ETHOSU_NG_POOLS_LOAD_METHOD 3
#define ETHOSU_NG_POOLS_EXECUTE 4

// Loads `method` of the program in `pte` (kept alive by the caller) the way
// firmware does, with a MemoryManager over freshly allocated, 16-byte aligned
// pools of exactly the given sizes: one planned arena per memory-planned
// buffer (n_arenas must equal the method's count), a method allocator and a
// temp allocator. With inputs == NULL it only loads (measuring the method
// allocator); otherwise it copies each input's bytes into the method
// (set_input), executes, and copies each output's bytes out (outputs in the
// program's dim order). Returns one of ETHOSU_NG_POOLS_*; on failure a
// one-line reason is written into err.
ETHOSU_NG_EXPORT int ethosu_ng_host_run_with_pools(
    const uint8_t* pte,
    size_t pte_len,
    const char* method,
    const size_t* arena_sizes,
    size_t n_arenas,
    size_t method_allocator_size,
    size_t temp_allocator_size,
    const void* const* inputs,
    const size_t* input_bytes,
    size_t n_inputs,
    void* const* outputs,
    const size_t* output_bytes,
    size_t n_outputs,
    ethosu_ng_pool_usage* usage,
    char* err,
    size_t err_cap);

// What the host driver runs for each delegate call:
//   ETHOSU_NG_NPU_TOSA   the embedded TOSA section through the callback above
//   ETHOSU_NG_NPU_MODEL  the command stream on the Ethos-U55/U65 functional
//                        model (runtime/ethosu_ng/npu_model/), as the NPU would
// Read at every invoke, so it can change between calls. Default: TOSA.
#define ETHOSU_NG_NPU_TOSA 0
#define ETHOSU_NG_NPU_MODEL 1
ETHOSU_NG_EXPORT void ethosu_ng_set_npu_mode(int mode);
ETHOSU_NG_EXPORT int ethosu_ng_get_npu_mode(void);

// Runs one driver payload (Vela's cmd_data) on the NPU model against the
// given regions, without a blob (tests, fuzzing, benchmarks). Returns 0 or
// the ExecuTorch Error code; on failure `err` holds the model's message
// (command index, opcode/register, values). Region 2 may be NULL/0.
ETHOSU_NG_EXPORT int ethosu_ng_npu_model_run(
    const uint8_t* payload,
    size_t payload_size,
    const uint8_t* weights,
    size_t weights_size,
    uint8_t* scratch,
    size_t scratch_size,
    uint8_t* fast_scratch,
    size_t fast_scratch_size,
    char* err,
    size_t err_cap);

// Counters of the last NPU-model run in this process (either path):
// out[0] commands, out[1] kernel ops, out[2] DMAs, out[3] MACs, out[4]
// kernels whose OFM tiles alias (later writes overwrite earlier ones).
ETHOSU_NG_EXPORT void ethosu_ng_npu_model_stats(uint64_t out[5]);

// Decodes one compressed weight stream. Writes at most out_cap weights and
// returns how many the stream holds, or -1 with a message in err.
ETHOSU_NG_EXPORT int64_t ethosu_ng_mlw_decode(
    const uint8_t* in,
    size_t in_size,
    int16_t* out,
    size_t out_cap,
    char* err,
    size_t err_cap);

#ifdef __cplusplus
} // extern "C"
#endif
