// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// NPU model front end (Ethos-U55/U65/U85): driver payload parser, command
// decoding, register state, regions and bounds checks, feature-map access and
// the output stage. See npu_model.h, model.h and docs/npu-model.md.
#include <ethosu_ng/npu_model/model.h>

#include <algorithm>

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

namespace detail {

// Driver-action tags of the payload (Vela driver_actions.py, and the core
// driver that consumes them).
constexpr uint32_t kFourccCop1 = 0x31504f43u; // "COP1"
constexpr uint8_t kDaReserved = 0x00;
constexpr uint8_t kDaConfig = 0x01;
constexpr uint8_t kDaCmdStream = 0x02;
constexpr uint8_t kDaReadApb = 0x03;
constexpr uint8_t kDaDumpShram = 0x04;
constexpr uint8_t kDaNop = 0x05;
// The LUTs live in the last 2 KiB of SHRAM: eight 256-byte slots for 8-bit LUTs, all of it
// for one 16-bit LUT (512 32-bit words).
constexpr size_t kLutAreaBytes = 2048;
constexpr size_t kLut16Bytes = 512 * 4;

// Signed 128-bit arithmetic from two 64-bit halves: the product of a 64-bit
// accumulator and a 32-bit scale needs 96 bits, and 32-bit targets have no
// __int128. Bit-identical to the __int128 arithmetic it replaces
// (runtime/tests/test_scale_round.cpp compares the two on the host).
namespace {
struct Wide {
  uint64_t lo;
  int64_t hi;
};

Wide wide(int64_t v) {
  return {static_cast<uint64_t>(v), v < 0 ? -1 : 0};
}

Wide add(Wide a, Wide b) {
  const uint64_t lo = a.lo + b.lo;
  const uint64_t carry = lo < a.lo ? 1 : 0;
  return {lo, static_cast<int64_t>(static_cast<uint64_t>(a.hi) + static_cast<uint64_t>(b.hi) +
                                   carry)};
}

Wide negate(Wide a) {
  return add({~a.lo, static_cast<int64_t>(~static_cast<uint64_t>(a.hi))}, wide(1));
}

// Arithmetic shift right by 1..127.
Wide shift_right(Wide a, int s) {
  if (s >= 64) {
    return {static_cast<uint64_t>(a.hi >> (s - 64)), a.hi < 0 ? -1 : 0};
  }
  return {(a.lo >> s) | (static_cast<uint64_t>(a.hi) << (64 - s)), a.hi >> s};
}

// 2^s for 0 <= s < 127.
Wide power_of_two(int s) {
  if (s >= 64) {
    return {0, static_cast<int64_t>(uint64_t{1} << (s - 64))};
  }
  return {uint64_t{1} << s, 0};
}

// v * scale, exact: |v| <= 2^63 and scale < 2^32 fit 96 bits.
Wide multiply(int64_t v, uint32_t scale) {
  const uint64_t m = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const uint64_t lo_part = (m & 0xffffffffu) * scale;
  const uint64_t hi_part = (m >> 32) * scale; // < 2^64
  const Wide p = add({hi_part << 32, static_cast<int64_t>(hi_part >> 32)}, {lo_part, 0});
  return v < 0 ? negate(p) : p;
}

bool greater(Wide a, Wide b) {
  return a.hi != b.hi ? a.hi > b.hi : a.lo > b.lo;
}
} // namespace

int64_t scale_round(int64_t v, uint32_t scale, int shift, int mode) {
  Wide p = multiply(v, scale);
  if (shift > 0) {
    switch (mode) {
      case kRoundTruncate:
        p = p.hi < 0 ? negate(shift_right(negate(p), shift)) : shift_right(p, shift);
        break;
      case kRoundNatural:
        p = shift_right(add(p, power_of_two(shift - 1)), shift);
        break;
      case kRoundFloor:
        p = shift_right(p, shift);
        break;
      case kRoundDbl:
      default: { // TOSA apply_scale_32 with double_round
        Wide r = power_of_two(shift - 1);
        if (shift > 31) {
          r = add(r, v >= 0 ? power_of_two(30) : negate(power_of_two(30)));
        }
        p = shift_right(add(p, r), shift);
        break;
      }
    }
  }
  const Wide lim = power_of_two(62);
  if (greater(p, lim)) {
    p = lim;
  } else if (greater(negate(lim), p)) {
    p = negate(lim);
  }
  return static_cast<int64_t>(p.lo);
}

Reciprocal reciprocal_scale(uint32_t n) {
  int k = 0; // 2^(k-1) < n <= 2^k
  while ((uint64_t{1} << k) < n) {
    ++k;
  }
  const uint64_t numerator = ((uint64_t{1} << 30) + 1) << k;
  return {static_cast<uint32_t>(numerator / n), 30 + k};
}

// ------------------------------------------------------------ payload
Error Model::run(const uint8_t* payload, size_t size) {
  if (payload == nullptr || size < 4 || size % 4 != 0) {
    return fail(Error::InvalidProgram,
                "driver payload of %lu bytes: not a whole number of 32-bit words",
                static_cast<unsigned long>(size));
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
                      "driver payload word %lu: optimizer config truncated (%lu words left)",
                      static_cast<unsigned long>(i), static_cast<unsigned long>(nwords - i - 1));
        }
        const uint32_t cfg = word(i + 1);
        const int macs = cfg & 0xf;
        const int shram_kb = (cfg >> 8) & 0xff;
        const int product = (cfg >> 28) & 0xf;
        if (product == 2) {
          // Ethos-U85 (regor ethos_u85_interface.hpp config_r: log2 MACs/cc
          // in bits 0..3, product in 28..31). Cores per size as regor's
          // ethos_u85.cpp configuration table: 128 and 256 one, 512 two,
          // 1024 and 2048 four.
          if (macs < 7 || macs > 11) {
            return fail(Error::NotSupported,
                        "driver payload word %u: optimizer config 0x%08x (product 2, log2 MACs/cc "
                        "%d) is not an Ethos-U85 size (128..2048 MACs/cc)",
                        static_cast<unsigned>(i), static_cast<unsigned>(cfg), macs);
          }
          u85_ = true;
          dma_in_flight_cap_ = 4; // regor EthosU85 MaxOutstandingDMAOps
          macs_per_cc_log2_ = macs;
          // The internal memory DMA can write is the 2 KiB LUT memory (8
          // slots of 256 bytes, regor ArchEthosU85 LUT_SLOT_SIZE).
          shram_.assign(2048, 0);
          cores_ = macs <= 8 ? 1 : macs == 9 ? 2 : 4;
          have_config = true;
          i += 3;
          break;
        }
        if (product > 1 || macs < 5 || macs > 8 || shram_kb < 16 || shram_kb > 96) {
          return fail(Error::NotSupported,
                      "driver payload word %lu: optimizer config 0x%08lx (product %d, "
                      "log2 MACs/cc %d, SHRAM %d KiB) is not an Ethos-U55/U65 this model knows",
                      static_cast<unsigned long>(i), static_cast<unsigned long>(cfg), product,
                      macs, shram_kb);
        }
        macs_per_cc_log2_ = macs;
        // Vela's max_outstanding_dma: Ethos-U55 1, Ethos-U65 (product 1) 2.
        dma_in_flight_cap_ = product == 1 ? 2 : 1;
        u65_ = product == 1;
        shram_.assign(static_cast<size_t>(shram_kb) * 1024, 0);
        have_config = true;
        i += 3;
        break;
      }
      case kDaCmdStream: {
        const size_t len = param | (reserved << 16);
        if (!have_config) {
          return fail(Error::InvalidProgram,
                      "driver payload word %lu: command stream before the optimizer config",
                      static_cast<unsigned long>(i));
        }
        if (len > nwords - i - 1) {
          return fail(Error::InvalidProgram,
                      "driver payload word %lu: command stream of %lu words, only %lu follow",
                      static_cast<unsigned long>(i), static_cast<unsigned long>(len),
                      static_cast<unsigned long>(nwords - i - 1));
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
                    "driver payload word %lu: unknown driver action 0x%02x (word 0x%08lx)",
                    static_cast<unsigned long>(i), tag, static_cast<unsigned long>(w));
    }
  }
  if (!ran_stream) {
    return fail(Error::InvalidProgram, "driver payload holds no command stream");
  }
  return Error::Ok;
}

