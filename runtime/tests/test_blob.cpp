// SPDX-License-Identifier: BSD-3-Clause
// Blob v2 parser: accepts good blobs (ours and the Python writer's), rejects
// every listed defect with an Error, a flipped byte in any checksummed part as
// that part's checksum rule with an ET_LOG naming it, and never reads outside
// the buffer (run under ASan: buffers are exact-size, so a stray read is
// reported). Structural defects are resealed (testblob::seal) so they break
// the rule they aim at, not a checksum.
//
// test_blob DIR: also the shared test vectors DIR/manifest.txt written by
// runtime/tests/gen_blobs.py (the verdict, rule and Error of each, and blob.h's
// constants against blob.py's).
// test_blob --serve: verdicts for blobs on stdin (tests/test_blob_fuzz.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/runtime/platform/platform.h>
#include <executorch/runtime/platform/runtime.h>

#include <ethosu_ng/blob.h>

#include "blob_builder.h"
#include "harness.h"

using ethosu_ng::Blob;
using ethosu_ng::Error;
using ethosu_ng::IoEntry;
using testblob::Buffer;
using testblob::Io;
using testblob::Spec;

namespace {

// The last ET_LOG line, to check what a rejection names; every line still
// goes to stderr unless quiet (--serve).
std::string g_last_log;
bool g_quiet_log = false;
void capture_log(
    et_timestamp_t,
    et_pal_log_level_t,
    const char*,
    const char*,
    size_t,
    const char* message,
    size_t length) {
  g_last_log.assign(message, length);
  if (!g_quiet_log) {
    std::fprintf(stderr, "%s\n", g_last_log.c_str());
  }
}

// "NAME" of the last "blob section 'NAME'" log line, "" if there is none.
std::string logged_section() {
  const std::string key = "blob section '";
  const size_t at = g_last_log.find(key);
  if (at == std::string::npos) {
    return "";
  }
  const size_t end = g_last_log.find('\'', at + key.size());
  return end == std::string::npos ? "" : g_last_log.substr(at + key.size(), end - at - key.size());
}

Error parse_err(const std::vector<uint8_t>& bytes, size_t misalign = 0) {
  Buffer buf(bytes, misalign);
  auto r = Blob::parse(buf.data(), buf.size());
  return r.ok() ? Error::Ok : r.error();
}

ethosu_ng::BlobRule rule_of(const std::vector<uint8_t>& bytes) {
  Buffer buf(bytes);
  ethosu_ng::BlobRule rule = ethosu_ng::BlobRule::kOk;
  (void)Blob::parse(buf.data(), buf.size(), &rule);
  return rule;
}

bool is_checksum_rule(ethosu_ng::BlobRule r) {
  return r == ethosu_ng::BlobRule::kHeaderChecksum ||
      r == ethosu_ng::BlobRule::kIoTableChecksum ||
      r == ethosu_ng::BlobRule::kSectionTableChecksum ||
      r == ethosu_ng::BlobRule::kSectionChecksum;
}

// A structural edit with its checksums rewritten: only the edit is wrong,
// and it is what the parser reports.
Error parse_sealed(std::vector<uint8_t> bytes) {
  testblob::seal(bytes);
  const ethosu_ng::BlobRule rule = rule_of(bytes);
  CHECK_MSG(!is_checksum_rule(rule), "sealed edit broke %s", ethosu_ng::blob_rule_id(rule));
  return parse_err(bytes);
}

Spec conv_spec(bool tosa) {
  Spec s;
  Io in;
  in.dtype = 1;
  in.shape = {1, 3, 8, 8};
  in.scale = 0.02f;
  in.zero_point = -11;
  Io out;
  out.dtype = 1;
  out.shape = {1, 8, 6, 10};
  out.dim_order = {0, 2, 3, 1};
  s.inputs = {in};
  s.outputs = {out};
  s.has_tosa = tosa;
  testblob::place(s);
  return s;
}

uint32_t rd32(const std::vector<uint8_t>& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, &b[off], 4);
  return v;
}
void wr32(std::vector<uint8_t>& b, size_t off, uint32_t v) {
  std::memcpy(&b[off], &v, 4);
}
void wr16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  std::memcpy(&b[off], &v, 2);
}

