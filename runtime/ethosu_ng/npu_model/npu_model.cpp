// Ethos-U55/U65 functional model: driver payload parser, register state
// machine and the NPU operations. See npu_model.h and docs/npu-model.md.
#include <ethosu_ng/npu_model/npu_model.h>
#include <ethosu_ng/npu_model/registers.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ethosu_ng {
namespace npu_model {

// ------------------------------------------------------------------ names
const char* cmd0_name(uint16_t op) {
  switch (op) {
#define N(x) \
  case x:    \
    return "NPU_" #x;
    N(OP_STOP) N(OP_IRQ) N(OP_CONV) N(OP_DEPTHWISE) N(OP_POOL) N(OP_ELEMENTWISE)
    N(OP_DMA_START) N(OP_DMA_WAIT) N(OP_KERNEL_WAIT) N(OP_PMU_MASK)
    N(SET_IFM_PAD_TOP) N(SET_IFM_PAD_LEFT) N(SET_IFM_PAD_RIGHT) N(SET_IFM_PAD_BOTTOM)
    N(SET_IFM_DEPTH_M1) N(SET_IFM_PRECISION) N(SET_IFM_UPSCALE) N(SET_IFM_ZERO_POINT)
    N(SET_IFM_WIDTH0_M1) N(SET_IFM_HEIGHT0_M1) N(SET_IFM_HEIGHT1_M1) N(SET_IFM_IB_END)
    N(SET_IFM_REGION) N(SET_OFM_WIDTH_M1) N(SET_OFM_HEIGHT_M1) N(SET_OFM_DEPTH_M1)
    N(SET_OFM_PRECISION) N(SET_OFM_BLK_WIDTH_M1) N(SET_OFM_BLK_HEIGHT_M1)
    N(SET_OFM_BLK_DEPTH_M1) N(SET_OFM_ZERO_POINT) N(SET_OFM_WIDTH0_M1)
    N(SET_OFM_HEIGHT0_M1) N(SET_OFM_HEIGHT1_M1) N(SET_OFM_REGION)
    N(SET_KERNEL_WIDTH_M1) N(SET_KERNEL_HEIGHT_M1) N(SET_KERNEL_STRIDE)
    N(SET_PARALLEL_MODE) N(SET_ACC_FORMAT) N(SET_ACTIVATION) N(SET_ACTIVATION_MIN)
    N(SET_ACTIVATION_MAX) N(SET_WEIGHT_REGION) N(SET_SCALE_REGION) N(SET_AB_START)
    N(SET_BLOCKDEP) N(SET_DMA0_SRC_REGION) N(SET_DMA0_DST_REGION) N(SET_DMA0_SIZE0)
    N(SET_DMA0_SIZE1) N(SET_IFM2_BROADCAST) N(SET_IFM2_SCALAR) N(SET_IFM2_PRECISION)
    N(SET_IFM2_ZERO_POINT) N(SET_IFM2_WIDTH0_M1) N(SET_IFM2_HEIGHT0_M1)
    N(SET_IFM2_HEIGHT1_M1) N(SET_IFM2_IB_START) N(SET_IFM2_REGION)
#undef N
    default:
      return nullptr;
  }
}

const char* cmd1_name(uint16_t op) {
  switch (op) {
#define N(x) \
  case x:    \
    return "NPU_" #x;
    N(SET_IFM_BASE0) N(SET_IFM_BASE1) N(SET_IFM_BASE2) N(SET_IFM_BASE3)
    N(SET_IFM_STRIDE_X) N(SET_IFM_STRIDE_Y) N(SET_IFM_STRIDE_C) N(SET_OFM_BASE0)
    N(SET_OFM_BASE1) N(SET_OFM_BASE2) N(SET_OFM_BASE3) N(SET_OFM_STRIDE_X)
    N(SET_OFM_STRIDE_Y) N(SET_OFM_STRIDE_C) N(SET_WEIGHT_BASE) N(SET_WEIGHT_LENGTH)
    N(SET_SCALE_BASE) N(SET_SCALE_LENGTH) N(SET_OFM_SCALE) N(SET_OPA_SCALE)
    N(SET_OPB_SCALE) N(SET_DMA0_SRC) N(SET_DMA0_DST) N(SET_DMA0_LEN) N(SET_DMA0_SKIP0)
    N(SET_DMA0_SKIP1) N(SET_IFM2_BASE0) N(SET_IFM2_BASE1) N(SET_IFM2_BASE2)
    N(SET_IFM2_BASE3) N(SET_IFM2_STRIDE_X) N(SET_IFM2_STRIDE_Y) N(SET_IFM2_STRIDE_C)
    N(SET_WEIGHT1_BASE) N(SET_WEIGHT1_LENGTH) N(SET_SCALE1_BASE) N(SET_SCALE1_LENGTH)
#undef N
    default:
      return nullptr;
  }
}

namespace {

// Driver-action tags of the payload (Vela driver_actions.py, and the core
// driver that consumes them).
constexpr uint32_t kFourccCop1 = 0x31504f43u; // "COP1"
constexpr uint8_t kDaReserved = 0x00;
constexpr uint8_t kDaConfig = 0x01;
constexpr uint8_t kDaCmdStream = 0x02;
constexpr uint8_t kDaReadApb = 0x03;
constexpr uint8_t kDaDumpShram = 0x04;
constexpr uint8_t kDaNop = 0x05;

// Round modes of OFM_PRECISION / IFM_PRECISION bits 14..15.
constexpr int kRoundDbl = 0; // double rounding (Vela: TFL)
constexpr int kRoundTruncate = 1;
constexpr int kRoundNatural = 2;

// Resource bounds for one operation: a hostile stream may describe feature
// maps of 65536^3 elements; the model refuses instead of allocating them.
// The fuzz build lowers them so one input cannot run for minutes.
#ifndef ETHOSU_NG_NPU_MODEL_MAX_ELEMENTS_LOG2
#define ETHOSU_NG_NPU_MODEL_MAX_ELEMENTS_LOG2 26
#endif
#ifndef ETHOSU_NG_NPU_MODEL_MAX_MACS_LOG2
#define ETHOSU_NG_NPU_MODEL_MAX_MACS_LOG2 34
#endif
constexpr uint64_t kMaxElements = uint64_t{1} << ETHOSU_NG_NPU_MODEL_MAX_ELEMENTS_LOG2;
constexpr uint64_t kMaxMacs = uint64_t{1} << ETHOSU_NG_NPU_MODEL_MAX_MACS_LOG2;

enum class Elementwise : uint16_t {
  kMul = 0,
  kAdd = 1,
  kSub = 2,
  kMin = 3,
  kMax = 4,
  kLrelu = 5,
  kAbs = 6,
  kClz = 7,
  kShr = 8,
  kShl = 9,
};

const char* elementwise_name(uint16_t m) {
  static const char* const names[] = {
      "MUL", "ADD", "SUB", "MIN", "MAX", "LRELU", "ABS", "CLZ", "SHR", "SHL"};
  return m < 10 ? names[m] : "?";
}

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
  int32_t zp = 0;
  // The region's memory, when it may be accessed this way (null: every access
  // goes through region_span, which reports the error).
  uint8_t* mem = nullptr;
  size_t mem_size = 0;
};

// Multiplies by an unsigned 32-bit scale and shifts right with the given
// rounding. 128-bit product: accumulators reach 40 bits and scales 32.
int64_t scale_round(int64_t v, uint32_t scale, int shift, int mode) {
  __int128 p = static_cast<__int128>(v) * scale;
  if (shift > 0) {
    switch (mode) {
      case kRoundTruncate:
        p = p >= 0 ? (p >> shift) : -((-p) >> shift);
        break;
      case kRoundNatural:
        p = (p + (static_cast<__int128>(1) << (shift - 1))) >> shift;
        break;
      case kRoundDbl:
      default: { // TOSA apply_scale_32 with double_round
        __int128 r = static_cast<__int128>(1) << (shift - 1);
        if (shift > 31) {
          r += v >= 0 ? (__int128{1} << 30) : -(__int128{1} << 30);
        }
        p = (p + r) >> shift;
        break;
      }
    }
  }
  const __int128 lim = static_cast<__int128>(1) << 62;
  if (p > lim) {
    p = lim;
  } else if (p < -lim) {
    p = -lim;
  }
  return static_cast<int64_t>(p);
}

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
        snprintf(msg_, cap_, "command %zu (%s 0x%03x, param 0x%04x%s): %s", cmd_index_,
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
            "npu_model: cmd %zu %s %s r%d h%d w%d c%d bits%d%s%s zp%d tiles h0 %d h1 %d w0 %d "
            "base %llu %llu %llu %llu stride y%lld x%lld c%lld\n",
            cmd_index_, op, f.name, f.region, f.h, f.w, f.c, f.bits, f.is_signed ? "s" : "u",
            f.brick ? " NHCWB16" : "", f.zp, f.h0, f.h1, f.w0,
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
                  "IFM padding (t %d l %d b %d r %d): IFM_PAD_TOP/LEFT are 7-bit fields (0..127), "
                  "IFM_PAD_BOTTOM/RIGHT 8-bit (0..255)",
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
  Error op_conv(bool depthwise);
  Error op_pool();
  Error op_elementwise();
  Error op_dma();

  // ---- memory
  Error region_span(int region, uint64_t addr, uint64_t len, bool write, const char* what,
                    uint8_t** out);
  Error feature_map(FeatureMap& f, bool ifm2, bool ofm);
  Error read_dense(const FeatureMap& f, std::vector<int32_t>& out);
  Error read_ifm(FeatureMap& f, int upscale, std::vector<int32_t>& out);
  Error element_ptr(const FeatureMap& f, int y, int x, int c, bool write, uint8_t** p);
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

  // Decoded output stage of the current operation.
  int64_t act_lo_ = 0, act_hi_ = 0;
  int lut_index_ = -1;
  int ofm_round_ = 0;

  bool in_stream_ = false;
  size_t cmd_index_ = 0;
  uint16_t cmd_op_ = 0;
  uint16_t cmd_param_ = 0;
  const char* cmd_name_ = nullptr;
  char cmd_payload_buf_[32] = "";
};

// ------------------------------------------------------------ payload
Error Model::run(const uint8_t* payload, size_t size) {
  if (payload == nullptr || size < 4 || size % 4 != 0) {
    return fail(Error::InvalidProgram,
                "driver payload of %zu bytes: not a whole number of 32-bit words", size);
  }
  const size_t nwords = size / 4;
  auto word = [&](size_t i) {
    uint32_t w;
    std::memcpy(&w, payload + 4 * i, 4);
    return w;
  };
  if (word(0) != kFourccCop1) {
    return fail(Error::InvalidProgram, "driver payload: word 0 is 0x%08x, not the COP1 fourcc",
                word(0));
  }
  bool have_config = false;
  bool ran_stream = false;
  size_t i = 1;
  while (i < nwords) {
    const uint32_t w = word(i);
    const uint8_t tag = w & 0xff;
    const uint32_t reserved = (w >> 8) & 0xff;
    const uint32_t param = w >> 16;
    switch (tag) {
      case kDaConfig: {
        if (i + 2 >= nwords) {
          return fail(Error::InvalidProgram,
                      "driver payload word %zu: optimizer config truncated (%zu words left)", i,
                      nwords - i - 1);
        }
        const uint32_t cfg = word(i + 1);
        const int macs = cfg & 0xf;
        const int shram_kb = (cfg >> 8) & 0xff;
        const int product = (cfg >> 28) & 0xf;
        if (product > 1 || macs < 5 || macs > 8 || shram_kb < 16 || shram_kb > 96) {
          return fail(Error::NotSupported,
                      "driver payload word %zu: optimizer config 0x%08x (product %d, "
                      "log2 MACs/cc %d, SHRAM %d KiB) is not an Ethos-U55/U65 this model knows",
                      i, cfg, product, macs, shram_kb);
        }
        macs_per_cc_log2_ = macs;
        shram_.assign(static_cast<size_t>(shram_kb) * 1024, 0);
        have_config = true;
        i += 3;
        break;
      }
      case kDaCmdStream: {
        const size_t len = param | (reserved << 16);
        if (!have_config) {
          return fail(Error::InvalidProgram,
                      "driver payload word %zu: command stream before the optimizer config", i);
        }
        if (len > nwords - i - 1) {
          return fail(Error::InvalidProgram,
                      "driver payload word %zu: command stream of %zu words, only %zu follow", i,
                      len, nwords - i - 1);
        }
        Error e = execute_stream(payload + 4 * (i + 1), len, 0);
        if (e != Error::Ok) {
          return e;
        }
        ran_stream = true;
        i += 1 + len;
        break;
      }
      case kDaNop:
      case kDaReadApb: // register read-back for the host: nothing to model
      case kDaDumpShram:
        ++i;
        break;
      case kDaReserved:
      default:
        return fail(Error::InvalidProgram,
                    "driver payload word %zu: unknown driver action 0x%02x (word 0x%08x)", i, tag,
                    w);
    }
  }
  if (!ran_stream) {
    return fail(Error::InvalidProgram, "driver payload holds no command stream");
  }
  return Error::Ok;
}

Error Model::execute_stream(const uint8_t* words, size_t nwords, size_t first_index) {
  in_stream_ = true;
  size_t i = 0;
  size_t index = first_index;
  while (i < nwords) {
    uint32_t w;
    std::memcpy(&w, words + 4 * i, 4);
    const uint16_t code = w & 0xffff;
    const uint16_t param = w >> 16;
    const uint16_t op = code & 0x3ff;
    const uint16_t ctrl = code >> 14;
    cmd_index_ = index;
    cmd_op_ = op;
    cmd_param_ = param;
    cmd_payload_buf_[0] = '\0';
    if (stats_) {
      ++stats_->commands;
    }
    if (ctrl == 1) {
      cmd_name_ = cmd1_name(op);
      if (i + 1 >= nwords) {
        return fail(Error::InvalidProgram, "stream ends before the payload word of a cmd1");
      }
      uint32_t data;
      std::memcpy(&data, words + 4 * (i + 1), 4);
      snprintf(cmd_payload_buf_, sizeof(cmd_payload_buf_), ", payload 0x%08x", data);
      if (cmd_name_ == nullptr || (code & 0x3c00) != 0) {
        return fail(Error::InvalidProgram, "unknown cmd1 opcode (word 0x%08x)", w);
      }
      r1_data_[op] = data;
      r1_param_[op] = param;
      i += 2;
    } else if (ctrl == 0) {
      cmd_name_ = cmd0_name(op);
      if (cmd_name_ == nullptr || (code & 0x3c00) != 0) {
        return fail(Error::InvalidProgram, "unknown cmd0 opcode (word 0x%08x)", w);
      }
      i += 1;
      Error e = Error::Ok;
      switch (op) {
        case OP_STOP:
          in_stream_ = false;
          return Error::Ok;
        case OP_IRQ:
        case OP_DMA_WAIT:
        case OP_KERNEL_WAIT:
        case OP_PMU_MASK:
          // Synchronisation and profiling: the model runs every command to
          // completion in order, so there is nothing to wait for.
          break;
        case OP_CONV:
          e = check_acc_format();
          e = e == Error::Ok ? op_conv(false) : e;
          break;
        case OP_DEPTHWISE:
          e = check_acc_format();
          e = e == Error::Ok ? op_conv(true) : e;
          break;
        case OP_POOL:
          e = check_acc_format();
          e = e == Error::Ok ? op_pool() : e;
          break;
        case OP_ELEMENTWISE:
          e = check_acc_format();
          e = e == Error::Ok ? op_elementwise() : e;
          break;
        case OP_DMA_START:
          e = op_dma();
          break;
        default:
          r0_[op] = param;
          break;
      }
      if (e != Error::Ok) {
        return e;
      }
    } else {
      cmd_name_ = nullptr;
      return fail(Error::InvalidProgram, "invalid command control bits %u (word 0x%08x)", ctrl,
                  w);
    }
    ++index;
  }
  in_stream_ = false;
  return Error::Ok;
}

// ------------------------------------------------------------- memory
Error Model::region_span(int region, uint64_t addr, uint64_t len, bool write, const char* what,
                         uint8_t** out) {
  uint8_t* base = nullptr;
  size_t size = 0;
  switch (region) {
    case 0:
      if (write) {
        return fail(Error::InvalidProgram,
                    "%s: write to region 0 (weights are read-only) at 0x%llx (+%llu)", what,
                    static_cast<unsigned long long>(addr), static_cast<unsigned long long>(len));
      }
      base = const_cast<uint8_t*>(regions_.weights);
      size = regions_.weights_size;
      break;
    case 1:
      base = regions_.scratch;
      size = regions_.scratch_size;
      break;
    case 2:
      base = regions_.fast_scratch;
      size = regions_.fast_scratch_size;
      break;
    default:
      return fail(Error::InvalidProgram, "%s: region %d is not provided (only 0, 1, 2)", what,
                  region);
  }
  if (base == nullptr || addr > size || len > size - addr) {
    return fail(Error::InvalidProgram,
                "%s: address 0x%llx (+%llu bytes) outside region %d of %zu bytes", what,
                static_cast<unsigned long long>(addr), static_cast<unsigned long long>(len),
                region, size);
  }
  *out = base + addr;
  return Error::Ok;
}

// Reads the registers of one feature map. IFM/IFM2 extents are set by the
// caller; the OFM's come from its registers.
Error Model::feature_map(FeatureMap& f, bool ifm2, bool ofm) {
  uint16_t prec;
  if (ofm) {
    f.name = "OFM";
    f.region = p0(SET_OFM_REGION) & 0x7;
    f.base[0] = a1(SET_OFM_BASE0);
    f.base[1] = a1(SET_OFM_BASE1);
    f.base[2] = a1(SET_OFM_BASE2);
    f.base[3] = a1(SET_OFM_BASE3);
    f.h0 = p0(SET_OFM_HEIGHT0_M1) + 1;
    f.h1 = p0(SET_OFM_HEIGHT1_M1) + 1;
    f.w0 = p0(SET_OFM_WIDTH0_M1) + 1;
    f.h = p0(SET_OFM_HEIGHT_M1) + 1;
    f.w = p0(SET_OFM_WIDTH_M1) + 1;
    f.c = p0(SET_OFM_DEPTH_M1) + 1;
    f.sx = static_cast<int64_t>(a1(SET_OFM_STRIDE_X));
    f.sy = static_cast<int64_t>(a1(SET_OFM_STRIDE_Y));
    f.sc = static_cast<int64_t>(a1(SET_OFM_STRIDE_C));
    prec = p0(SET_OFM_PRECISION);
    f.is_signed = prec & 1;
    const int p = (prec >> 1) & 3;
    if (p == 3) {
      return fail(Error::NotSupported, "OFM_PRECISION 0x%04x: 64-bit OFM not modelled", prec);
    }
    f.bits = 8 << p;
    f.brick = ((prec >> 6) & 3) == 1;
    if (((prec >> 6) & 3) > 1) {
      return fail(Error::InvalidProgram, "OFM_PRECISION 0x%04x: reserved format", prec);
    }
    const uint16_t zp = p0(SET_OFM_ZERO_POINT);
    f.zp = f.is_signed ? static_cast<int16_t>(zp) : zp;
  } else {
    f.name = ifm2 ? "IFM2" : "IFM";
    f.region = (ifm2 ? p0(SET_IFM2_REGION) : p0(SET_IFM_REGION)) & 0x7;
    const Cmd1 b0 = ifm2 ? SET_IFM2_BASE0 : SET_IFM_BASE0;
    for (int t = 0; t < 4; ++t) {
      f.base[t] = a1(static_cast<Cmd1>(b0 + t));
    }
    f.h0 = (ifm2 ? p0(SET_IFM2_HEIGHT0_M1) : p0(SET_IFM_HEIGHT0_M1)) + 1;
    f.h1 = (ifm2 ? p0(SET_IFM2_HEIGHT1_M1) : p0(SET_IFM_HEIGHT1_M1)) + 1;
    f.w0 = (ifm2 ? p0(SET_IFM2_WIDTH0_M1) : p0(SET_IFM_WIDTH0_M1)) + 1;
    f.sx = static_cast<int64_t>(a1(ifm2 ? SET_IFM2_STRIDE_X : SET_IFM_STRIDE_X));
    f.sy = static_cast<int64_t>(a1(ifm2 ? SET_IFM2_STRIDE_Y : SET_IFM_STRIDE_Y));
    f.sc = static_cast<int64_t>(a1(ifm2 ? SET_IFM2_STRIDE_C : SET_IFM_STRIDE_C));
    prec = ifm2 ? p0(SET_IFM2_PRECISION) : p0(SET_IFM_PRECISION);
    f.is_signed = prec & 1;
    const int p = (prec >> 2) & 3;
    if (p == 3) {
      return fail(Error::NotSupported, "%s_PRECISION 0x%04x: 64-bit input not modelled", f.name,
                  prec);
    }
    f.bits = 8 << p;
    if (((prec >> 6) & 3) > 1) {
      return fail(Error::InvalidProgram, "%s_PRECISION 0x%04x: reserved format", f.name, prec);
    }
    f.brick = ((prec >> 6) & 3) == 1;
    const uint16_t zp = ifm2 ? p0(SET_IFM2_ZERO_POINT) : p0(SET_IFM_ZERO_POINT);
    f.zp = f.is_signed ? static_cast<int16_t>(zp) : zp;
  }
  f.esize = f.bits / 8;
  switch (f.region) {
    case 0:
      // Only reads: region 0 is read-only, writes take the checked path.
      if (!ofm) {
        f.mem = const_cast<uint8_t*>(regions_.weights);
        f.mem_size = regions_.weights_size;
      }
      break;
    case 1:
      f.mem = regions_.scratch;
      f.mem_size = regions_.scratch_size;
      break;
    case 2:
      f.mem = regions_.fast_scratch;
      f.mem_size = regions_.fast_scratch_size;
      break;
    default:
      break;
  }
  return Error::Ok;
}

Error Model::element_ptr(const FeatureMap& f, int y, int x, int c, bool write, uint8_t** p) {
  int t = 0;
  int ty = y, tx = x;
  if (x >= f.w0) {
    tx -= f.w0;
    t = 1;
    if (y >= f.h1) {
      ty -= f.h1;
      t = 3;
    }
  } else if (y >= f.h0) {
    ty -= f.h0;
    t = 2;
  }
  const int64_t coff = f.brick ? (c / 16) * f.sc + (c % 16) * f.esize : int64_t{c} * f.esize;
  const __int128 addr = static_cast<__int128>(f.base[t]) + static_cast<__int128>(ty) * f.sy +
                        static_cast<__int128>(tx) * f.sx + coff;
  // Fast path: the region is resolved once per feature map.
  if (f.mem != nullptr && addr >= 0 && addr + f.esize <= static_cast<__int128>(f.mem_size)) {
    *p = f.mem + static_cast<size_t>(addr);
    return Error::Ok;
  }
  char what[96];
  snprintf(what, sizeof(what), "%s element (y %d, x %d, c %d) in tile %d", f.name, y, x, c, t);
  if (addr < 0 || addr > (static_cast<__int128>(1) << 40)) {
    return fail(Error::InvalidProgram,
                "%s: address out of range (base 0x%llx, strides y %lld x %lld c %lld)", what,
                static_cast<unsigned long long>(f.base[t]), static_cast<long long>(f.sy),
                static_cast<long long>(f.sx), static_cast<long long>(f.sc));
  }
  return region_span(f.region, static_cast<uint64_t>(addr), f.esize, write, what, p);
}

int64_t load(const uint8_t* p, int esize, bool is_signed) {
  switch (esize) {
    case 1:
      return is_signed ? int64_t{static_cast<int8_t>(*p)} : int64_t{*p};
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return is_signed ? int64_t{static_cast<int16_t>(v)} : int64_t{v};
    }
    default: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return is_signed ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    }
  }
}

