// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the Ethos-U55/U65/U85 NPU model (runtime/ethosu_ng/npu_model/)
// on fuzzed driver payloads, command streams, register values and regions.
//
// Input layout
//   [u32 payload_len][u32 weights_len][u32 scratch_len][u32 fast_len]
//   [payload][weights]
//   Lengths are clamped to what the input holds (payload, weights) and to
//   1 MiB (scratch) / 64 KiB (fast scratch). A payload that does not start
//   with the COP1 fourcc is wrapped in a valid U55-128 header (U85-256 when
//   bit 31 of scratch_len is set), so raw command words reach either command
//   decoder directly. The weights are also decoded as an Ethos-U85 fast
//   weight stream of (fast_len >> 16) weights. Seeds
//   (tests/runtime/corpus_npu_model/seeds/, tests/runtime/make_npu_model_seeds.py)
//   are real Vela payloads with their weights.
//
// Every region is a heap allocation of exactly its size (ASan sees any
// overrun); scratch is filled with a pattern derived from the input.
// Oracles besides ASan/UBSan: region 0 (weights) is never written, and a
// failing run leaves a non-empty message that names a command or the payload.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include <ethosu_ng/npu_model/npu_model.h>

namespace {

uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::vector<uint8_t> wrap(const uint8_t* cmds, size_t n, bool u85) {
  const uint32_t words = static_cast<uint32_t>(n / 4);
  const uint32_t head[] = {
      0x31504f43u, // COP1
      0x00000001u | (1u << 20), // config action
      // U85-256 (product 2, 2^8 MACs/cc) or U55-128 (2^7 MACs/cc, 24 KiB SHRAM)
      u85 ? (2u << 28) | (1u << 8) | (1u << 4) | 8u : (24u << 8) | 7u,
      0u, // ID word
      0x5u, 0x5u, 0x5u, // NOPs: command stream 16-byte aligned
      0x2u | ((words >> 16) & 0xffu) << 8 | (words & 0xffffu) << 16,
  };
  std::vector<uint8_t> out(sizeof(head) + static_cast<size_t>(words) * 4);
  std::memcpy(out.data(), head, sizeof(head));
  if (words) {
    std::memcpy(out.data() + sizeof(head), cmds, static_cast<size_t>(words) * 4);
  }
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) {
    return 0;
  }
  size_t payload_len = rd32(data);
  size_t weights_len = rd32(data + 4);
  const size_t scratch_len = rd32(data + 8) % (size_t{1} << 20);
  const bool wrap_u85 = rd32(data + 8) >> 31;
  const size_t fast_len = rd32(data + 12) % (size_t{1} << 16);
  const size_t fwd_count = rd32(data + 12) >> 16;
  const uint8_t* rest = data + 16;
  size_t left = size - 16;
  payload_len = payload_len > left ? left : payload_len;
  const uint8_t* payload_in = rest;
  left -= payload_len;
  weights_len = weights_len > left ? left : weights_len;
  const uint8_t* weights_in = rest + payload_len;

  std::vector<uint8_t> payload;
  if (payload_len >= 4 && rd32(payload_in) == 0x31504f43u) {
    payload.assign(payload_in, payload_in + payload_len);
  } else {
    payload = wrap(payload_in, payload_len, wrap_u85);
  }
  // Exact-size heap copies: an access one byte past a region is an ASan report.
  uint8_t* weights = static_cast<uint8_t*>(std::malloc(weights_len ? weights_len : 1));
  std::memcpy(weights, weights_in, weights_len);
  std::vector<uint8_t> weights_copy(weights_in, weights_in + weights_len);
  uint8_t* scratch = static_cast<uint8_t*>(std::malloc(scratch_len ? scratch_len : 1));
  // i * 131 + size (mod 256) repeats every 256 bytes: write one period, then copy it.
  for (size_t i = 0; i < scratch_len && i < 256; ++i) {
    scratch[i] = static_cast<uint8_t>(i * 131u + size);
  }
  for (size_t done = 256; done < scratch_len; done *= 2) {
    std::memcpy(scratch + done, scratch, std::min(done, scratch_len - done));
  }
  uint8_t* fast = fast_len ? static_cast<uint8_t*>(std::malloc(fast_len)) : nullptr;
  if (fast) {
    std::memset(fast, 0x5a, fast_len);
  }

  ethosu_ng::npu_model::Regions r;
  r.weights = weights;
  r.weights_size = weights_len;
  r.scratch = scratch;
  r.scratch_size = scratch_len;
  r.fast_scratch = fast;
  r.fast_scratch_size = fast_len;
  char msg[512];
  const auto e = ethosu_ng::npu_model::run_payload(
      payload.data(), payload.size(), r, msg, sizeof(msg), nullptr);
  if (getenv("FUZZ_NPU_MODEL_LOG")) {
    fprintf(stderr, "run_payload: %d %s\n", static_cast<int>(e), msg);
  }
  if (e != ethosu_ng::npu_model::Error::Ok && msg[0] == '\0') {
    fprintf(stderr, "fuzz_npu_model: error %d without a message\n", static_cast<int>(e));
    abort();
  }
  if (weights_len && std::memcmp(weights, weights_copy.data(), weights_len) != 0) {
    fprintf(stderr, "fuzz_npu_model: region 0 (weights) was written\n");
    abort();
  }
  std::vector<int16_t> fwd;
  char fwd_msg[200];
  if (ethosu_ng::npu_model::fwd_decode(weights, weights_len, fwd_count, fwd, fwd_msg,
                                       sizeof(fwd_msg))
          ? fwd.size() != fwd_count
          : fwd_msg[0] == '\0') {
    fprintf(stderr, "fuzz_npu_model: fwd_decode returned %u of %u weights or no message\n",
            static_cast<unsigned>(fwd.size()), static_cast<unsigned>(fwd_count));
    abort();
  }
  std::free(weights);
  std::free(scratch);
  std::free(fast);
  return 0;
}