void test_good() {
  for (bool tosa : {false, true}) {
    const Spec s = conv_spec(tosa);
    const std::vector<uint8_t> bytes = testblob::build(s);
    Buffer buf(bytes);
    auto r = Blob::parse(buf.data(), buf.size());
    CHECK(r.ok());
    if (!r.ok()) {
      continue;
    }
    const Blob& b = r.get();
    CHECK(b.num_inputs() == 1 && b.num_outputs() == 1);
    CHECK(b.scratch_size() == s.scratch);
    CHECK(b.command_stream().size == s.cmd.size());
    CHECK(std::memcmp(b.command_stream().data, s.cmd.data(), s.cmd.size()) == 0);
    CHECK(b.weights().size == s.weights.size());
    CHECK(b.command_stream().data >= buf.data() &&
          b.command_stream().data < buf.data() + buf.size());
    CHECK(b.tosa().present() == tosa);
    if (tosa) {
      CHECK(std::memcmp(b.tosa().data, s.tosa.data(), s.tosa.size()) == 0);
    }
    // In place: sections are views into the caller's buffer, 16-aligned.
    CHECK(reinterpret_cast<uintptr_t>(b.weights().data) % 16 == 0);
    const IoEntry in = b.input(0);
    CHECK(in.dtype == 1 && in.rank == 4 && in.elem_size == 1);
    CHECK(in.shape[1] == 3 && in.numel() == 192 && in.byte_size == 192);
    CHECK(in.zero_point == -11 && in.scale == 0.02f);
    const IoEntry out = b.output(0);
    CHECK(out.dim_order[1] == 2 && out.dim_order[3] == 1);
    CHECK(out.offset == 192);
    // Out-of-range index: zeroed entry, no read past the table.
    CHECK(b.input(1).rank == 0 && b.input(1).dtype == 0);
    CHECK(b.output(7).dtype == 0);
  }
  // Every dtype, rank 0 and rank 6.
  Spec s;
  for (uint8_t dt = 1; dt <= 6; ++dt) {
    Io io;
    io.dtype = dt;
    io.shape = {2, 3};
    s.inputs.push_back(io);
  }
  Io scalar;
  scalar.dtype = 5;
  s.inputs.push_back(scalar);
  Io r6;
  r6.dtype = 3;
  r6.shape = {1, 2, 1, 3, 2, 2};
  r6.dim_order = {5, 4, 3, 2, 1, 0};
  s.outputs.push_back(r6);
  testblob::place(s);
  auto bytes = testblob::build(s);
  Buffer buf(bytes);
  auto r = Blob::parse(buf.data(), buf.size());
  CHECK(r.ok());
  if (r.ok()) {
    CHECK(r.get().num_inputs() == 7);
    CHECK(r.get().input(5).dtype == 6 && r.get().input(5).byte_size == 6);
    CHECK(r.get().input(6).rank == 0 && r.get().input(6).byte_size == 4);
    CHECK(r.get().output(0).numel() == 24 && r.get().output(0).byte_size == 48);
  }
  // No IO at all is a valid (if useless) delegate.
  Spec none;
  CHECK(parse_err(testblob::build(none)) == Error::Ok);
}

void test_header_defects() {
  const std::vector<uint8_t> good = testblob::build(conv_spec(true));
  CHECK(parse_err(good) == Error::Ok);

  // Null and every truncation, including inside the header.
  CHECK(Blob::parse(nullptr, 64).error() == Error::InvalidArgument);
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<long>(n));
    CHECK_MSG(parse_err(t) != Error::Ok, "prefix of %zu bytes accepted", n);
  }
  // Longer than total_size.
  {
    auto b = good;
    b.resize(b.size() + 16, 0);
    CHECK(parse_err(b) != Error::Ok);
  }
  // Misaligned base.
  for (size_t m : {1, 2, 4, 8, 12}) {
    CHECK(parse_err(good, m) == Error::InvalidArgument);
  }
  {
    auto b = good;
    b[0] = 'X';
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  for (uint16_t v : {0, 1, 3, 0xFFFF}) {
    auto b = good;
    wr16(b, 4, v);
    CHECK(parse_err(b) == Error::DelegateInvalidCompatibility);
    CHECK(g_last_log.find("blob format version " + std::to_string(v)) != std::string::npos);
  }
  {
    auto b = good;
    wr16(b, 6, 32);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr16(b, 20, 48);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 8, rd32(b, 8) - 16);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  // Table offsets: misaligned, outside, and counts that overrun.
  {
    auto b = good;
    wr32(b, 16, 72);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 16, 0xFFFFFFF0u);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr16(b, 12, 0xFFFF);
    wr16(b, 14, 0xFFFF);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 24, rd32(b, 24) + 4);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 24, static_cast<uint32_t>(b.size()));
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr16(b, 22, 0xFFFF);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
}

