// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// The model's shared front end, declared for the files that implement the
// operations: register file, feature-map addressing, region checks, the output
// stage and the error reporting. Each operation family lives in its own file
// (u55_conv.cpp, u55_pool.cpp, u55_elementwise.cpp, dma.cpp, u85_*.cpp); front_end.cpp
// parses the payload, decodes commands and dispatches to them.
#pragma once

#include <ethosu_ng/npu_model/npu_model.h>
#include <ethosu_ng/npu_model/registers.h>
#include <ethosu_ng/npu_model/registers_u85.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

namespace ethosu_ng {
namespace npu_model {
namespace detail {

// Exact dot product of `a` (int16) and 9-bit weights `b` (dot.cpp): the
// convolutions' inner product wherever every IFM value fits 16 bits.
int64_t dot16(const int16_t* a, const int16_t* b, int n);

// The window of one convolution output over an NHWC int16 IFM of h x w x c,
// its top-left tap at (y0, x0), as one row [ky][kx][c] (a weight row's
// layout), zero where a tap falls outside the IFM (dot.cpp).
void gather_window(const int16_t* in, int h, int w, int c, int y0, int x0, int kh, int kw,
                   int dil_y, int dil_x, int16_t* row);

// ``in`` as int16 in ``in16`` when every value fits (false otherwise, ``in16``
// untouched).
inline bool narrow_ifm(const std::vector<int32_t>& in, std::vector<int16_t>& in16) {
  for (const int32_t v : in) {
    if (v < INT16_MIN || v > INT16_MAX) {
      return false;
    }
  }
  in16.assign(in.begin(), in.end());
  return true;
}

// Round modes of OFM_PRECISION / IFM_PRECISION bits 14..15.
constexpr int kRoundDbl = 0; // double rounding (Vela: TFL)
constexpr int kRoundTruncate = 1;
constexpr int kRoundNatural = 2;
// Ethos-U85 DOUBLE_SYMMETRIC, accepted only where the shift is 0 (exact).
constexpr int kRoundExact = 3;
// Ethos-U85 TRUNCATE_TO_LOWER: toward minus infinity.
constexpr int kRoundFloor = 4;

// Ethos-U85 ACTIVATION functions (regor ethos_u85_interface.hpp
// activation_function) the model implements.
constexpr int kLutNone = 0;
constexpr int kLutU8U8 = 1;
constexpr int kLutS8S8 = 4;
constexpr int kLutS16S16 = 8;

// Resource bounds for one operation, beyond the region checks
// (Model::check_extent): the most elements one feature map may have and the
// most multiply-accumulates one kernel may do.
#ifndef ETHOSU_NG_NPU_MODEL_MAX_ELEMENTS_LOG2
#define ETHOSU_NG_NPU_MODEL_MAX_ELEMENTS_LOG2 26
#endif
#ifndef ETHOSU_NG_NPU_MODEL_MAX_MACS_LOG2
#define ETHOSU_NG_NPU_MODEL_MAX_MACS_LOG2 34
#endif
constexpr uint64_t kMaxElements = uint64_t{1} << ETHOSU_NG_NPU_MODEL_MAX_ELEMENTS_LOG2;
constexpr uint64_t kMaxMacs = uint64_t{1} << ETHOSU_NG_NPU_MODEL_MAX_MACS_LOG2;
// The most commands one run of an Ethos-U85 stream may execute: NPU_OP_BRANCH can loop, and a
// loop whose condition never turns false must end in an error (OutOfResources), not hang the
// host. 2^22 is over 17,000 iterations of upstream's while bodies (241 commands), beyond the
// TOSA reference model's 10,000, and ends a never-ending loop in 0.5 s (2 s at 2^24: over the
// fuzzer's 10 s per input under ASan).
#ifndef ETHOSU_NG_NPU_MODEL_MAX_COMMANDS_LOG2
#define ETHOSU_NG_NPU_MODEL_MAX_COMMANDS_LOG2 22
#endif
constexpr uint64_t kMaxCommandsExecuted = uint64_t{1} << ETHOSU_NG_NPU_MODEL_MAX_COMMANDS_LOG2;


struct FeatureMap {
  const char* name = "";
  int region = 0;
  uint64_t base[4] = {};
  int h0 = 1, h1 = 1, w0 = 1; // tile 0 height, tile 1 height, tile 0 width
  int h = 1, w = 1, c = 1; // extent the operation uses
  int64_t sx = 0, sy = 0, sc = 0;
  int esize = 1;
  int bits = 8;
  bool is_signed = true;
  bool brick = false; // NHCWB16
  // Ethos-U85 OFM: the stored axes in terms of the computed (h, w, c) ones
  // (OFM_PRECISION activation_transpose; 0 is HWC, the identity).
  int transpose = 0;
  // Ethos-U85 OFM: the axis written in reverse order (OFM_PRECISION
  // activation_reverse; 0 none, 1 H, 2 W, 3 C).
  int reverse = 0;
  // Ethos-U85 chaining buffer this map is (storage CHAINED), -1 for memory.
  int chain = -1;
  int32_t zp = 0;
  // The region's memory, when it may be accessed this way (null: every access
  // goes through region_span, which reports the error).
  uint8_t* mem = nullptr;
  size_t mem_size = 0;
};

// Multiplies by an unsigned 32-bit scale and shifts right with the given
// Multiplies by an unsigned 32-bit scale and shifts right with the given
// rounding (kRound*).
int64_t scale_round(int64_t v, uint32_t scale, int shift, int mode);

struct Reciprocal {
  uint32_t multiplier;
  int shift;
};

// TOSA reciprocal_scale: 1/n (n >= 1) as a multiplier in [2^30, 2^31) and a
// shift; divides an average pool's sum by its element count.
Reciprocal reciprocal_scale(uint32_t n);

// One element of `esize` bytes, sign- or zero-extended.
int64_t load(const uint8_t* p, int esize, bool is_signed);

class Model {
 public:
  Model(const Regions& r, char* msg, size_t cap, Stats* stats)
      : regions_(r), msg_(msg), cap_(cap), stats_(stats) {
    std::memset(r0_, 0, sizeof(r0_));
    std::memset(r1_data_, 0, sizeof(r1_data_));
    std::memset(r1_param_, 0, sizeof(r1_param_));
  }