// All f.h x f.w x f.c elements, zero point subtracted, dense HWC.
Error Model::read_dense(const FeatureMap& f, std::vector<int32_t>& out) {
  trace(cmd_name_, f);
  const uint64_t n = static_cast<uint64_t>(f.h) * f.w * f.c;
  if (n > kMaxElements) {
    return fail(Error::NotSupported, "%s of %d x %d x %d elements exceeds the model's limit",
                f.name, f.h, f.w, f.c);
  }
  out.resize(n);
  size_t k = 0;
  for (int y = 0; y < f.h; ++y) {
    for (int x = 0; x < f.w; ++x) {
      for (int c = 0; c < f.c; ++c) {
        uint8_t* p;
        Error e = element_ptr(f, y, x, c, false, &p);
        if (e != Error::Ok) {
          return e;
        }
        out[k++] = static_cast<int32_t>(load(p, f.esize, f.is_signed) - f.zp);
      }
    }
  }
  return Error::Ok;
}

// The IFM as the kernel sees it. `f.h`/`f.w` are the upscaled extent; with
// IFM_UPSCALE 1 (nearest) every IFM element is repeated 2x2, with 2
// (transpose, zero insertion) it lands on the even coordinates and the odd
// ones are zero (after zero-point subtraction, i.e. padding-like).
Error Model::read_ifm(FeatureMap& f, int upscale, std::vector<int32_t>& out) {
  if (upscale == 0) {
    return read_dense(f, out);
  }
  FeatureMap real = f;
  real.h = (f.h + 1) / 2;
  real.w = (f.w + 1) / 2;
  std::vector<int32_t> src;
  Error e = read_dense(real, src);
  if (e != Error::Ok) {
    return e;
  }
  out.assign(static_cast<size_t>(f.h) * f.w * f.c, 0);
  for (int y = 0; y < f.h; ++y) {
    for (int x = 0; x < f.w; ++x) {
      if (upscale == 2 && ((y | x) & 1)) {
        continue;
      }
      const int32_t* from = &src[(static_cast<size_t>(y / 2) * real.w + x / 2) * f.c];
      std::copy(from, from + f.c, &out[(static_cast<size_t>(y) * f.w + x) * f.c]);
    }
  }
  return Error::Ok;
}