void test_section_defects() {
  const std::vector<uint8_t> good = testblob::build(conv_spec(true));
  const size_t sec = rd32(good, 24);
  {
    auto b = good; // misaligned section offset
    wr32(b, sec + 4, rd32(b, sec + 4) + 1);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // payload past the end
    wr32(b, sec + 8, static_cast<uint32_t>(b.size()));
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // offset + size wraps in 32 bits
    wr32(b, sec + 8, 0xFFFFFFFFu);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, sec + 4, 0xFFFFFFF0u);
    wr32(b, sec + 8, 0x20);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  for (uint32_t kind : {0u, 4u, 0xFFFFFFFFu}) {
    auto b = good;
    wr32(b, sec, kind);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // duplicate command stream
    wr32(b, sec + 16, 1);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // drop the TOSA section but keep the flag
    wr16(b, 22, 2);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // TOSA present, flag cleared
    wr32(b, 36, 0);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    // Only the TOSA section (command stream and weights missing).
    auto b = good;
    std::memcpy(&b[sec], &b[sec + 32], 16);
    wr16(b, 22, 1);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    // Weights missing: two sections, cmd + tosa.
    auto b = good;
    std::memcpy(&b[sec + 16], &b[sec + 32], 16);
    wr16(b, 22, 2);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
}

void test_io_defects() {
  const Spec s = conv_spec(false);
  const std::vector<uint8_t> good = testblob::build(s);
  const size_t io = 64;
  for (uint8_t dt : {0, 7, 255}) {
    auto b = good;
    b[io] = dt;
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 1] = 7; // rank
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 2] = 2; // elem size for int8
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, io + 8, 191); // byte size
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 44] = 1; // dim order (1,1,2,3)
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 44 + 3] = 4; // dim order value >= rank
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    // numel wraps to 0 in 32 bits (65536 x 65536): must not pass as 0 bytes.
    auto b = good;
    wr32(b, io + 20, 65536);
    wr32(b, io + 24, 65536);
    wr32(b, io + 28, 1);
    wr32(b, io + 32, 1);
    wr32(b, io + 8, 0);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // outside scratch
    wr32(b, io + 4, s.scratch - 191);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // offset + size wraps
    wr32(b, io + 4, 0xFFFFFFF0u);
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    // IO outside region 1 is a format error (the runtime has no other IO
    // buffer), whatever its offset.
    auto b = good;
    b[io + 3] = 2;
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
  {
    // Output entry (second entry) defects are caught too.
    auto b = good;
    b[io + 64] = 9;
    CHECK(parse_sealed(b) == Error::InvalidProgram);
  }
}

// Random corruption: whatever the bytes, parse returns (and ASan watches).
void test_fuzz() {
  const std::vector<uint8_t> good = testblob::build(conv_spec(true));
  uint32_t state = 12345;
  auto rnd = [&state]() {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  int accepted = 0;
  for (int it = 0; it < 5000; ++it) {
    auto b = good;
    const int flips = 1 + static_cast<int>(rnd() % 4);
    for (int f = 0; f < flips; ++f) {
      // Bias towards header and tables where the structure lives.
      const size_t pos = rnd() % (rnd() % 2 ? 256 : b.size());
      b[pos % b.size()] = static_cast<uint8_t>(rnd());
    }
    if (it % 2 == 0) {
      testblob::seal(b); // past the checksums, into the structural rules
    }
    Buffer buf(b);
    auto r = Blob::parse(buf.data(), buf.size());
    if (r.ok()) {
      ++accepted;
      // Whatever was accepted is consistent: sections inside, IO in scratch.
      const Blob& bl = r.get();
      for (const ethosu_ng::Section* sct :
           {&bl.command_stream(), &bl.weights(), &bl.tosa()}) {
        if (sct->present()) {
          CHECK(sct->data >= buf.data() &&
                sct->data + sct->size <= buf.data() + buf.size());
        }
      }
      for (size_t k = 0; k < bl.num_inputs(); ++k) {
        const IoEntry e = bl.input(k);
        CHECK(e.region != 1 ||
              uint64_t{e.offset} + e.byte_size <= bl.scratch_size());
      }
    }
  }
  std::printf("fuzz: %d of 5000 corrupted blobs still valid\n", accepted);
}

// ethosu_ng::crc32 is zlib's CRC-32: the check value, chaining, and the
// builder's byte-table CRC at every alignment and length.
void test_crc32() {
  const char* check = "123456789";
  CHECK(ethosu_ng::crc32(check, 9) == 0xCBF43926u);
  CHECK(ethosu_ng::crc32(check, 0) == 0);
  CHECK(ethosu_ng::crc32(check + 4, 5, ethosu_ng::crc32(check, 4)) == 0xCBF43926u);
  std::vector<uint8_t> data(96);
  uint32_t state = 7;
  for (uint8_t& x : data) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<uint8_t>(state >> 24);
  }
  for (size_t start = 0; start < 8; ++start) {
    for (size_t n = 0; start + n <= data.size(); ++n) {
      CHECK_MSG(
          ethosu_ng::crc32(data.data() + start, n) == testblob::crc32(data.data() + start, n),
          "crc32 at +%zu, %zu bytes",
          start,
          n);
    }
  }
}