Error Model::execute_stream(const uint8_t* words, size_t nwords, size_t first_index) {
  in_stream_ = true;
  dma_in_flight_.clear(); // the driver starts a stream on an idle NPU
  kernels_in_flight_.clear();
  size_t i = 0;
  size_t index = first_index;
  uint64_t executed = 0;
  flag_source_ = FlagSource::None;
  ofm_values_written_ = 0;
  command_at_.clear();
  while (i < nwords) {
    ++executed;
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
      cmd_name_ = u85_ ? u85_cmd1_name(op) : cmd1_name(op);
      if (i + 1 >= nwords) {
        return fail(Error::InvalidProgram, "stream ends before the payload word of a cmd1");
      }
      uint32_t data;
      std::memcpy(&data, words + 4 * (i + 1), 4);
      snprintf(cmd_payload_buf_, sizeof(cmd_payload_buf_), ", payload 0x%08lx",
               static_cast<unsigned long>(data));
      if (cmd_name_ == nullptr || (code & 0x3c00) != 0) {
        return fail(Error::InvalidProgram, "unknown cmd1 opcode (word 0x%08x)", w);
      }
      if (u85_ && op == U85_OP_BRANCH) {
        // regor EthosU85RCSGenerator::GenerateBranch: parameter bit 0 branch_cond (0 ALWAYS,
        // 1 RF_TRUE), the payload the target's byte offset in the stream.
        if ((param & ~1u) != 0) {
          return fail(Error::InvalidProgram, "NPU_OP_BRANCH 0x%04x: reserved bits 0x%04x set",
                      param, static_cast<unsigned>(param & ~1u));
        }
        bool taken = true;
        if (param & 1) {
          if (flag_source_ != FlagSource::Kernel || flag_ofm_values_ != 1) {
            return fail(Error::NotSupported,
                        "BRANCH_COND_RF_TRUE: COND_STATUS after %s not modelled (the model takes "
                        "the result flag from a kernel writing one OFM element)",
                        flag_source_ == FlagSource::None  ? "no kernel"
                        : flag_source_ == FlagSource::Dma ? "a DMA"
                                                          : "a kernel writing several elements");
          }
          taken = flag_value_ != 0;
        }
        if (!taken) {
          i += 2;
          ++index;
          continue;
        }
        // OutOfResources, not NotSupported: whether a loop ends depends on the data, so the
        // trial run on zeroed scratch (runtime.model_unsupported) must not read it as a gap.
        if (executed >= kMaxCommandsExecuted) {
          return fail(Error::OutOfResources,
                      "%llu commands executed: over the model's limit of 2^%d per stream "
                      "(ETHOSU_NG_NPU_MODEL_MAX_COMMANDS_LOG2; a loop that does not end?)",
                      static_cast<unsigned long long>(executed),
                      ETHOSU_NG_NPU_MODEL_MAX_COMMANDS_LOG2);
        }
        Error e = branch_target(words, nwords, data, &i, &index);
        if (e != Error::Ok) {
          return e;
        }
        index += first_index;
        continue;
      }
      if (!u85_) {
        Error e = check_u55_cmd1(op, param);
        if (e != Error::Ok) {
          return e;
        }
      }
      r1_data_[op] = data;
      r1_param_[op] = param;
      i += 2;
    } else if (ctrl == 0) {
      cmd_name_ = u85_ ? u85_cmd0_name(op) : cmd0_name(op);
      if (cmd_name_ == nullptr || (code & 0x3c00) != 0) {
        return fail(Error::InvalidProgram, "unknown cmd0 opcode (word 0x%08x)", w);
      }
      i += 1;
      Error e = Error::Ok;
      if (u85_) {
        switch (op) {
          case OP_STOP:
            in_stream_ = false;
            return Error::Ok;
          case OP_IRQ:
          case OP_PMU_MASK:
            break;
          case OP_DMA_WAIT:
          case OP_KERNEL_WAIT:
            wait_for(op == OP_DMA_WAIT, param);
            break;
          case OP_CONV:
          case OP_DEPTHWISE:
            begin_access();
            e = u85_check_acc(false);
            e = e == Error::Ok ? u85_conv(op == OP_DEPTHWISE) : e;
            e = e == Error::Ok ? end_access(false) : e;
            note_result(false);
            break;
          case OP_POOL:
            begin_access();
            e = u85_check_acc(true);
            e = e == Error::Ok ? u85_pool() : e;
            e = e == Error::Ok ? end_access(false) : e;
            note_result(false);
            break;
          case OP_ELEMENTWISE:
            begin_access();
            e = u85_check_acc(false);
            e = e == Error::Ok ? u85_elementwise() : e;
            e = e == Error::Ok ? end_access(false) : e;
            note_result(false);
            break;
          case U85_OP_RESIZE:
            begin_access();
            e = u85_check_acc(false);
            e = e == Error::Ok ? u85_resize() : e;
            e = e == Error::Ok ? end_access(false) : e;
            note_result(false);
            break;
          case OP_DMA_START:
            begin_access();
            e = op_dma();
            e = e == Error::Ok ? end_access(true) : e;
            note_result(true);
            break;
          default:
            r0_[op] = param;
            break;
        }
        if (e != Error::Ok) {
          return e;
        }
        ++index;
        continue;
      }
      switch (op) {
        case OP_STOP:
          in_stream_ = false;
          return Error::Ok;
        case OP_IRQ:
        case OP_PMU_MASK:
          break;
        case OP_DMA_WAIT:
        case OP_KERNEL_WAIT:
          // The model runs every command to completion in order; the waits bound which
          // commands may still run beside the next one (the hazard check).
          wait_for(op == OP_DMA_WAIT, param);
          break;
        case OP_CONV:
        case OP_DEPTHWISE:
          begin_access();
          e = check_acc_format();
          e = e == Error::Ok ? op_conv(op == OP_DEPTHWISE) : e;
          e = e == Error::Ok ? end_access(false) : e;
          break;
        case OP_POOL:
          begin_access();
          e = check_acc_format();
          e = e == Error::Ok ? op_pool() : e;
          e = e == Error::Ok ? end_access(false) : e;
          break;
        case OP_ELEMENTWISE:
          begin_access();
          e = check_acc_format();
          e = e == Error::Ok ? op_elementwise() : e;
          e = e == Error::Ok ? end_access(false) : e;
          break;
        case OP_DMA_START:
          begin_access();
          e = check_u55_cmd0(op, param);
          e = e == Error::Ok ? op_dma() : e;
          e = e == Error::Ok ? end_access(true) : e;
          break;
        default:
          e = check_u55_cmd0(op, param);
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

Error Model::branch_target(const uint8_t* words, size_t nwords, uint32_t target, size_t* word,
                           size_t* index) {
  if (command_at_.empty()) {
    // The stream's command boundaries, decoded as execute_stream does.
    command_at_.assign(nwords, kNotACommand);
    uint32_t k = 0;
    for (size_t j = 0; j < nwords; ++k) {
      uint32_t w;
      std::memcpy(&w, words + 4 * j, 4);
      command_at_[j] = k;
      j += ((w >> 14) & 3) == 1 ? 2 : 1;
    }
  }
  const size_t at = target / 4;
  if (target % 4 != 0 || at >= nwords || command_at_[at] == kNotACommand) {
    return fail(Error::InvalidProgram,
                "branch target 0x%08x: not the first word of a command in the %lu-word stream",
                static_cast<unsigned>(target), static_cast<unsigned long>(nwords));
  }
  *word = at;
  *index = command_at_[at];
  return Error::Ok;
}

// ------------------------------------------------------------ registers
Error Model::reserved_bits(uint16_t param, uint16_t used) {
  if ((param & ~used) != 0) {
    return fail(Error::InvalidProgram,
                "%s 0x%04x: reserved bits 0x%04x set (the register's fields are 0x%04x; "
                "ethos_u55_regs.py)",
                cmd_name_ + 4, param, static_cast<unsigned>(param & ~used), used);
  }
  return Error::Ok;
}

Error Model::check_u55_cmd0(uint16_t op, uint16_t param) {
  switch (op) {
    case SET_IFM_PRECISION: // precision (bit 1 unused by every type), format, scale and round
      return reserved_bits(param, 0xC3CD);
    case SET_IFM2_PRECISION: // precision, format
      return reserved_bits(param, 0x00CD);
    case SET_OFM_PRECISION: // precision, format, scaling, rounding
      return reserved_bits(param, 0xC1C7);
    case SET_IFM_UPSCALE: // mode
      return reserved_bits(param, 0x0003);
    case SET_KERNEL_STRIDE: // stride x/y (bits 0, 6 and 1, 9), part-kernel, dilation, decomposition
      return reserved_bits(param, 0x027F);
    case SET_IFM2_BROADCAST: // height, width, depth, operand order, scalar
      return reserved_bits(param, 0x00C7);
    case SET_DMA0_SRC_REGION: // region, internal, stride mode
    case SET_DMA0_DST_REGION:
      return reserved_bits(param, 0x07FF);
    case SET_PARALLEL_MODE:
      if (param != 0) {
        return fail(Error::NotSupported,
                    "PARALLEL_MODE %u: dual-core kernels (Ethos-U65-512) not modelled", param);
      }
      return Error::Ok;
    case OP_DMA_START:
      if (param != 0) {
        return fail(Error::NotSupported,
                    "OP_DMA_START channel/mode 0x%04x: only channel 0 in mode 0 is modelled",
                    param);
      }
      return Error::Ok;
    default:
      return Error::Ok;
  }
}

Error Model::check_u55_cmd1(uint16_t op, uint16_t param) {
  switch (op) {
    case SET_IFM_BASE0:
    case SET_IFM_BASE1:
    case SET_IFM_BASE2:
    case SET_IFM_BASE3:
    case SET_IFM_STRIDE_X:
    case SET_IFM_STRIDE_Y:
    case SET_IFM_STRIDE_C:
    case SET_OFM_BASE0:
    case SET_OFM_BASE1:
    case SET_OFM_BASE2:
    case SET_OFM_BASE3:
    case SET_OFM_STRIDE_X:
    case SET_OFM_STRIDE_Y:
    case SET_OFM_STRIDE_C:
    case SET_WEIGHT_BASE:
    case SET_SCALE_BASE:
    case SET_DMA0_SRC:
    case SET_DMA0_DST:
    case SET_DMA0_LEN:
    case SET_DMA0_SKIP0:
    case SET_DMA0_SKIP1:
    case SET_IFM2_BASE0:
    case SET_IFM2_BASE1:
    case SET_IFM2_BASE2:
    case SET_IFM2_BASE3:
    case SET_IFM2_STRIDE_X:
    case SET_IFM2_STRIDE_Y:
    case SET_IFM2_STRIDE_C:
      // 40-bit addresses: the parameter holds bits 32..39 (Vela cmd1_with_address).
      return reserved_bits(param, 0x00FF);
    case SET_OFM_SCALE:
    case SET_OPA_SCALE:
      // The shift is a 6-bit field (ethosu55_interface.h npu_set_ofm_scale_t).
      return reserved_bits(param, 0x003F);
    case SET_WEIGHT_LENGTH:
    case SET_SCALE_LENGTH:
    case SET_OPB_SCALE:
    case SET_WEIGHT1_LENGTH:
    case SET_SCALE1_LENGTH:
      return reserved_bits(param, 0x0000);
    default:
      return Error::Ok;
  }
}

// ------------------------------------------------------------- memory
Error Model::region_span(int region, uint64_t addr, uint64_t len, bool write, const char* what,
                         uint8_t** out) {
  if (region == 0 && write) {
    return fail(Error::InvalidProgram,
                "%s: write to region 0 (weights are read-only) at 0x%llx (+%llu)", what,
                static_cast<unsigned long long>(addr), static_cast<unsigned long long>(len));
  }
  uint8_t* base = nullptr;
  size_t size = 0;
  if (!region_memory(region, &base, &size)) {
    return fail(Error::InvalidProgram, "%s: region %d is not provided (only 0, 1, 2)", what,
                region);
  }
  if (base == nullptr || addr > size || len > size - addr) {
    return fail(Error::InvalidProgram,
                "%s: address 0x%llx (+%llu bytes) outside region %d of %lu bytes", what,
                static_cast<unsigned long long>(addr), static_cast<unsigned long long>(len),
                region, static_cast<unsigned long>(size));
  }
  *out = base + addr;
  note_span(region, *out, len, write);
  return Error::Ok;
}

// ------------------------------------------------------------- hazards
void Model::begin_access() {
  touched_.clear();
  for (auto& slot : hull_) {
    for (auto& tile : slot) {
      tile[0] = UINTPTR_MAX;
      tile[1] = 0;
    }
  }
}

void Model::note_span(int region, const uint8_t* p, uint64_t len, bool write) {
  if (len > 0) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    touched_.push_back({a, a + static_cast<uintptr_t>(len), region, write});
  }
}

void Model::wait_for(bool dma, uint16_t keep) {
  std::deque<InFlight>& q = dma ? dma_in_flight_ : kernels_in_flight_;
  while (q.size() > keep) {
    q.pop_front();
  }
}

Error Model::end_access(bool dma) {
  std::vector<Span> spans = touched_;
  for (int slot = 0; slot < 3; ++slot) {
    for (const auto& tile : hull_[slot]) {
      if (tile[0] < tile[1]) {
        spans.push_back({tile[0], tile[1], hull_region_[slot], slot == 2});
      }
    }
  }
  if (!dma) {
    // Internal memory, as regor's EthosU55RCSGenerator / EthosU85RCSGenerator track it: a
    // kernel with a lookup table reads its table (256 bytes for an 8-bit OFM, 1024 for 32-bit,
    // 2048 for 16-bit); an Ethos-U55/U65 SHRAM of at most 16 banks reserves none for tables,
    // so every kernel's accumulators may overwrite all of it.
    const uintptr_t shram = reinterpret_cast<uintptr_t>(shram_.data());
    const bool uses_lut = u85_ ? u85_lut_fn_ != kLutNone : lut_index_ >= 0;
    if (uses_lut) {
      const int bits = u85_ ? (u85_lut_fn_ == kLutS16S16 ? 16 : 8) : lut_bits_;
      const size_t size = bits == 16 ? 2048 : bits == 32 ? 1024 : 256;
      const size_t at = u85_ ? static_cast<size_t>(lut_index_) * size
                             : shram_.size() - kLutAreaBytes + static_cast<size_t>(lut_index_) * 256;
      spans.push_back({shram + at, shram + at + size, -1, false});
    }
    if (!u85_ && shram_.size() <= 16 * 1024) {
      spans.push_back({shram, shram + shram_.size(), -1, true});
    }
  }
  const std::deque<InFlight>& other = dma ? kernels_in_flight_ : dma_in_flight_;
  for (const InFlight& f : other) {
    for (const Span& a : spans) {
      for (const Span& b : f.spans) {
        if ((a.write || b.write) && a.lo < b.hi && b.lo < a.hi) {
          const uintptr_t lo = a.lo > b.lo ? a.lo : b.lo;
          const uintptr_t hi = a.hi < b.hi ? a.hi : b.hi;
          uint8_t* region = shram_.data();
          size_t unused;
          if (a.region >= 0) {
            region_memory(a.region, &region, &unused);
          }
          const uintptr_t base = reinterpret_cast<uintptr_t>(region);
          char where[48];
          if (a.region < 0) {
            snprintf(where, sizeof(where), "internal memory");
          } else {
            snprintf(where, sizeof(where), "region %d", a.region);
          }
          return fail(Error::InvalidProgram,
                      "hazard: it %s bytes [0x%llx, 0x%llx) of %s, which command %lu (%s), "
                      "still in flight, %s (no %s between them)",
                      a.write ? "writes" : "reads", static_cast<unsigned long long>(lo - base),
                      static_cast<unsigned long long>(hi - base), where,
                      static_cast<unsigned long>(f.cmd), f.name, b.write ? "writes" : "reads",
                      dma ? "NPU_OP_KERNEL_WAIT" : "NPU_OP_DMA_WAIT");
        }
      }
    }
  }
  std::deque<InFlight>& mine = dma ? dma_in_flight_ : kernels_in_flight_;
  mine.push_back({cmd_index_, cmd_name_, std::move(spans)});
  while (mine.size() > (dma ? dma_in_flight_cap_ : kMaxKernelsInFlight)) {
    mine.pop_front();
  }
  return Error::Ok;
}

bool Model::region_memory(int region, uint8_t** base, size_t* size) const {
  switch (region) {
    case 0:
      *base = const_cast<uint8_t*>(regions_.weights);
      *size = regions_.weights_size;
      return true;
    case 1:
      *base = regions_.scratch;
      *size = regions_.scratch_size;
      return true;
    case 2:
      *base = regions_.fast_scratch;
      *size = regions_.fast_scratch_size;
      return true;
    default:
      return false;
  }
}

// Reads the registers of one feature map. IFM/IFM2 extents are set by the
// caller; the OFM's come from its registers.
Error Model::feature_map(FeatureMap& f, bool ifm2, bool ofm) {
  // Ethos-U55/U65: the whole register is the region number, and a region the
  // model is not given is refused by the region check.
  const uint16_t region_mask = u85_ ? 0x7 : 0xffff;
  uint16_t prec;
  if (ofm) {
    f.name = "OFM";
    f.region = p0(SET_OFM_REGION) & region_mask;
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
    f.region = (ifm2 ? p0(SET_IFM2_REGION) : p0(SET_IFM_REGION)) & region_mask;
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
  // Region 0 is read-only: an OFM there takes the checked path, which refuses the write.
  f.mem = nullptr;
  f.mem_size = 0;
  if (!(ofm && f.region == 0)) {
    region_memory(f.region, &f.mem, &f.mem_size);
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
  // Bases and strides are 40-bit register values: a sum that overflows 64 bits
  // is far outside every region, and reported as such.
  int64_t ys, xs, addr;
  const bool overflow = __builtin_mul_overflow(static_cast<int64_t>(ty), f.sy, &ys) ||
                        __builtin_mul_overflow(static_cast<int64_t>(tx), f.sx, &xs) ||
                        __builtin_add_overflow(static_cast<int64_t>(f.base[t]), ys, &addr) ||
                        __builtin_add_overflow(addr, xs, &addr) ||
                        __builtin_add_overflow(addr, coff, &addr);
  // Fast path: the region is resolved once per feature map.
  if (!overflow && f.mem != nullptr && addr >= 0 &&
      static_cast<uint64_t>(addr) + static_cast<uint64_t>(f.esize) <= f.mem_size) {
    *p = f.mem + static_cast<size_t>(addr);
    note_element(f, t, write, *p);
    return Error::Ok;
  }
  char what[96];
  snprintf(what, sizeof(what), "%s element (y %d, x %d, c %d) in tile %d", f.name, y, x, c, t);
  if (overflow || addr < 0 || addr > (int64_t{1} << 40)) {
    return fail(Error::InvalidProgram,
                "%s: address out of range (base 0x%llx, strides y %lld x %lld c %lld)", what,
                static_cast<unsigned long long>(f.base[t]), static_cast<long long>(f.sy),
                static_cast<long long>(f.sx), static_cast<long long>(f.sc));
  }
  return region_span(f.region, static_cast<uint64_t>(addr), f.esize, write, what, p);
}

Error Model::check_extent(const FeatureMap& f, bool write) {
  if (f.chain >= 0) {
    return Error::Ok;
  }
  uint8_t* unused;
  size_t size = 0;
  region_memory(f.region, &unused, &size);
  Error e = region_span(f.region, 0, 0, write, f.name, &unused);
  if (e != Error::Ok) {
    return e;
  }
  // Each tile's addresses grow with y, x and c (bases and strides are unsigned), so
  // the tile lies inside the region when its last element does.
  const int64_t last_c = f.c - 1;
  int64_t cmax = last_c * f.esize;
  if (f.brick) {
    cmax = (last_c / 16) * f.sc + (last_c % 16) * f.esize;
    if (last_c >= 16) {
      cmax = std::max(cmax, (last_c / 16 - 1) * f.sc + 15 * f.esize);
    }
  }
  struct Tile {
    int index, rows, cols;
  };
  Tile tiles[4];
  int ntiles = 0;
  tiles[ntiles++] = {0, std::min(f.h, f.h0), std::min(f.w, f.w0)};
  if (f.w > f.w0) {
    tiles[ntiles++] = {1, std::min(f.h, f.h1), f.w - f.w0};
    if (f.h > f.h1) {
      tiles[ntiles++] = {3, f.h - f.h1, f.w - f.w0};
    }
  }
  if (f.h > f.h0) {
    tiles[ntiles++] = {2, f.h - f.h0, std::min(f.w, f.w0)};
  }
  for (int k = 0; k < ntiles; ++k) {
    const Tile& t = tiles[k];
    // At most 2^40 + 2^16 * 2^40 * 2 + 2^56: no overflow.
    const uint64_t end = f.base[t.index] + static_cast<uint64_t>(t.rows - 1) * f.sy +
                         static_cast<uint64_t>(t.cols - 1) * f.sx + static_cast<uint64_t>(cmax) +
                         static_cast<uint64_t>(f.esize);
    if (end > size) {
      return fail(Error::InvalidProgram,
                  "%s tile %d (%d x %d x %d, base 0x%llx, strides y %lld x %lld c %lld) ends at "
                  "byte %llu, past region %d of %lu bytes",
                  f.name, t.index, t.rows, t.cols, f.c,
                  static_cast<unsigned long long>(f.base[t.index]), static_cast<long long>(f.sy),
                  static_cast<long long>(f.sx), static_cast<long long>(f.sc),
                  static_cast<unsigned long long>(end), f.region,
                  static_cast<unsigned long>(size));
    }
  }
  // Ethos-U55/U65: strides never fold a tile onto itself, so a feature map holds at most
  // four tiles' worth of its region (the tiles may alias each other).
  const uint64_t n = static_cast<uint64_t>(f.h) * f.w * f.c;
  if (!u85_ && n > 4 * (size / f.esize)) {
    return fail(Error::InvalidProgram,
                "%s of %d x %d x %d elements: more than four tiles of region %d (%lu bytes) hold",
                f.name, f.h, f.w, f.c, f.region, static_cast<unsigned long>(size));
  }
  return Error::Ok;
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
  if (f.chain >= 0) {
    return read_chain(f, out);
  }
  Error e = check_extent(f, false);
  if (e != Error::Ok) {
    return e;
  }
  out.resize(n);
  size_t k = 0;
  for (int y = 0; y < f.h; ++y) {
    for (int x = 0; x < f.w; ++x) {
      for (int c = 0; c < f.c; ++c) {
        uint8_t* p;
        e = element_ptr(f, y, x, c, false, &p);
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
  lut_bits_ = ofm.bits;
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
  if (lut_index_ >= 0 && !(ofm.bits == 8 || ofm.bits == 16 || (ofm.bits == 32 && clip == 3))) {
    return fail(Error::NotSupported,
                "ACTIVATION 0x%04x: LUT with a %d-bit OFM not modelled (8- and 16-bit LUTs only)",
                act, ofm.bits);
  }
  if (lut_index_ >= 0 && ofm.bits == 16 &&
      static_cast<size_t>(lut_index_) * 256 + kLut16Bytes > kLutAreaBytes) {
    return fail(Error::InvalidProgram,
                "ACTIVATION 0x%04x: a 16-bit LUT (%d bytes) in slot %d runs past the %d-byte "
                "LUT area",
                act, static_cast<int>(kLut16Bytes), lut_index_, static_cast<int>(kLutAreaBytes));
  }
  return Error::Ok;
}

Error Model::write_output(const FeatureMap& ofm, int y, int x, int c, int64_t scaled) {
  int64_t v = scaled + ofm.zp;
  if (lut_index_ >= 0 && ofm.bits == 16) {
    // 16-bit LUT: 512 words, each a signed 16-bit base (low half) and the signed 16-bit
    // slope to the next entry (high half), indexed by the top 9 bits of the int16 result
    // and interpolated over its low 7 bits, rounding half up (Vela's lut.py builds it to
    // TFLite's int16 LUT reference; TOSA's int16 TABLE + a 2^-7 RESCALE compute the same).
    v = std::min<int64_t>(32767, std::max<int64_t>(-32768, v));
    const size_t base = shram_.size() - kLutAreaBytes + static_cast<size_t>(lut_index_) * 256;
    const uint32_t index = static_cast<uint32_t>(v + 32768) >> 7;
    const int32_t frac = static_cast<int32_t>(v & 0x7f);
    uint32_t word;
    std::memcpy(&word, &shram_[base + index * 4u], 4);
    const int32_t lut_base = static_cast<int16_t>(word & 0xffffu);
    const int32_t slope = static_cast<int16_t>(word >> 16);
    v = lut_base + ((slope * frac + 64) >> 7);
  } else if (lut_index_ >= 0) {
    // 8-bit LUT: 256 entries per slot at the end of SHRAM, indexed by the
    // int8 result.
    v = std::min<int64_t>(127, std::max<int64_t>(-128, v));
    const size_t base = shram_.size() - kLutAreaBytes + static_cast<size_t>(lut_index_) * 256;
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

} // namespace detail

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
  detail::Model m(regions, msg, msg_cap, stats);
  return m.run(payload, size);
}

} // namespace npu_model
} // namespace ethosu_ng
