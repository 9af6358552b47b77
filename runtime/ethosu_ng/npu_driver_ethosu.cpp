// SPDX-License-Identifier: BSD-3-Clause
// NpuDriver on the Ethos-U core driver (firmware).
//
// Built against the user's ethos-u-core-driver headers when CMake is given
// ETHOSU_NG_CORE_DRIVER_INCLUDE (ETHOSU_NG_HAVE_CORE_DRIVER_H is then defined),
// otherwise against our own declarations of the three functions we call.
#include <ethosu_ng/npu_driver.h>

#include <climits>

#include <executorch/runtime/platform/log.h>

#ifdef ETHOSU_NG_HAVE_CORE_DRIVER_H
#include <ethosu_driver.h>
#else
#include <ethosu_ng/ethosu_driver_decls.h>
#endif

namespace ethosu_ng {
namespace {

uint64_t addr(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

class EthosUDriver final : public NpuDriver {
 public:
  Error invoke(
      const uint8_t* cmd,
      size_t cmd_size,
      const uint8_t* weights,
      size_t weights_size,
      uint8_t* scratch,
      size_t scratch_size,
      uint8_t* fast_scratch,
      size_t fast_scratch_size,
      const Blob& blob) override {
    (void)blob;
    if (cmd_size > static_cast<size_t>(INT_MAX)) {
      ET_LOG(
          Error,
          "ethosu_ng: command stream of %lu bytes exceeds the driver's int "
          "size",
          static_cast<unsigned long>(cmd_size));
      return Error::InvalidArgument;
    }
    // Vela regions: 0 weights (read-only, in the blob), 1 scratch (IO and
    // intermediates), 2 fast scratch. Without fast scratch region 2 aliases
    // the scratch base with size 0, so a stray region-2 access stays in RAM.
    uint64_t bases[3] = {
        addr(weights),
        addr(scratch),
        addr(fast_scratch_size != 0 ? fast_scratch : scratch)};
    size_t sizes[3] = {weights_size, scratch_size, fast_scratch_size};

    struct ethosu_driver* drv = ethosu_reserve_driver();
    if (drv == nullptr) {
      ET_LOG(
          Error,
          "ethosu_ng: ethosu_reserve_driver() returned no driver (NPU not "
          "initialised with ethosu_init?)");
      return Error::InvalidState;
    }
    const int rc = ethosu_invoke_v3(
        drv, cmd, static_cast<int>(cmd_size), bases, sizes, 3, nullptr);
    ethosu_release_driver(drv);
    if (rc != 0) {
      ET_LOG(Error, "ethosu_ng: ethosu_invoke_v3 failed with %d", rc);
      return Error::Internal;
    }
    return Error::Ok;
  }
};

} // namespace

NpuDriver& platform_driver() {
  static EthosUDriver driver;
  return driver;
}

} // namespace ethosu_ng