// A flipped bit at every byte of a blob: the checksum rule of the part the
// byte lies in, with the part named in the log (magic and version bytes break
// their own rules first; padding is not covered and stays accepted).
void test_every_flipped_byte() {
  using ethosu_ng::BlobRule;
  for (bool tosa : {false, true}) {
    const std::vector<uint8_t> good = testblob::build(conv_spec(tosa));
    const size_t n_io = 2;
    const size_t sec = rd32(good, 24);
    const size_t n_sec = tosa ? 3 : 2;
    int checked = 0;
    for (size_t pos = 0; pos < good.size(); ++pos) {
      BlobRule want = BlobRule::kOk;
      std::string part;
      if (pos < 4) {
        want = BlobRule::kMagic;
      } else if (pos < 6) {
        want = BlobRule::kVersion;
      } else if (pos < 64) {
        want = BlobRule::kHeaderChecksum;
        part = "header";
      } else if (pos < 64 + 64 * n_io) {
        want = BlobRule::kIoTableChecksum;
        part = "io_table";
      } else if (pos >= sec && pos < sec + 16 * n_sec) {
        want = BlobRule::kSectionTableChecksum;
        part = "section_table";
      } else {
        for (size_t k = 0; k < n_sec; ++k) {
          const size_t off = rd32(good, sec + 16 * k + 4);
          if (pos >= off && pos < off + rd32(good, sec + 16 * k + 8)) {
            want = BlobRule::kSectionChecksum;
            part = k == 0 ? "command_stream" : k == 1 ? "weights" : "tosa";
          }
        }
      }
      auto b = good;
      b[pos] ^= static_cast<uint8_t>(1u << (pos % 8));
      g_last_log.clear();
      const BlobRule got = rule_of(b);
      CHECK_MSG(
          got == want,
          "byte %zu flipped: rule %s, expected %s",
          pos,
          ethosu_ng::blob_rule_id(got),
          ethosu_ng::blob_rule_id(want));
      if (!part.empty()) {
        ++checked;
        CHECK_MSG(
            logged_section() == part && parse_err(b) == Error::InvalidProgram,
            "byte %zu flipped: log \"%s\", expected section '%s'",
            pos,
            g_last_log.c_str(),
            part.c_str());
      }
    }
    CHECK(checked > 200);
  }
}

const char* error_name(Error e) {
  switch (e) {
    case Error::Ok:
      return "Ok";
    case Error::InvalidArgument:
      return "InvalidArgument";
    case Error::InvalidProgram:
      return "InvalidProgram";
    case Error::DelegateInvalidCompatibility:
      return "DelegateInvalidCompatibility";
    default:
      return "other";
  }
}

uint32_t fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 0x811C9DC5u;
  for (size_t i = 0; i < n; ++i) {
    h = (h ^ p[i]) * 0x01000193u;
  }
  return h;
}