  Error run(const uint8_t* payload, size_t size);

 private:
  // ---- errors
  Error fail(Error e, const char* fmt, ...) {
    if (msg_ != nullptr && cap_ > 0) {
      char detail[320];
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(detail, sizeof(detail), fmt, ap);
      va_end(ap);
      if (in_stream_) {
        snprintf(msg_, cap_, "command %lu (%s 0x%03x, param 0x%04x%s): %s",
                 static_cast<unsigned long>(cmd_index_),
                 cmd_name_ ? cmd_name_ : "unknown opcode", cmd_op_, cmd_param_,
                 cmd_payload_buf_, detail);
      } else {
        snprintf(msg_, cap_, "%s", detail);
      }
    }
    return e;
  }

  // ---- registers
  uint16_t p0(Cmd0 c) const {
    return r0_[c & 0x3ff];
  }
  int16_t s0(Cmd0 c) const {
    return static_cast<int16_t>(r0_[c & 0x3ff]);
  }
  uint32_t d1(Cmd1 c) const {
    return r1_data_[c & 0x3ff];
  }
  uint16_t p1(Cmd1 c) const {
    return r1_param_[c & 0x3ff];
  }
  uint64_t a1(Cmd1 c) const {
    return (static_cast<uint64_t>(r1_param_[c & 0x3ff] & 0xffu) << 32) | r1_data_[c & 0x3ff];
  }