// Decodes ACTIVATION / ACTIVATION_MIN / ACTIVATION_MAX and the OFM rounding.
Error Model::output_setup(const FeatureMap& ofm) {
  trace(cmd_name_, ofm);
  // Two OFM tiles at the same base: distinct coordinates share addresses and
  // the later write wins. Executed as written, but counted: Vela 5.1.0 emits
  // this for some matmuls (docs/npu-model.md, "Vela-vs-TOSA deviations").
  if (stats_ && ((ofm.w > ofm.w0 && ofm.base[1] == ofm.base[0]) ||
                 (ofm.h > ofm.h0 && ofm.base[2] == ofm.base[0]))) {
    ++stats_->aliased_ofm_ops;
  }
  const uint16_t act = p0(SET_ACTIVATION);
  const int fn = act & 0xfff;
  const int clip = (act >> 12) & 0xf;
  const uint16_t prec = p0(SET_OFM_PRECISION);
  ofm_round_ = (prec >> 14) & 3;
  if (ofm_round_ == 3) {
    return fail(Error::InvalidProgram, "OFM_PRECISION 0x%04x: reserved rounding mode 3", prec);
  }
  lut_index_ = -1;
  if (fn >= 16 && fn <= 23) {
    lut_index_ = fn - 16;
  } else if (fn != 0) {
    return fail(Error::NotSupported,
                "ACTIVATION 0x%04x: function %d (built-in tanh/sigmoid) not modelled", act, fn);
  }
  bool sgn = ofm.is_signed;
  int bits = ofm.bits;
  switch (clip) {
    case 0:
      break;
    case 2:
      sgn = false;
      bits = 8;
      break;
    case 3:
      sgn = true;
      bits = 8;
      break;
    case 5:
      sgn = true;
      bits = 16;
      break;
    default:
      return fail(Error::InvalidProgram, "ACTIVATION 0x%04x: reserved clip range %d", act, clip);
  }
  int64_t lo, hi;
  if (bits >= 32) {
    lo = sgn ? INT32_MIN : 0;
    hi = sgn ? INT32_MAX : UINT32_MAX;
  } else {
    lo = sgn ? -(int64_t{1} << (bits - 1)) : 0;
    hi = sgn ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1;
    // The clamp registers are 16-bit, in the OFM's signedness.
    const uint16_t amin = p0(SET_ACTIVATION_MIN);
    const uint16_t amax = p0(SET_ACTIVATION_MAX);
    const int64_t vmin = sgn ? int64_t{static_cast<int16_t>(amin)} : int64_t{amin};
    const int64_t vmax = sgn ? int64_t{static_cast<int16_t>(amax)} : int64_t{amax};
    lo = std::max(lo, vmin);
    hi = std::min(hi, vmax);
  }
  act_lo_ = lo;
  act_hi_ = hi;
  if (lut_index_ >= 0 && !(ofm.bits == 8 || (ofm.bits == 32 && clip == 3))) {
    return fail(Error::NotSupported,
                "ACTIVATION 0x%04x: LUT with a %d-bit OFM not modelled (8-bit LUTs only)", act,
                ofm.bits);
  }
  return Error::Ok;
}

