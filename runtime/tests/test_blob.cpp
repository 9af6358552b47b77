// Blob v1 parser: accepts good blobs (ours and the Python writer's), rejects
// every listed defect with an Error, and never reads outside the buffer
// (run under ASan: buffers are exact-size, so a stray read is reported).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

Error parse_err(const std::vector<uint8_t>& bytes, size_t misalign = 0) {
  Buffer buf(bytes, misalign);
  auto r = Blob::parse(buf.data(), buf.size());
  return r.ok() ? Error::Ok : r.error();
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
  for (uint8_t dt = 1; dt <= 5; ++dt) {
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
    CHECK(r.get().num_inputs() == 6);
    CHECK(r.get().input(5).rank == 0 && r.get().input(5).byte_size == 4);
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
    CHECK(parse_err(good, m) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[0] = 'X';
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  for (uint16_t v : {0, 2, 0xFFFF}) {
    auto b = good;
    wr16(b, 4, v);
    CHECK(parse_err(b) == Error::DelegateInvalidCompatibility);
  }
  {
    auto b = good;
    wr16(b, 6, 32);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr16(b, 20, 48);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 8, rd32(b, 8) - 16);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  // Table offsets: misaligned, outside, and counts that overrun.
  {
    auto b = good;
    wr32(b, 16, 72);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 16, 0xFFFFFFF0u);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr16(b, 12, 0xFFFF);
    wr16(b, 14, 0xFFFF);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 24, rd32(b, 24) + 4);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, 24, static_cast<uint32_t>(b.size()));
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr16(b, 22, 0xFFFF);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
}

void test_section_defects() {
  const std::vector<uint8_t> good = testblob::build(conv_spec(true));
  const size_t sec = rd32(good, 24);
  {
    auto b = good; // misaligned section offset
    wr32(b, sec + 4, rd32(b, sec + 4) + 1);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // payload past the end
    wr32(b, sec + 8, static_cast<uint32_t>(b.size()));
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // offset + size wraps in 32 bits
    wr32(b, sec + 8, 0xFFFFFFFFu);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, sec + 4, 0xFFFFFFF0u);
    wr32(b, sec + 8, 0x20);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  for (uint32_t kind : {0u, 4u, 0xFFFFFFFFu}) {
    auto b = good;
    wr32(b, sec, kind);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // duplicate command stream
    wr32(b, sec + 16, 1);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // drop the TOSA section but keep the flag
    wr16(b, 22, 2);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // TOSA present, flag cleared
    wr32(b, 36, 0);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    // Only the TOSA section (command stream and weights missing).
    auto b = good;
    std::memcpy(&b[sec], &b[sec + 32], 16);
    wr16(b, 22, 1);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    // Weights missing: two sections, cmd + tosa.
    auto b = good;
    std::memcpy(&b[sec + 16], &b[sec + 32], 16);
    wr16(b, 22, 2);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
}

void test_io_defects() {
  const Spec s = conv_spec(false);
  const std::vector<uint8_t> good = testblob::build(s);
  const size_t io = 64;
  for (uint8_t dt : {0, 6, 255}) {
    auto b = good;
    b[io] = dt;
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 1] = 7; // rank
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 2] = 2; // elem size for int8
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    wr32(b, io + 8, 191); // byte size
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 44] = 1; // dim order (1,1,2,3)
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good;
    b[io + 44 + 3] = 4; // dim order value >= rank
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    // numel wraps to 0 in 32 bits (65536 x 65536): must not pass as 0 bytes.
    auto b = good;
    wr32(b, io + 20, 65536);
    wr32(b, io + 24, 65536);
    wr32(b, io + 28, 1);
    wr32(b, io + 32, 1);
    wr32(b, io + 8, 0);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // outside scratch
    wr32(b, io + 4, s.scratch - 191);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    auto b = good; // offset + size wraps
    wr32(b, io + 4, 0xFFFFFFF0u);
    CHECK(parse_err(b) == Error::InvalidProgram);
  }
  {
    // Region 2 is not checked against scratch (doc: region-1 rule only).
    auto b = good;
    b[io + 3] = 2;
    wr32(b, io + 4, 0xFFFF0000u);
    CHECK(parse_err(b) == Error::Ok);
  }
  {
    // Output entry (second entry) defects are caught too.
    auto b = good;
    b[io + 64] = 9;
    CHECK(parse_err(b) == Error::InvalidProgram);
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

// Blobs from ethosu_ng/blob.py (see gen_blobs.py) with their manifest.
void test_python_blobs(const std::string& dir) {
  std::ifstream manifest(dir + "/manifest.txt");
  CHECK_MSG(manifest.good(), "no manifest in %s", dir.c_str());
  std::string line;
  int n_good = 0;
  int n_bad = 0;
  std::vector<uint8_t> bytes;
  Buffer* current = nullptr;
  Blob blob;
  size_t io_index = 0;
  auto read_file = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(
        (std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  while (std::getline(manifest, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "blob") {
      std::string name;
      long n_in, n_out, scratch, fast, tosa, cmd, weights;
      ls >> name >> n_in >> n_out >> scratch >> fast >> tosa >> cmd >> weights;
      delete current;
      current = new Buffer(read_file(dir + "/" + name));
      auto r = Blob::parse(current->data(), current->size());
      CHECK_MSG(r.ok(), "%s rejected", name.c_str());
      if (!r.ok()) {
        continue;
      }
      blob = r.get();
      io_index = 0;
      ++n_good;
      CHECK(blob.num_inputs() == n_in && blob.num_outputs() == n_out);
      CHECK(blob.scratch_size() == scratch && blob.fast_scratch_size() == fast);
      CHECK(blob.tosa().present() == (tosa >= 0));
      CHECK(!blob.tosa().present() || blob.tosa().size == tosa);
      CHECK(blob.command_stream().size == cmd && blob.weights().size == weights);
    } else if (kind == "io") {
      long v[8];
      std::string scale_hex;
      ls >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> scale_hex;
      long shape[6], order[6];
      for (long& x : shape) ls >> x;
      for (long& x : order) ls >> x;
      const size_t n_in = blob.num_inputs();
      const IoEntry e = io_index < n_in ? blob.input(io_index)
                                        : blob.output(io_index - n_in);
      ++io_index;
      CHECK(e.dtype == v[0] && e.rank == v[1] && e.elem_size == v[2]);
      CHECK(e.region == v[3] && e.offset == v[4] && e.byte_size == v[5]);
      CHECK(e.zero_point == v[6]);
      CHECK(e.scale == static_cast<float>(std::strtod(scale_hex.c_str(), nullptr)));
      for (int i = 0; i < e.rank; ++i) {
        CHECK(e.shape[i] == shape[i] && e.dim_order[i] == order[i]);
      }
    } else if (kind == "bad") {
      std::string name;
      ls >> name;
      Buffer b(read_file(dir + "/" + name));
      auto r = Blob::parse(b.data(), b.size());
      CHECK_MSG(!r.ok(), "%s accepted", name.c_str());
      ++n_bad;
    }
  }
  delete current;
  CHECK(n_good >= 3 && n_bad >= 20);
  std::printf("python blobs: %d good, %d bad\n", n_good, n_bad);
}

} // namespace

int main(int argc, char** argv) {
  executorch::runtime::runtime_init();
  test_good();
  test_header_defects();
  test_section_defects();
  test_io_defects();
  test_fuzz();
  if (argc > 1) {
    test_python_blobs(argv[1]);
  }
  return harness::finish("test_blob");
}
