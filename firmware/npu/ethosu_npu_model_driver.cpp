// SPDX-License-Identifier: Apache-2.0
// The Ethos-U core driver's entry points the delegate calls
// (npu_driver_ethosu.cpp), implemented by the NPU model: the image runs the
// real command stream through the same delegate and ExecuTorch runtime as a
// device, with only the NPU replaced. Each invocation is counted and a model
// error is printed, so the runner can report both.
#include <cstdio>

#include <ethosu_ng/ethosu_driver_decls.h>
#include <ethosu_ng/npu_model/npu_model.h>

struct ethosu_driver {
  bool reserved;
};

namespace {
ethosu_driver g_driver{false};
unsigned long g_invocations = 0;
} // namespace

extern "C" unsigned long ethosu_ng_fw_npu_invocations(void) {
  return g_invocations;
}

extern "C" struct ethosu_driver* ethosu_reserve_driver(void) {
  if (g_driver.reserved) {
    return nullptr;
  }
  g_driver.reserved = true;
  return &g_driver;
}

extern "C" void ethosu_release_driver(struct ethosu_driver* drv) {
  if (drv == &g_driver) {
    g_driver.reserved = false;
  }
}

extern "C" int ethosu_invoke_v3(
    struct ethosu_driver* drv,
    const void* custom_data_ptr,
    const int custom_data_size,
    uint64_t* const base_addr,
    const size_t* base_addr_size,
    const int num_base_addr,
    void* /*user_arg*/) {
  if (drv != &g_driver || !g_driver.reserved || custom_data_ptr == nullptr ||
      custom_data_size < 0 || num_base_addr < 3 || base_addr == nullptr ||
      base_addr_size == nullptr) {
    std::printf("ethosu_ng_fw: ethosu_invoke_v3: bad arguments\n");
    return -1;
  }
  ++g_invocations;
  namespace m = ethosu_ng::npu_model;
  m::Regions r;
  r.weights = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(base_addr[0]));
  r.weights_size = base_addr_size[0];
  r.scratch = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base_addr[1]));
  r.scratch_size = base_addr_size[1];
  r.fast_scratch = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(base_addr[2]));
  r.fast_scratch_size = base_addr_size[2];
  static char msg[512];
  m::Stats stats;
  const m::Error e = m::run_payload(
      static_cast<const uint8_t*>(custom_data_ptr),
      static_cast<size_t>(custom_data_size),
      r,
      msg,
      sizeof(msg),
      &stats);
  if (e != m::Error::Ok) {
    std::printf("ethosu_ng_fw: NPU model error %d: %s\n", static_cast<int>(e), msg);
    return -1;
  }
  return 0;
}
