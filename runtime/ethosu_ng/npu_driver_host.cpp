// SPDX-License-Identifier: BSD-3-Clause
// NpuDriver for the host (no NPU). Per call, one of:
//  - the delegate's embedded TOSA section through a callback registered from
//    Python (the TOSA reference model), or
//  - the command stream on the Ethos-U55/U65 functional model (npu_model/),
//    with the same regions ethosu_invoke_v3 would get.
//
// Both see exactly what the NPU would: inputs in scratch at their IO offsets
// in the NPU layout, outputs written there, so the backend's validation and
// layout copies are exercised unchanged on the host.
#include <ethosu_ng/host_api.h>
#include <ethosu_ng/npu_driver.h>
#include <ethosu_ng/npu_model/npu_model.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include <executorch/runtime/platform/log.h>

namespace ethosu_ng {
namespace {

std::atomic<ethosu_ng_tosa_callback> g_callback{nullptr};
std::atomic<uint64_t> g_invokes{0};
std::atomic<int> g_npu_mode{ETHOSU_NG_NPU_TOSA};
std::atomic<uint64_t> g_stats[5];

void store_stats(const npu_model::Stats& st) {
  g_stats[0].store(st.commands);
  g_stats[1].store(st.ops);
  g_stats[2].store(st.dmas);
  g_stats[3].store(st.macs);
  g_stats[4].store(st.aliased_ofm_ops);
}

Error run_model(
    const uint8_t* cmd,
    size_t cmd_size,
    const uint8_t* weights,
    size_t weights_size,
    uint8_t* scratch,
    size_t scratch_size,
    uint8_t* fast_scratch,
    size_t fast_scratch_size) {
  npu_model::Regions r;
  r.weights = weights;
  r.weights_size = weights_size;
  r.scratch = scratch;
  r.scratch_size = scratch_size;
  r.fast_scratch = fast_scratch;
  r.fast_scratch_size = fast_scratch_size;
  npu_model::Stats st;
  char msg[512];
  const Error e = npu_model::run_payload(cmd, cmd_size, r, msg, sizeof(msg), &st);
  store_stats(st);
  if (e != Error::Ok) {
    ET_LOG(Error, "EthosUNGBackend(host): NPU model: %s", msg);
  }
  return e;
}

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
    if (g_npu_mode.load() == ETHOSU_NG_NPU_MODEL) {
      ++g_invokes;
      return run_model(
          cmd, cmd_size, weights, weights_size, scratch, scratch_size, fast_scratch,
          fast_scratch_size);
    }
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

void ethosu_ng_set_npu_mode(int mode) {
  ethosu_ng::g_npu_mode.store(mode == ETHOSU_NG_NPU_MODEL ? ETHOSU_NG_NPU_MODEL : ETHOSU_NG_NPU_TOSA);
}

int ethosu_ng_get_npu_mode(void) {
  return ethosu_ng::g_npu_mode.load();
}

int ethosu_ng_npu_model_run(
    const uint8_t* payload,
    size_t payload_size,
    const uint8_t* weights,
    size_t weights_size,
    uint8_t* scratch,
    size_t scratch_size,
    uint8_t* fast_scratch,
    size_t fast_scratch_size,
    char* err,
    size_t err_cap) {
  ethosu_ng::npu_model::Regions r;
  r.weights = weights;
  r.weights_size = weights_size;
  r.scratch = scratch;
  r.scratch_size = scratch_size;
  r.fast_scratch = fast_scratch;
  r.fast_scratch_size = fast_scratch_size;
  ethosu_ng::npu_model::Stats st;
  const ethosu_ng::Error e =
      ethosu_ng::npu_model::run_payload(payload, payload_size, r, err, err_cap, &st);
  ethosu_ng::store_stats(st);
  return static_cast<int>(e);
}

void ethosu_ng_npu_model_stats(uint64_t out[5]) {
  for (int i = 0; i < 5; ++i) {
    out[i] = ethosu_ng::g_stats[i].load();
  }
}

int64_t ethosu_ng_mlw_decode(
    const uint8_t* in,
    size_t in_size,
    int16_t* out,
    size_t out_cap,
    char* err,
    size_t err_cap) {
  std::vector<int16_t> w;
  if (!ethosu_ng::npu_model::mlw_decode(in, in_size, w, err, err_cap)) {
    return -1;
  }
  std::memcpy(out, w.data(), std::min(out_cap, w.size()) * sizeof(int16_t));
  return static_cast<int64_t>(w.size());
}

} // extern "C"