// Every decoded field in the form of gen_blobs.py's describe(), so one string
// comparison checks the C++ decode against the Python writer's input.
std::string describe(const Blob& b) {
  char buf[256];
  std::string out;
  const ethosu_ng::Section& cmd = b.command_stream();
  const ethosu_ng::Section& w = b.weights();
  const ethosu_ng::Section& t = b.tosa();
  std::snprintf(
      buf,
      sizeof(buf),
      "n_in=%u n_out=%u scratch=%u fast=%u cmd=%u %u weights=%u %u tosa=%ld %u",
      static_cast<unsigned>(b.num_inputs()),
      static_cast<unsigned>(b.num_outputs()),
      static_cast<unsigned>(b.scratch_size()),
      static_cast<unsigned>(b.fast_scratch_size()),
      static_cast<unsigned>(cmd.size),
      static_cast<unsigned>(fnv1a(cmd.data, cmd.size)),
      static_cast<unsigned>(w.size),
      static_cast<unsigned>(fnv1a(w.data, w.size)),
      t.present() ? static_cast<long>(t.size) : -1L,
      t.present() ? static_cast<unsigned>(fnv1a(t.data, t.size)) : 0u);
  out += buf;
  const size_t n_in = b.num_inputs();
  for (size_t k = 0; k < n_in + b.num_outputs(); ++k) {
    const IoEntry e = k < n_in ? b.input(k) : b.output(k - n_in);
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &e.scale, 4);
    std::snprintf(
        buf,
        sizeof(buf),
        " io=%u %u %u %u %u %u %d %08x",
        e.dtype,
        e.rank,
        e.elem_size,
        e.region,
        static_cast<unsigned>(e.offset),
        static_cast<unsigned>(e.byte_size),
        static_cast<int>(e.zero_point),
        static_cast<unsigned>(scale_bits));
    out += buf;
    for (int i = 0; i < ethosu_ng::kMaxRank; ++i) {
      out += " " + std::to_string(e.shape[i]);
    }
    for (int i = 0; i < ethosu_ng::kMaxRank; ++i) {
      out += " " + std::to_string(e.dim_order[i]);
    }
  }
  return out;
}