Error Model::write_output(const FeatureMap& ofm, int y, int x, int c, int64_t scaled) {
  int64_t v = scaled + ofm.zp;
  if (lut_index_ >= 0) {
    // 8-bit LUT: 256 entries per slot at the end of SHRAM, indexed by the
    // int8 result.
    v = std::min<int64_t>(127, std::max<int64_t>(-128, v));
    const size_t base = shram_.size() - 2048 + static_cast<size_t>(lut_index_) * 256;
    const uint8_t raw = shram_[base + static_cast<size_t>(v + 128)];
    v = ofm.is_signed || ofm.bits == 32 ? int64_t{static_cast<int8_t>(raw)} : int64_t{raw};
  }
  v = std::min(act_hi_, std::max(act_lo_, v));
  uint8_t* p;
  Error e = element_ptr(ofm, y, x, c, true, &p);
  if (e != Error::Ok) {
    return e;
  }
  switch (ofm.esize) {
    case 1:
      *p = static_cast<uint8_t>(v);
      break;
    case 2: {
      const uint16_t u = static_cast<uint16_t>(v);
      std::memcpy(p, &u, 2);
      break;
    }
    default: {
      const uint32_t u = static_cast<uint32_t>(v);
      std::memcpy(p, &u, 4);
      break;
    }
  }
  return Error::Ok;
}

