// SPDX-License-Identifier: BSD-3-Clause
// npu_driver_ethosu.cpp against a fake Ethos-U core driver: the region bases
// and sizes it hands to ethosu_invoke_v3, reserve/release pairing, errors.
#include <cstdint>
#include <vector>

#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/ethosu_driver_decls.h>
#include <ethosu_ng/npu_driver.h>

#include "blob_builder.h"
#include "harness.h"

using ethosu_ng::Error;

namespace {
struct Fake {
  bool have_driver = true;
  int rc = 0;
  int reserves = 0;
  int releases = 0;
  int invokes = 0;
  const void* cmd = nullptr;
  int cmd_size = 0;
  uint64_t bases[3] = {};
  size_t sizes[3] = {};
  int num = 0;
} g;
int g_token; // address used as the opaque driver
} // namespace

extern "C" {
struct ethosu_driver* ethosu_reserve_driver(void) {
  ++g.reserves;
  return g.have_driver ? reinterpret_cast<struct ethosu_driver*>(&g_token) : nullptr;
}
void ethosu_release_driver(struct ethosu_driver* drv) {
  CHECK(drv == reinterpret_cast<struct ethosu_driver*>(&g_token));
  ++g.releases;
}
int ethosu_invoke_v3(struct ethosu_driver* drv, const void* cmd, const int cmd_size,
                     uint64_t* const base_addr, const size_t* base_addr_size,
                     const int num_base_addr, void* user_arg) {
  CHECK(drv == reinterpret_cast<struct ethosu_driver*>(&g_token));
  CHECK(user_arg == nullptr);
  ++g.invokes;
  g.cmd = cmd;
  g.cmd_size = cmd_size;
  g.num = num_base_addr;
  for (int i = 0; i < num_base_addr && i < 3; ++i) {
    g.bases[i] = base_addr[i];
    g.sizes[i] = base_addr_size[i];
  }
  return g.rc;
}
} // extern "C"

int main() {
  executorch::runtime::runtime_init();
  testblob::Spec spec;
  const std::vector<uint8_t> bytes = testblob::build(spec);
  testblob::Buffer buf(bytes);
  auto blob = ethosu_ng::Blob::parse(buf.data(), buf.size());
  CHECK(blob.ok());
  alignas(16) static uint8_t scratch[256];
  alignas(16) static uint8_t fast[128];
  const uint8_t cmd[12] = {1, 2, 3};
  const uint8_t weights[40] = {};
  ethosu_ng::NpuDriver& drv = ethosu_ng::platform_driver();

  CHECK(drv.invoke(cmd, sizeof(cmd), weights, sizeof(weights), scratch, sizeof(scratch), fast,
                   sizeof(fast), blob.get()) == Error::Ok);
  CHECK(g.invokes == 1 && g.reserves == 1 && g.releases == 1);
  CHECK(g.cmd == cmd && g.cmd_size == 12 && g.num == 3);
  CHECK(g.bases[0] == reinterpret_cast<uintptr_t>(weights) && g.sizes[0] == sizeof(weights));
  CHECK(g.bases[1] == reinterpret_cast<uintptr_t>(scratch) && g.sizes[1] == sizeof(scratch));
  CHECK(g.bases[2] == reinterpret_cast<uintptr_t>(fast) && g.sizes[2] == sizeof(fast));

  // No fast scratch: region 2 aliases scratch with size 0.
  CHECK(drv.invoke(cmd, sizeof(cmd), weights, sizeof(weights), scratch, sizeof(scratch), nullptr,
                   0, blob.get()) == Error::Ok);
  CHECK(g.bases[2] == reinterpret_cast<uintptr_t>(scratch) && g.sizes[2] == 0);

  // Driver failure: error returned, driver still released.
  g.rc = -1;
  CHECK(drv.invoke(cmd, sizeof(cmd), weights, sizeof(weights), scratch, sizeof(scratch), nullptr,
                   0, blob.get()) == Error::Internal);
  CHECK(g.releases == g.reserves);
  g.rc = 0;

  // No driver available.
  g.have_driver = false;
  const int invokes = g.invokes;
  CHECK(drv.invoke(cmd, sizeof(cmd), weights, sizeof(weights), scratch, sizeof(scratch), nullptr,
                   0, blob.get()) == Error::InvalidState);
  CHECK(g.invokes == invokes);
  CHECK(g.releases == g.reserves - 1); // nothing to release
  return harness::finish("test_driver_ethosu");
}
