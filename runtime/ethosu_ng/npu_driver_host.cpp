// NpuDriver for the host (no NPU): runs the delegate's embedded TOSA section
// through a callback registered from Python (the TOSA reference model).
//
// The callback sees exactly what the NPU would: inputs in scratch at their IO
// offsets in the NPU layout, and writes outputs there, so the backend's
// validation and layout copies are exercised unchanged on the host.
#include <ethosu_ng/host_api.h>
#include <ethosu_ng/npu_driver.h>

#include <atomic>
#include <cstring>
#include <vector>

#include <executorch/runtime/platform/log.h>

namespace ethosu_ng {
namespace {

std::atomic<ethosu_ng_tosa_callback> g_callback{nullptr};
std::atomic<uint64_t> g_invokes{0};

struct TensorArgs {
  std::vector<void*> ptrs;
  std::vector<int> dtypes;
  std::vector<int> ranks;
  std::vector<int64_t> shapes;
  std::vector<int64_t> byte_sizes;

  void add(uint8_t* scratch, const IoEntry& e) {
    ptrs.push_back(scratch + e.offset);
    dtypes.push_back(e.dtype);
    ranks.push_back(e.rank);
    for (int i = 0; i < kMaxRank; ++i) {
      // Memory order of the NPU buffer = the TOSA tensor's shape.
      shapes.push_back(i < e.rank ? int64_t{e.shape[e.dim_order[i]]} : 0);
    }
    byte_sizes.push_back(e.byte_size);
  }
};

class HostTosaDriver final : public NpuDriver {
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
    (void)cmd;
    (void)cmd_size;
    (void)weights;
    (void)weights_size;
    (void)scratch_size;
    (void)fast_scratch;
    (void)fast_scratch_size;
    if (!blob.tosa().present()) {
      ET_LOG(
          Error,
          "EthosUNGBackend(host): delegate has no TOSA section; there is no "
          "NPU on the host, so re-export with "
          "EthosUNGCompileSpec(..., embed_tosa=True) to run it here");
      return Error::NotSupported;
    }
    const ethosu_ng_tosa_callback cb = g_callback.load();
    if (cb == nullptr) {
      ET_LOG(
          Error,
          "EthosUNGBackend(host): no TOSA callback registered; call "
          "ethosu_ng.runtime.load_host_runtime() first");
      return Error::InvalidState;
    }
    TensorArgs in;
    TensorArgs out;
    for (size_t i = 0; i < blob.num_inputs(); ++i) {
      in.add(scratch, blob.input(i));
    }
    for (size_t i = 0; i < blob.num_outputs(); ++i) {
      out.add(scratch, blob.output(i));
    }
    char err[512];
    err[0] = '\0';
    ++g_invokes;
    const int rc = cb(
        blob.tosa().data,
        blob.tosa().size,
        static_cast<int>(blob.num_inputs()),
        const_cast<const void* const*>(in.ptrs.data()),
        in.dtypes.data(),
        in.ranks.data(),
        in.shapes.data(),
        in.byte_sizes.data(),
        static_cast<int>(blob.num_outputs()),
        out.ptrs.data(),
        out.dtypes.data(),
        out.ranks.data(),
        out.shapes.data(),
        out.byte_sizes.data(),
        err,
        sizeof(err));
    if (rc != 0) {
      err[sizeof(err) - 1] = '\0';
      ET_LOG(
          Error,
          "EthosUNGBackend(host): TOSA callback failed (%d): %s",
          rc,
          err[0] ? err : "no message");
      return Error::Internal;
    }
    return Error::Ok;
  }
};

} // namespace

NpuDriver& platform_driver() {
  static HostTosaDriver driver;
  return driver;
}

} // namespace ethosu_ng

extern "C" {

void ethosu_ng_set_tosa_callback(ethosu_ng_tosa_callback cb) {
  ethosu_ng::g_callback.store(cb);
}

int ethosu_ng_host_abi_version(void) {
  return ETHOSU_NG_HOST_ABI_VERSION;
}

uint64_t ethosu_ng_host_invoke_count(void) {
  return ethosu_ng::g_invokes.load();
}

} // extern "C"