// ------------------------------------------------------------ conv
// Position of every decoded weight: the traversal Vela's weight encoder uses
// to order them (OFM blocks, IFM blocks, 8x8 sub-kernels, micro-blocks), run
// forwards to undo the reordering. Slots that fall outside the kernel or the
// channel ranges are padding and must decode to zero.
struct WeightLayout {
  int ofm_depth, kh, kw, ifm_depth;
  int ofm_block_depth;
  int ifm_ublock, ofm_ublock;
  bool depthwise, part_kernel;
  int ifm_bits;
  int decomp_h, decomp_w;
};

// Calls fn(ofm_z, ky, kx, ifm_z, valid) for each stream position in order.
template <typename Fn>
void traverse_weights(const WeightLayout& L, Fn&& fn) {
  const int ifm_block_depth = (L.part_kernel || L.ifm_bits == 16) ? 16 : 32;
  for (int ofm_block_z = 0; ofm_block_z < L.ofm_depth; ofm_block_z += L.ofm_block_depth) {
    const int clipped_ofm = std::min(L.ofm_block_depth, L.ofm_depth - ofm_block_z);
    const int ifm_end = L.depthwise ? 1 : L.ifm_depth;
    for (int ifm_block_z = 0; ifm_block_z < ifm_end; ifm_block_z += ifm_block_depth) {
      int clipped_ifm;
      if (L.depthwise) {
        clipped_ifm = L.ifm_ublock;
      } else {
        clipped_ifm = L.part_kernel ? std::min(ifm_block_depth, L.ifm_depth - ifm_block_z)
                                    : ifm_block_depth;
      }
      for (int sy = 0; sy < L.kh; sy += L.decomp_h) {
        const int sub_h = std::min(L.kh - sy, L.decomp_h);
        for (int sx = 0; sx < L.kw; sx += L.decomp_w) {
          const int sub_w = std::min(L.kw - sx, L.decomp_w);
          int elements = sub_w * sub_h;
          if (L.part_kernel) {
            const int m = L.ifm_bits == 16 ? 2 : 4;
            elements = (elements + m - 1) / m * m;
          } else if (L.depthwise) {
            elements = (elements + 3) / 4 * 4;
          }
          const int outer = L.part_kernel ? clipped_ifm : 1;
          const int inner = L.part_kernel ? 1 : clipped_ifm;
          for (int io = 0; io < outer; io += L.ifm_ublock) {
            for (int ou = 0; ou < clipped_ofm; ou += L.ofm_ublock) {
              for (int el = 0; el < elements; ++el) {
                const int kx = el % sub_w;
                const int ky = el / sub_w;
                for (int ii = 0; ii < inner; ii += L.ifm_ublock) {
                  for (int oz = 0; oz < L.ofm_ublock; ++oz) {
                    const int iu_end = L.depthwise ? 1 : L.ifm_ublock;
                    for (int iz = 0; iz < iu_end; ++iz) {
                      const int ifm_z = ifm_block_z + ii + io + iz;
                      const int ofm_z = ofm_block_z + ou + oz;
                      const bool valid = ifm_z < L.ifm_depth && ofm_z < L.ofm_depth && ky < sub_h;
                      fn(ofm_z, sy + ky, sx + kx, ifm_z, valid);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

Error Model::op_conv(bool depthwise) {
  FeatureMap ifm, ofm;
  Error e = feature_map(ofm, false, true);
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
  }
  const int upscale = p0(SET_IFM_UPSCALE) & 3;
  if (upscale == 3 || (p0(SET_IFM_UPSCALE) & ~3u) != 0) {
    return fail(Error::InvalidProgram, "IFM_UPSCALE 0x%04x: reserved mode", p0(SET_IFM_UPSCALE));
  }
  if (ifm.bits == 32) {
    return fail(Error::InvalidProgram, "convolution with a 32-bit IFM (IFM_PRECISION 0x%04x)",
                p0(SET_IFM_PRECISION));
  }
  const uint16_t ks = p0(SET_KERNEL_STRIDE);
  const int stride_x = ((((ks >> 6) & 1) << 1) | (ks & 1)) + 1;
  const int stride_y = ((((ks >> 9) & 1) << 1) | ((ks >> 1) & 1)) + 1;
  const bool part_kernel = (ks >> 2) & 1;
  const int dil_x = ((ks >> 3) & 1) + 1;
  const int dil_y = ((ks >> 4) & 1) + 1;
  const int decomp = ((ks >> 5) & 1) ? 4 : 8;
  const int kh_eff = p0(SET_KERNEL_HEIGHT_M1) + 1;
  const int kw_eff = p0(SET_KERNEL_WIDTH_M1) + 1;
  if ((kh_eff - 1) % dil_y != 0 || (kw_eff - 1) % dil_x != 0) {
    return fail(Error::InvalidProgram,
                "kernel %d x %d (dilated) is not a whole kernel for dilation %d x %d", kh_eff,
                kw_eff, dil_y, dil_x);
  }
  if (depthwise && part_kernel) {
    return fail(Error::InvalidProgram, "KERNEL_STRIDE 0x%04x: part-kernel-first depthwise", ks);
  }
  const int kh = (kh_eff - 1) / dil_y + 1;
  const int kw = (kw_eff - 1) / dil_x + 1;
  const int pt = p0(SET_IFM_PAD_TOP), pl = p0(SET_IFM_PAD_LEFT);
  const int pb = p0(SET_IFM_PAD_BOTTOM), pr = p0(SET_IFM_PAD_RIGHT);
  e = check_ifm_padding(pt, pl, pb, pr);
  if (e != Error::Ok) {
    return e;
  }
  // The NPU has no IFM height/width register: the IFM is the area the
  // kernel sweeps, less the padding.
  ifm.h = (ofm.h - 1) * stride_y + kh_eff - pt - pb;
  ifm.w = (ofm.w - 1) * stride_x + kw_eff - pl - pr;
  ifm.c = depthwise ? ofm.c : p0(SET_IFM_DEPTH_M1) + 1;
  if (ifm.h <= 0 || ifm.w <= 0) {
    return fail(Error::InvalidProgram,
                "padding (t %d b %d l %d r %d) leaves no IFM for OFM %d x %d, kernel %d x %d", pt,
                pb, pl, pr, ofm.h, ofm.w, kh_eff, kw_eff);
  }
  if (depthwise && p0(SET_IFM_DEPTH_M1) + 1 < ofm.c) {
    return fail(Error::InvalidProgram, "depthwise: IFM depth %d < OFM depth %d",
                p0(SET_IFM_DEPTH_M1) + 1, ofm.c);
  }
  const uint64_t macs = static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c * kh * kw *
                        (depthwise ? 1 : static_cast<uint64_t>(ifm.c));
  if (macs > kMaxMacs || static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "operation of %llu MACs exceeds the model's limit",
                static_cast<unsigned long long>(macs));
  }
  if (d1(SET_WEIGHT1_LENGTH) != 0 || d1(SET_SCALE1_LENGTH) != 0) {
    return fail(Error::NotSupported,
                "WEIGHT1/SCALE1 streams (dual-core Ethos-U65-512) not modelled");
  }
  e = output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }

  // Weights.
  uint8_t* wp;
  const uint64_t wlen = d1(SET_WEIGHT_LENGTH);
  e = region_span(p0(SET_WEIGHT_REGION) & 7, a1(SET_WEIGHT_BASE), wlen, false, "weight stream",
                  &wp);
  if (e != Error::Ok) {
    return e;
  }
  std::vector<int16_t> decoded;
  char wmsg[200];
  if (!mlw_decode(wp, wlen, decoded, wmsg, sizeof(wmsg))) {
    return fail(Error::InvalidProgram, "weight stream at 0x%llx (+%llu): %s",
                static_cast<unsigned long long>(a1(SET_WEIGHT_BASE)),
                static_cast<unsigned long long>(wlen), wmsg);
  }
  WeightLayout L;
  L.ofm_depth = ofm.c;
  L.kh = kh;
  L.kw = kw;
  L.ifm_depth = depthwise ? 1 : ifm.c;
  L.ofm_block_depth = p0(SET_OFM_BLK_DEPTH_M1) + 1;
  L.ifm_ublock = 8;
  L.ofm_ublock = macs_per_cc_log2_ <= 5 ? 4 : 8;
  L.depthwise = depthwise;
  L.part_kernel = part_kernel;
  L.ifm_bits = ifm.bits;
  L.decomp_h = decomp / dil_y;
  L.decomp_w = decomp / dil_x;
  const size_t wcount = static_cast<size_t>(ofm.c) * kh * kw * L.ifm_depth;
  std::vector<int16_t> W(wcount, 0); // [oc][ky][kx][ic]
  size_t pos = 0;
  bool short_stream = false, nonzero_pad = false;
  traverse_weights(L, [&](int oz, int ky, int kx, int iz, bool valid) {
    if (pos >= decoded.size()) {
      short_stream = true;
      ++pos;
      return;
    }
    const int16_t v = decoded[pos++];
    if (valid) {
      W[((static_cast<size_t>(oz) * kh + ky) * kw + kx) * L.ifm_depth + iz] = v;
    } else if (v != 0) {
      nonzero_pad = true;
    }
  });
  if (short_stream || pos != decoded.size()) {
    return fail(Error::InvalidProgram,
                "weight stream decodes to %zu weights; OFM depth %d, kernel %d x %d, IFM depth "
                "%d, block depth %d need %zu",
                decoded.size(), ofm.c, kh, kw, L.ifm_depth, L.ofm_block_depth, pos);
  }
  if (nonzero_pad) {
    return fail(Error::InvalidProgram, "weight stream has non-zero values in padding positions");
  }

  // Bias and scale: 10 bytes per OFM channel.
  uint8_t* sp;
  const uint64_t slen = d1(SET_SCALE_LENGTH);
  if (slen < static_cast<uint64_t>(ofm.c) * 10) {
    return fail(Error::InvalidProgram, "SCALE_LENGTH %llu < 10 bytes x OFM depth %d",
                static_cast<unsigned long long>(slen), ofm.c);
  }
  e = region_span(p0(SET_SCALE_REGION) & 7, a1(SET_SCALE_BASE), static_cast<uint64_t>(ofm.c) * 10,
                  false, "scale stream", &sp);
  if (e != Error::Ok) {
    return e;
  }
  const bool global = (p0(SET_OFM_PRECISION) >> 8) & 1;
  std::vector<int64_t> bias(ofm.c);
  std::vector<uint32_t> scale(ofm.c);
  std::vector<int> shift(ofm.c);
  for (int c = 0; c < ofm.c; ++c) {
    const uint8_t* q = sp + 10 * c;
    uint64_t b = 0;
    for (int k = 0; k < 5; ++k) {
      b |= static_cast<uint64_t>(q[k]) << (8 * k);
    }
    bias[c] = static_cast<int64_t>(b << 24) >> 24; // 40-bit signed
    uint32_t s;
    std::memcpy(&s, q + 5, 4);
    scale[c] = global ? d1(SET_OFM_SCALE) : s;
    shift[c] = global ? (p1(SET_OFM_SCALE) & 0x3f) : (q[9] & 0x3f);
  }

  std::vector<int32_t> in;
  e = read_ifm(ifm, upscale, in);
  if (e != Error::Ok) {
    return e;
  }
  if (stats_) {
    stats_->macs += macs;
    ++stats_->ops;
  }
  std::vector<int64_t> acc(ofm.c);
  for (int oy = 0; oy < ofm.h; ++oy) {
    for (int ox = 0; ox < ofm.w; ++ox) {
      for (int c = 0; c < ofm.c; ++c) {
        acc[c] = bias[c];
      }
      for (int ky = 0; ky < kh; ++ky) {
        const int iy = oy * stride_y - pt + ky * dil_y;
        if (iy < 0 || iy >= ifm.h) {
          continue;
        }
        for (int kx = 0; kx < kw; ++kx) {
          const int ix = ox * stride_x - pl + kx * dil_x;
          if (ix < 0 || ix >= ifm.w) {
            continue;
          }
          const int32_t* px = &in[(static_cast<size_t>(iy) * ifm.w + ix) * ifm.c];
          if (depthwise) {
            for (int c = 0; c < ofm.c; ++c) {
              acc[c] += int64_t{px[c]} * W[(static_cast<size_t>(c) * kh + ky) * kw + kx];
            }
          } else {
            for (int oc = 0; oc < ofm.c; ++oc) {
              const int16_t* wr = &W[((static_cast<size_t>(oc) * kh + ky) * kw + kx) * ifm.c];
              int64_t s = 0;
              for (int ic = 0; ic < ifm.c; ++ic) {
                s += int64_t{px[ic]} * wr[ic];
              }
              acc[oc] += s;
            }
          }
        }
      }
      for (int c = 0; c < ofm.c; ++c) {
        e = write_output(ofm, oy, ox, c, scale_round(acc[c], scale[c], shift[c], ofm_round_));
        if (e != Error::Ok) {
          return e;
        }
      }
    }
  }
  return Error::Ok;
}

// ------------------------------------------------------------ pooling
struct Reciprocal {
  uint32_t multiplier;
  int shift;
};

// TOSA reciprocal_scale: 1/n as a multiplier in [2^30, 2^31) and a shift.
Reciprocal reciprocal_scale(uint32_t n) {
  int k = 0; // 2^(k-1) < n <= 2^k
  while ((uint64_t{1} << k) < n) {
    ++k;
  }
  const uint64_t numerator = ((uint64_t{1} << 30) + 1) << k;
  return {static_cast<uint32_t>(numerator / n), 30 + k};
}

// scale_round(x, scale, shift, NATURAL) == x for every x.
bool is_unit_scale(uint32_t scale, int shift) {
  return shift < 32 && scale == (uint32_t{1} << shift);
}

Error Model::op_pool() {
  const uint16_t mode = cmd_param_;
  if (mode > 2) {
    return fail(Error::InvalidProgram, "pooling mode %u (0 max, 1 average, 2 reduce-sum)", mode);
  }
  FeatureMap ifm, ofm;
  Error e = feature_map(ofm, false, true);
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
  }
  const int upscale = p0(SET_IFM_UPSCALE) & 3;
  if (upscale == 3 || (p0(SET_IFM_UPSCALE) & ~3u) != 0) {
    return fail(Error::InvalidProgram, "IFM_UPSCALE 0x%04x: reserved mode", p0(SET_IFM_UPSCALE));
  }
  const uint16_t ks = p0(SET_KERNEL_STRIDE);
  const int stride_x = ((((ks >> 6) & 1) << 1) | (ks & 1)) + 1;
  const int stride_y = ((((ks >> 9) & 1) << 1) | ((ks >> 1) & 1)) + 1;
  if ((ks >> 3) & 3) {
    return fail(Error::NotSupported, "KERNEL_STRIDE 0x%04x: dilated pooling not modelled", ks);
  }
  const int kh = p0(SET_KERNEL_HEIGHT_M1) + 1;
  const int kw = p0(SET_KERNEL_WIDTH_M1) + 1;
  const int pt = p0(SET_IFM_PAD_TOP), pl = p0(SET_IFM_PAD_LEFT);
  const int pb = p0(SET_IFM_PAD_BOTTOM), pr = p0(SET_IFM_PAD_RIGHT);
  e = check_ifm_padding(pt, pl, pb, pr);
  if (e != Error::Ok) {
    return e;
  }
  ifm.h = (ofm.h - 1) * stride_y + kh - pt - pb;
  ifm.w = (ofm.w - 1) * stride_x + kw - pl - pr;
  // Max and average pooling work per channel; reduce-sum adds up the kernel
  // window over every IFM channel into a single OFM channel.
  ifm.c = mode == 2 ? p0(SET_IFM_DEPTH_M1) + 1 : ofm.c;
  if (mode == 2 && ofm.c != 1) {
    return fail(Error::NotSupported, "reduce-sum into OFM depth %d (only 1 modelled)", ofm.c);
  }
  if (ifm.h <= 0 || ifm.w <= 0) {
    return fail(Error::InvalidProgram,
                "padding (t %d b %d l %d r %d) leaves no IFM for OFM %d x %d, kernel %d x %d", pt,
                pb, pl, pr, ofm.h, ofm.w, kh, kw);
  }
  const uint64_t work = static_cast<uint64_t>(ofm.h) * ofm.w * ifm.c * kh * kw;
  if (work > kMaxMacs || static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "pooling of %llu kernel elements exceeds the model's limit",
                static_cast<unsigned long long>(work));
  }
  e = output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  const bool global = (p0(SET_OFM_PRECISION) >> 8) & 1;
  const bool padded = pt || pl || pb || pr;
  if (mode == 1 && !global && padded) {
    return fail(Error::NotSupported,
                "average pooling with padding and no global scale (hardware divisor) not modelled");
  }
  uint32_t scale = 1;
  int shift = 0;
  if (global) {
    scale = d1(SET_OFM_SCALE);
    shift = p1(SET_OFM_SCALE) & 0x3f;
  } else if (mode == 1) {
    return fail(Error::NotSupported,
                "average pooling without a global OFM scale (hardware divisor) not modelled");
  }
  // With padding the hardware divides each sum by the number of kernel
  // positions inside the IFM (padding excluded: TFLite's and TOSA's average).
  // Vela computes the scale itself only without padding ("for valid padding
  // vela has to output scaling values"); regor leaves the identity scale for
  // padded TOSA AVG_POOL2D. Modelled as TOSA's reciprocal_scale with single
  // rounding; a non-identity scale or another rounding on top is unverified.
  const bool divide_by_count = mode == 1 && padded;
  if (divide_by_count && (ofm_round_ != kRoundNatural || !is_unit_scale(scale, shift))) {
    return fail(Error::NotSupported,
                "padded average pooling with OFM_SCALE 0x%08x >> %d and rounding %d (only the "
                "identity scale with NATURAL rounding is modelled)",
                scale, shift, ofm_round_);
  }
  std::vector<int32_t> in;
  e = read_ifm(ifm, upscale, in);
  if (e != Error::Ok) {
    return e;
  }
  if (stats_) {
    ++stats_->ops;
  }
  for (int oy = 0; oy < ofm.h; ++oy) {
    for (int ox = 0; ox < ofm.w; ++ox) {
      for (int c = 0; c < ofm.c; ++c) {
        int64_t acc = 0;
        bool any = false;
        uint32_t count = 0; // kernel positions inside the IFM
        for (int ky = 0; ky < kh; ++ky) {
          const int iy = oy * stride_y - pt + ky;
          if (iy < 0 || iy >= ifm.h) {
            continue;
          }
          for (int kx = 0; kx < kw; ++kx) {
            const int ix = ox * stride_x - pl + kx;
            if (ix < 0 || ix >= ifm.w) {
              continue;
            }
            const int32_t* px = &in[(static_cast<size_t>(iy) * ifm.w + ix) * ifm.c];
            if (mode == 0) {
              acc = any ? std::max(acc, int64_t{px[c]}) : int64_t{px[c]};
            } else if (mode == 1) {
              acc += px[c];
            } else {
              for (int ic = 0; ic < ifm.c; ++ic) {
                acc += px[ic];
              }
            }
            any = true;
            ++count;
          }
        }
        if (divide_by_count) {
          if (count == 0) {
            return fail(Error::InvalidProgram,
                        "average pooling: OFM (%d, %d) has no kernel position inside the IFM", oy,
                        ox);
          }
          const Reciprocal r = reciprocal_scale(count);
          acc = scale_round(acc, r.multiplier, r.shift, kRoundNatural);
        }
        e = write_output(ofm, oy, ox, c, scale_round(acc, scale, shift, ofm_round_));
        if (e != Error::Ok) {
          return e;
        }
      }
    }
  }
  return Error::Ok;
}

// ------------------------------------------------------------ elementwise
int count_leading_zeros32(uint32_t v) {
  int n = 0;
  for (int b = 31; b >= 0 && !((v >> b) & 1); --b) {
    ++n;
  }
  return n;
}

Error Model::op_elementwise() {
  const uint16_t mode = cmd_param_;
  if (mode > 9) {
    return fail(Error::InvalidProgram, "elementwise mode %u (0..9)", mode);
  }
  const Elementwise m = static_cast<Elementwise>(mode);
  const bool unary = m == Elementwise::kLrelu || m == Elementwise::kAbs || m == Elementwise::kClz;
  FeatureMap ifm, ifm2, ofm;
  Error e = feature_map(ofm, false, true);
  if (e != Error::Ok) {
    return e;
  }
  e = feature_map(ifm, false, false);
  if (e != Error::Ok) {
    return e;
  }
  if (p0(SET_IFM_UPSCALE) != 0) {
    return fail(Error::NotSupported, "IFM_UPSCALE %u on an elementwise op not modelled",
                p0(SET_IFM_UPSCALE));
  }
  ifm.h = ofm.h;
  ifm.w = ofm.w;
  ifm.c = ofm.c;
  const uint16_t bc = p0(SET_IFM2_BROADCAST);
  const bool reversed = (bc >> 6) & 1;
  const bool scalar = (bc >> 7) & 1;
  int32_t scalar_v = 0;
  if (!unary) {
    e = feature_map(ifm2, true, false);
    if (e != Error::Ok) {
      return e;
    }
    ifm2.h = (bc & 1) ? 1 : ofm.h;
    ifm2.w = (bc & 2) ? 1 : ofm.w;
    ifm2.c = (bc & 4) ? 1 : ofm.c;
    if (scalar) {
      const uint16_t s = p0(SET_IFM2_SCALAR);
      scalar_v = (ifm2.is_signed ? int32_t{static_cast<int16_t>(s)} : int32_t{s}) - ifm2.zp;
    }
  }
  if (static_cast<uint64_t>(ofm.h) * ofm.w * ofm.c > kMaxElements) {
    return fail(Error::NotSupported, "OFM of %d x %d x %d exceeds the model's limit", ofm.h, ofm.w,
                ofm.c);
  }
  e = output_setup(ofm);
  if (e != Error::Ok) {
    return e;
  }
  const uint16_t iprec = p0(SET_IFM_PRECISION);
  const int scale_mode = (iprec >> 8) & 3;
  const int ifm_round = (iprec >> 14) & 3;
  if (scale_mode == 3 || ifm_round == 3) {
    return fail(Error::InvalidProgram, "IFM_PRECISION 0x%04x: reserved scale or round mode", iprec);
  }
  const uint32_t ofm_scale = d1(SET_OFM_SCALE);
  const int ofm_shift = p1(SET_OFM_SCALE) & 0x3f;
  const uint32_t opa_scale = d1(SET_OPA_SCALE);
  const int opa_shift = p1(SET_OPA_SCALE) & 0x3f;
  const uint32_t opb_scale = d1(SET_OPB_SCALE);

  // 32-bit operand scaling (OPA_32 / OPB_32): the scaled operand goes through
  // OPA_SCALE with rounding, the other one is multiplied by the fixed power of
  // two Vela's "advanced" add/sub scaling assumes (2^(input_shift - 1):
  // input_shift 20 for 8-bit, 15 for 16-bit inputs).
  const int unscaled_shift = ifm.bits == 16 ? 14 : 19;
  if ((m == Elementwise::kAdd || m == Elementwise::kSub) && scale_mode != 0 && ifm.bits == 32) {
    return fail(Error::NotSupported,
                "elementwise %s with 32-bit inputs and IFM scale mode %d not modelled",
                elementwise_name(mode), scale_mode);
  }
  std::vector<int32_t> a, b;
  e = read_dense(ifm, a);
  if (e != Error::Ok) {
    return e;
  }
  if (!unary && !scalar) {
    e = read_dense(ifm2, b);
    if (e != Error::Ok) {
      return e;
    }
  }
  if (stats_) {
    ++stats_->ops;
  }
  for (int y = 0; y < ofm.h; ++y) {
    for (int x = 0; x < ofm.w; ++x) {
      for (int c = 0; c < ofm.c; ++c) {
        int64_t va = a[(static_cast<size_t>(y) * ofm.w + x) * ofm.c + c];
        int64_t vb = 0;
        if (!unary) {
          if (scalar) {
            vb = scalar_v;
          } else {
            const int by = ifm2.h == 1 ? 0 : y, bx = ifm2.w == 1 ? 0 : x, bch = ifm2.c == 1 ? 0 : c;
            vb = b[(static_cast<size_t>(by) * ifm2.w + bx) * ifm2.c + bch];
          }
          if (reversed) {
            std::swap(va, vb);
          }
        }
        int64_t r = 0;
        switch (m) {
          case Elementwise::kAdd:
          case Elementwise::kSub: {
            if (scale_mode == 0) {
              va *= static_cast<int64_t>(opa_scale & 0xffff);
              vb *= static_cast<int64_t>(opb_scale & 0xffff);
            } else if (scale_mode == 1) {
              va = scale_round(va, opa_scale, opa_shift, ifm_round);
              vb *= int64_t{1} << unscaled_shift;
            } else {
              vb = scale_round(vb, opa_scale, opa_shift, ifm_round);
              va *= int64_t{1} << unscaled_shift;
            }
            const int64_t s = m == Elementwise::kAdd ? va + vb : va - vb;
            r = scale_round(s, ofm_scale, ofm_shift, ofm_round_);
            break;
          }
          case Elementwise::kMul:
            r = scale_round(va * vb, ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kMin:
            r = scale_round(std::min(va, vb), ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kMax:
            r = scale_round(std::max(va, vb), ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kAbs:
            r = scale_round(va < 0 ? -va : va, ofm_scale, ofm_shift, ofm_round_);
            break;
          case Elementwise::kLrelu:
            r = va < 0 ? scale_round(va, ofm_scale, ofm_shift, ofm_round_) : va;
            break;
          case Elementwise::kClz:
            r = count_leading_zeros32(static_cast<uint32_t>(va));
            break;
          case Elementwise::kShl: {
            const int64_t sh = vb;
            r = (sh < 0 || sh > 31)
                    ? 0
                    : static_cast<int32_t>(static_cast<uint32_t>(va) << static_cast<int>(sh));
            break;
          }
          case Elementwise::kShr: {
            const int64_t sh = vb;
            if (sh <= 0) {
              r = va;
            } else if (sh > 31) {
              r = va < 0 ? -1 : 0;
            } else {
              const int64_t rnd =
                  ofm_round_ == kRoundNatural ? (int64_t{1} << (sh - 1)) : 0;
              r = (va + rnd) >> sh;
            }
            break;
          }
        }
        e = write_output(ofm, y, x, c, r);
        if (e != Error::Ok) {
          return e;
        }
      }
    }
  }
  return Error::Ok;
}

// ------------------------------------------------------------ DMA
Error Model::op_dma() {
  const uint16_t src_reg = p0(SET_DMA0_SRC_REGION);
  const uint16_t dst_reg = p0(SET_DMA0_DST_REGION);
  const uint64_t len = a1(SET_DMA0_LEN);
  const uint64_t src = a1(SET_DMA0_SRC);
  const uint64_t dst = a1(SET_DMA0_DST);
  if (((src_reg >> 9) & 3) != 0 || ((dst_reg >> 9) & 3) != 0) {
    return fail(Error::NotSupported,
                "DMA0_SRC_REGION 0x%04x / DST_REGION 0x%04x: 2D/3D stride modes not modelled",
                src_reg, dst_reg);
  }
  if ((src_reg >> 8) & 1) {
    return fail(Error::NotSupported, "DMA0_SRC_REGION 0x%04x: reads from internal memory",
                src_reg);
  }
  uint8_t* s;
  Error e = region_span(src_reg & 0xff, src, len, false, "DMA source", &s);
  if (e != Error::Ok) {
    return e;
  }
  if ((dst_reg >> 8) & 1) {
    // Internal SHRAM (LUT loads).
    if (dst > shram_.size() || len > shram_.size() - dst) {
      return fail(Error::InvalidProgram,
                  "DMA destination 0x%llx (+%llu) outside the %zu-byte internal memory",
                  static_cast<unsigned long long>(dst), static_cast<unsigned long long>(len),
                  shram_.size());
    }
    std::memmove(shram_.data() + dst, s, len);
  } else {
    uint8_t* d;
    e = region_span(dst_reg & 0xff, dst, len, true, "DMA destination", &d);
    if (e != Error::Ok) {
      return e;
    }
    std::memmove(d, s, len);
  }
  if (stats_) {
    ++stats_->dmas;
  }
  return Error::Ok;
}

} // namespace

Error run_payload(
    const uint8_t* payload,
    size_t size,
    const Regions& regions,
    char* msg,
    size_t msg_cap,
    Stats* stats) {
  if (msg != nullptr && msg_cap > 0) {
    msg[0] = '\0';
  }
  Model m(regions, msg, msg_cap, stats);
  return m.run(payload, size);
}

} // namespace npu_model
} // namespace ethosu_ng