  Error execute_stream(const uint8_t* words, size_t nwords, size_t first_index);
  // ETHOSU_NG_NPU_MODEL_TRACE=1 prints every operation's feature maps.
  void trace(const char* op, const FeatureMap& f) const {
    if (!trace_) {
      return;
    }
    fprintf(stderr,
            "npu_model: cmd %lu %s %s r%d h%d w%d c%d bits%d%s%s zp%ld tiles h0 %d h1 %d w0 %d "
            "base %llu %llu %llu %llu stride y%lld x%lld c%lld\n",
            static_cast<unsigned long>(cmd_index_), op, f.name, f.region, f.h, f.w, f.c, f.bits,
            f.is_signed ? "s" : "u", f.brick ? " NHCWB16" : "", static_cast<long>(f.zp), f.h0,
            f.h1, f.w0,
            static_cast<unsigned long long>(f.base[0]), static_cast<unsigned long long>(f.base[1]),
            static_cast<unsigned long long>(f.base[2]), static_cast<unsigned long long>(f.base[3]),
            static_cast<long long>(f.sy), static_cast<long long>(f.sx), static_cast<long long>(f.sc));
  }
  bool trace_ = std::getenv("ETHOSU_NG_NPU_MODEL_TRACE") != nullptr;
  // IFM_PAD_TOP/LEFT are 7-bit fields, IFM_PAD_BOTTOM/RIGHT 8-bit
  // (ethosu55_interface.h: npu_set_ifm_pad_*_t); the bits above are reserved.
  Error check_ifm_padding(int pt, int pl, int pb, int pr) {
    if (pt > 127 || pl > 127 || pb > 255 || pr > 255) {
      return fail(Error::InvalidProgram,
                  "IFM padding (t %d l %d b %d r %d): IFM_PAD_TOP and IFM_PAD_LEFT are 7-bit "
                  "fields (0..127), IFM_PAD_BOTTOM and IFM_PAD_RIGHT 8-bit (0..255)",
                  pt, pl, pb, pr);
    }
    return Error::Ok;
  }
  // ACC_FORMAT (ethos_u55_regs.acc_format): 0 32-bit and 1 40-bit integer accumulators, which
  // the model holds in 64 bits (exact while a sum fits the format); 2 is FP_S5_10.
  Error check_acc_format() {
    const uint16_t acc = p0(SET_ACC_FORMAT);
    if (acc > 2) {
      return fail(Error::InvalidProgram,
                  "ACC_FORMAT %u: reserved value (0 INT_32BIT, 1 INT_40BIT, 2 FP_S5_10)", acc);
    }
    if (acc == 2) {
      return fail(Error::NotSupported, "ACC_FORMAT 2 (FP_S5_10 accumulator) not modelled");
    }
    return Error::Ok;
  }
  // Ethos-U55/U65 register values checked where they are set: reserved bits
  // and modes the model does not implement (docs/npu-model.md, "Registers").
  Error check_u55_cmd0(uint16_t op, uint16_t param);
  Error check_u55_cmd1(uint16_t op, uint16_t param);
  Error reserved_bits(uint16_t param, uint16_t used);
  Error op_conv(bool depthwise);
  Error op_pool();
  Error op_elementwise();
  Error op_dma();
  // Ethos-U85 2D/3D DMA (DMA0_SRC_REGION stride_mode 1 or 2) and indexed DMA (idx_mode).
  Error u85_dma_strided(uint16_t src_reg, uint16_t dst_reg, int stride_mode);
  // Ethos-U55/U65 2D/3D DMA (DMA0_DST_REGION stride_mode 1 or 2).
  Error u65_dma_strided(uint16_t src_reg, uint16_t dst_reg);
  // Ethos-U85 (u85_*.cpp).
  Error u85_conv(bool depthwise);
  Error u85_matmul(FeatureMap& ifm, FeatureMap& ofm);
  Error u85_pool();
  Error u85_elementwise();
  Error u85_resize();
  Error u85_output_setup(FeatureMap& ofm);
  Error u85_write_output(const FeatureMap& ofm, int y, int x, int c, int64_t scaled);
  Error u85_rounding(const char* reg, int mode, int shift, int* round);
  Error u85_check_acc(bool ifm2_accumulator);
  Error u85_read_scales(int channels, std::vector<int64_t>& bias, std::vector<uint32_t>& scale,
                        std::vector<int>& shift);
  Error u85_chained_input(FeatureMap& f, uint16_t precision);
  Error read_chain(const FeatureMap& f, std::vector<int32_t>& out);

  // ---- memory
  Error region_span(int region, uint64_t addr, uint64_t len, bool write, const char* what,
                    uint8_t** out);
  Error feature_map(FeatureMap& f, bool ifm2, bool ofm);
  Error read_dense(const FeatureMap& f, std::vector<int32_t>& out);
  Error read_ifm(FeatureMap& f, int upscale, std::vector<int32_t>& out);
  Error element_ptr(const FeatureMap& f, int y, int x, int c, bool write, uint8_t** p);
  // Before anything is allocated or written: every tile of `f` lies inside its
  // region, and f holds no more elements than four tiles of its region can.
  Error check_extent(const FeatureMap& f, bool write);
  Error write_output(const FeatureMap& ofm, int y, int x, int c, int64_t scaled);
  Error output_setup(const FeatureMap& ofm);

  const Regions& regions_;
  char* msg_;
  size_t cap_;
  Stats* stats_;

  uint16_t r0_[0x400];
  uint32_t r1_data_[0x400];
  uint16_t r1_param_[0x400];

  // Internal SHRAM (LUTs are DMA'd into its end). Sized from the payload's
  // optimizer config.
  std::vector<uint8_t> shram_;
  int macs_per_cc_log2_ = 7;
  // Ethos-U85 payload (optimizer config product 2), and its core count.
  bool u85_ = false;
  bool u65_ = false; // Ethos-U65 (optimizer config product 1)
  int cores_ = 1;
  // Ethos-U85 chaining buffers (OFM storage CHAINED, OFM_REGION the index):
  // the output of one kernel held inside the NPU for the next one, as the
  // values it would have stored, dense HWC.
  struct ChainBuffer {
    int h = 0, w = 0, c = 0;
    bool written = false;
    std::vector<int64_t> values;
  };
  ChainBuffer chain_[8];