// "ok DESCRIPTION" or "bad RULE ERROR": what the C++ reader makes of `bytes`
// at a 16-aligned base + `misalign` (exact-size buffer, so ASan sees overruns).
// A checksum rule adds the part the log line names: "bad RULE ERROR SECTION".
std::string verdict(const std::vector<uint8_t>& bytes, size_t misalign) {
  Buffer buf(bytes, misalign);
  g_last_log.clear();
  ethosu_ng::BlobRule rule = ethosu_ng::BlobRule::kOk;
  auto r = Blob::parse(buf.data(), buf.size(), &rule);
  if (r.ok() != (rule == ethosu_ng::BlobRule::kOk)) {
    return "inconsistent: parse ok but a rule broken, or the reverse";
  }
  if (r.ok()) {
    return "ok " + describe(r.get());
  }
  if (r.error() != ethosu_ng::blob_rule_error(rule)) {
    return "inconsistent: error is not blob_rule_error(rule)";
  }
  std::string out = std::string("bad ") + ethosu_ng::blob_rule_id(rule) + " " +
      error_name(r.error());
  if (is_checksum_rule(rule)) {
    out += " " + logged_section();
  }
  return out;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(
      (std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// One C++ constant against the value blob.py wrote into the manifest.
void check_const(const std::string& name, long want, long have) {
  CHECK_MSG(
      want == have,
      "constant %s: blob.py says %ld, blob.h says %ld",
      name.c_str(),
      want,
      have);
}

// The shared test vectors (runtime/tests/gen_blobs.py, also read by
// tests/test_blob.py): every verdict, rule and Error, and the constants of
// blob.h against blob.py's.
void test_vectors(const std::string& dir) {
  std::ifstream manifest(dir + "/manifest.txt");
  CHECK_MSG(manifest.good(), "no manifest in %s", dir.c_str());
  std::string line;
  int n_ok = 0;
  int n_bad = 0;
  int n_dtypes = 0;
  int n_sections = 0;
  bool dtype_listed[256] = {};
  while (std::getline(manifest, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "const") {
      std::string name;
      ls >> name;
      if (name == "dtype") {
        long code, elem;
        std::string dname;
        ls >> code >> elem >> dname;
        ++n_dtypes;
        const uint8_t c = static_cast<uint8_t>(code);
        dtype_listed[c] = true;
        check_const("elem size of dtype " + dname, elem, ethosu_ng::dtype_elem_size(c));
        CHECK_MSG(
            dname == ethosu_ng::dtype_name(c),
            "dtype %ld: blob.py says %s, blob.h says %s",
            code,
            dname.c_str(),
            ethosu_ng::dtype_name(c));
      } else if (name == "section") {
        long code;
        std::string sname;
        ls >> code >> sname;
        ++n_sections;
        long have = -1;
        if (sname == "command_stream") {
          have = ethosu_ng::kSectionCommandStream;
        } else if (sname == "weights") {
          have = ethosu_ng::kSectionWeights;
        } else if (sname == "tosa") {
          have = ethosu_ng::kSectionTosa;
        }
        check_const("section " + sname, code, have);
      } else {
        long want;
        ls >> want;
        const long have = name == "max_rank" ? ethosu_ng::kMaxRank
            : name == "region_scratch"       ? ethosu_ng::kRegionScratch
            : name == "version"              ? ethosu_ng::kBlobVersion
            : name == "align"                ? ethosu_ng::kBlobAlign
            : name == "header_size"          ? ethosu_ng::kHeaderSize
            : name == "io_entry_size"        ? ethosu_ng::kIoEntrySize
            : name == "section_entry_size"   ? ethosu_ng::kSectionEntrySize
            : name == "flag_has_tosa"        ? ethosu_ng::kFlagHasTosa
            : name == "header_crc_offset"    ? ethosu_ng::kHeaderCrcOffset
            : name == "io_table_crc_offset"  ? ethosu_ng::kIoTableCrcOffset
            : name == "section_table_crc_offset" ? ethosu_ng::kSectionTableCrcOffset
            : name == "crc32_check" ? static_cast<long>(ethosu_ng::crc32("123456789", 9))
                                             : -1;
        check_const(name, want, have);
      }
    } else if (kind == "ok" || kind == "bad") {
      std::string name;
      size_t misalign = 0;
      ls >> name >> misalign;
      std::string want;
      std::getline(ls, want);
      if (kind == "ok") {
        want = "ok" + want; // the rest of the line is " DESCRIPTION"
        ++n_ok;
      } else {
        std::istringstream ws(want);
        std::string rule, error, readers, section;
        ws >> rule >> error >> readers >> section;
        want = "bad " + rule + " " + error + (section.empty() ? "" : " " + section);
        ++n_bad;
      }
      const std::string got = verdict(read_file(dir + "/" + name), misalign);
      CHECK_MSG(
          got == want,
          "%s:\n  want %s\n  got  %s",
          name.c_str(),
          want.c_str(),
          got.c_str());
    }
  }
  // blob.h knows no dtype code blob.py lacks.
  for (int c = 0; c < 256; ++c) {
    if (!dtype_listed[c]) {
      CHECK_MSG(
          ethosu_ng::dtype_elem_size(static_cast<uint8_t>(c)) == 0,
          "dtype code %d is in blob.h but not in blob.py",
          c);
    }
  }
  CHECK(n_dtypes == 6 && n_sections == 3);
  CHECK(n_ok >= 3 && n_bad >= 35);
  std::printf("test vectors: %d ok, %d bad\n", n_ok, n_bad);
}

// tests/test_blob_fuzz.py drives this: per request (u32 length, u32 misalign,
// then the bytes) one verdict line on stdout; ends at end of input.
int serve() {
  for (;;) {
    uint32_t head[2];
    if (std::fread(head, sizeof(head), 1, stdin) != 1) {
      return 0;
    }
    std::vector<uint8_t> bytes(head[0]);
    if (head[0] != 0 && std::fread(bytes.data(), head[0], 1, stdin) != 1) {
      return 1;
    }
    std::printf("%s\n", verdict(bytes, head[1] % 16).c_str());
    std::fflush(stdout);
  }
}

} // namespace

int main(int argc, char** argv) {
  executorch::runtime::runtime_init();
  executorch::runtime::register_pal(executorch::runtime::PalImpl::create(capture_log, __FILE__));
  if (argc > 1 && std::string(argv[1]) == "--serve") {
    g_quiet_log = true;
    return serve();
  }
  test_crc32();
  test_every_flipped_byte();
  test_good();
  test_header_defects();
  test_section_defects();
  test_io_defects();
  test_fuzz();
  if (argc > 1) {
    test_vectors(argv[1]);
  }
  return harness::finish("test_blob");
}