  // Decoded output stage of the current operation.
  int64_t act_lo_ = 0, act_hi_ = 0;
  int lut_index_ = -1;
  int lut_bits_ = 8; // Ethos-U55/U65: the current operation's OFM bits (its table's entry size)
  // Ethos-U85 LUT function of the current operation (ACTIVATION bits 0..4).
  int u85_lut_fn_ = 0;
  int ofm_round_ = 0;

  // ---- hazards
  // The model runs each command to completion in order; the NPU does not: a DMA runs beside
  // the kernels, and a kernel beside the DMAs, until a DMA_WAIT / KERNEL_WAIT lets at most
  // `param` of them stay in flight (and the hardware holds at most kMaxKernelsInFlight kernels
  // and dma_in_flight_cap_ DMAs). A command whose bytes overlap those of a command of the other
  // kind still in flight, one of the two writing, is a hazard: the stream's answer would
  // depend on timing. The rule Vela and regor emit their waits by
  // (register_command_stream_util.get_wait_dependency, EthosU55RCSGenerator AccessTracking).
  struct Span {
    uintptr_t lo, hi; // bytes [lo, hi) of the host buffer backing `region`
    int region;       // 0..2, or -1 for the NPU's internal memory (SHRAM / LUT memory)
    bool write;
  };
  struct InFlight {
    size_t cmd;
    const char* name;
    std::vector<Span> spans;
  };
  static constexpr size_t kMaxKernelsInFlight = 2;
  void begin_access();
  void note_span(int region, const uint8_t* p, uint64_t len, bool write);
  // Feature-map elements: the hull of each tile's touched bytes (IFM, IFM2, OFM).
  void note_element(const FeatureMap& f, int tile, bool write, const uint8_t* p) {
    const int slot = write ? 2 : (f.name[0] == 'I' && f.name[3] == '2' ? 1 : 0);
    uintptr_t* h = hull_[slot][tile];
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    h[0] = a < h[0] ? a : h[0];
    h[1] = a + f.esize > h[1] ? a + f.esize : h[1];
    hull_region_[slot] = f.region;
  }
  // Checks the current command's bytes against the other kind in flight, then puts it in
  // flight (dma: a DMA_START, else a kernel).
  Error end_access(bool dma);
  void wait_for(bool dma, uint16_t keep);
  // The buffer and size behind region 0 (weights), 1 (scratch) or 2 (fast scratch); false
  // for any other region.
  bool region_memory(int region, uint8_t** base, size_t* size) const;
  std::vector<Span> touched_;
  uintptr_t hull_[3][4][2] = {};
  int hull_region_[3] = {};
  std::deque<InFlight> dma_in_flight_, kernels_in_flight_;
  size_t dma_in_flight_cap_ = 1;

  // ---- Ethos-U85 control flow (NPU_OP_BRANCH)
  // Taken branch to byte offset `target` of the stream: sets *word to its word and *index to
  // the command index there, or an error when it is not the first word of a command.
  Error branch_target(const uint8_t* words, size_t nwords, uint32_t target, size_t* word,
                      size_t* index);
  // Command index of each word of the stream (kNotACommand for cmd1 payload words), built at
  // the first branch.
  static constexpr uint32_t kNotACommand = UINT32_MAX;
  std::vector<uint32_t> command_at_;
  // COND_STATUS.result_flag, which BRANCH_COND_RF_TRUE tests: regor has the kernel before the
  // branch compute the condition as a one-element OFM (GraphIrOptimiser::FixupControlFlow).
  // The model takes the flag from that element being non-zero; it counts the OFM elements the
  // last kernel wrote, and a conditional branch after anything else is NotSupported.
  int64_t last_ofm_value_ = 0;
  uint64_t ofm_values_written_ = 0;
  enum class FlagSource { None, Kernel, Dma } flag_source_ = FlagSource::None;
  uint64_t flag_ofm_values_ = 0;
  int64_t flag_value_ = 0;
  // Ends an Ethos-U85 kernel (dma false) or DMA for the result flag.
  void note_result(bool dma) {
    flag_source_ = dma ? FlagSource::Dma : FlagSource::Kernel;
    flag_ofm_values_ = ofm_values_written_;
    flag_value_ = last_ofm_value_;
    ofm_values_written_ = 0;
  }

  bool in_stream_ = false;
  size_t cmd_index_ = 0;
  uint16_t cmd_op_ = 0;
  uint16_t cmd_param_ = 0;
  const char* cmd_name_ = nullptr;
  char cmd_payload_buf_[32] = "";
};

} // namespace detail
} // namespace npu_model
} // namespace ethosu_ng
