// Checkpoints (runtime/ckpt): the safetensors reader/writer (bit-exact round trips for every
// dtype, and every malformed file the reader must reject without crashing or allocating what the
// file cannot hold), and training checkpoints (round trip, LAST, retention, fallback when LAST or
// its target is broken, tmp leftovers, checksum mismatches). Malformed files are assembled here
// byte by byte, so each test controls exactly what is wrong.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "test_util.h"

namespace ck = bv::ckpt;
namespace stdfs = std::filesystem;

using bv::test::contains;
using bv::test::error_of;
using TempDir = bv::test::TempDir;

namespace {

using bv::test::read_bytes;
using bv::test::write_bytes;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A safetensors file from its parts: length prefix, header text, data buffer.
std::string st_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

// Random bit patterns (NaN payloads, subnormals, negative zeros included) of any dtype.
at::Tensor random_bits(c10::ScalarType dtype, at::IntArrayRef shape) {
  if (dtype == at::kBool) return at::randint(0, 2, shape, at::kLong).to(at::kBool);
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  int64_t itemsize = at::elementSize(dtype);
  return at::randint(0, 256, {numel * itemsize}, at::kLong).to(at::kByte).view(dtype).view(shape);
}

const at::Tensor& get(const ck::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  FAIL("no tensor named " << name);
  static at::Tensor none;
  return none;
}

// The error message of loading `bytes` as a safetensors file; the reader must name the file.
std::string load_error(const TempDir& dir, const std::string& bytes) {
  std::string path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  std::string load_msg = error_of([&] { ck::load_safetensors(path); });
  CHECK(contains(load_msg, path));
  // Header problems are found by the header reader alone, with the same message.
  try {
    ck::read_safetensors_header(path);
  } catch (const bv::Error& e) {
    CHECK(std::string(e.what()) == load_msg);
  }
  return load_msg;
}

// One valid entry: an F32 tensor of `n` elements at [begin, begin + 4n].
std::string f32_entry(const std::string& name, int64_t n, int64_t begin) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) +
         "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(begin + 4 * n) +
         "]}";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// safetensors

TEST_CASE("safetensors round trip is bit-exact for every dtype", "[ckpt][safetensors]") {
  TempDir dir;
  at::manual_seed(3);
  const c10::ScalarType dtypes[] = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
                                    at::kInt,    at::kShort, at::kChar, at::kByte,     at::kBool};
  const char* codes[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"};
  ck::NamedTensors tensors;
  for (size_t i = 0; i < std::size(dtypes); ++i) {
    std::string code = codes[i];
    tensors.emplace_back("m/" + code, random_bits(dtypes[i], {3, 5}));
    tensors.emplace_back("scalar/" + code, random_bits(dtypes[i], {}));
    tensors.emplace_back("empty/" + code, random_bits(dtypes[i], {0, 4}));
  }
  // A non-contiguous view is written as its values, not its storage.
  at::Tensor base = at::arange(12, at::kFloat).view({3, 4});
  tensors.emplace_back("strided", base.t());
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode"}};
  std::string path = dir / "all.safetensors";
  ck::save_safetensors(path, tensors, meta);

  ck::SafetensorsFile header = ck::read_safetensors_header(path);
  CHECK(header.metadata == meta);
  CHECK(header.data_start % 8 == 0);  // header padded to a multiple of 8
  REQUIRE(header.tensors.size() == tensors.size());
  // Name order, offsets contiguous from 0 in that order.
  uint64_t offset = 0;
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    if (i > 0) CHECK(header.tensors[i - 1].name < header.tensors[i].name);
    CHECK(header.tensors[i].begin == offset);
    offset = header.tensors[i].end;
  }
  CHECK(header.data_start + offset == header.file_size);
  for (size_t i = 0; i < std::size(dtypes); ++i) {
    for (const auto& t : header.tensors) {
      if (t.name == std::string("m/") + codes[i]) CHECK(t.dtype_code == codes[i]);
    }
  }

  ck::NamedTensors loaded = ck::load_safetensors(path);
  REQUIRE(loaded.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    CHECK(same_bits(get(loaded, name), t));
  }
  CHECK(get(loaded, "scalar/BF16").dim() == 0);
  CHECK(get(loaded, "empty/F16").sizes() == at::IntArrayRef({0, 4}));

  // The filter picks tensors; the digest covers the whole file either way.
  ck::FileDigest all, some;
  ck::load_safetensors(path, nullptr, &all);
  ck::NamedTensors picked = ck::load_safetensors(
      path, [](const std::string& n) { return n.rfind("m/", 0) == 0; }, &some);
  CHECK(picked.size() == std::size(dtypes));
  CHECK(all.bytes == header.file_size);
  CHECK(some.bytes == all.bytes);
  CHECK(some.crc32 == all.crc32);
  ck::FileDigest written = ck::save_safetensors_digest(dir / "again.safetensors", tensors, meta);
  CHECK(written.crc32 == all.crc32);
  CHECK(read_bytes(dir / "again.safetensors") == read_bytes(path));  // deterministic bytes
}

TEST_CASE("safetensors writer: exact bytes of a small file", "[ckpt][safetensors]") {
  TempDir dir;
  std::string path = dir / "small.safetensors";
  ck::save_safetensors(path, {{"b", at::tensor({1, 2}, at::kByte)}, {"a", at::tensor({1.5f})}});
  // a sorts first: a at [0,4], b at [4,6]; the header is padded with spaces to a multiple of 8.
  std::string header = R"({"a":{"data_offsets":[0,4],"dtype":"F32","shape":[1]},)"
                       R"("b":{"data_offsets":[4,6],"dtype":"U8","shape":[2]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data("\x00\x00\xc0\x3f\x01\x02", 6);  // 1.5f little-endian, then 1, 2
  CHECK(read_bytes(path) == st_file(header, data));
}

TEST_CASE("safetensors writer rejects what the format cannot hold", "[ckpt][safetensors]") {
  TempDir dir;
  std::string path = dir / "w.safetensors";
  at::Tensor t = at::zeros({2});
  CHECK(contains(error_of([&] {
                   ck::save_safetensors(path, {{"x", t}, {"x", t}});
                 }),
                 "'x' appears twice"));
  CHECK(contains(error_of([&] { ck::save_safetensors(path, {{"", t}}); }), "empty tensor name"));
  CHECK(contains(error_of([&] { ck::save_safetensors(path, {{"__metadata__", t}}); }), "reserved"));
  std::string msg = error_of([&] {
    ck::save_safetensors(path, {{"c", at::zeros({2}, at::kComplexFloat)}});
  });
  CHECK(contains(msg, "tensor 'c'"));
  CHECK(contains(msg, "ComplexFloat"));
  CHECK_FALSE(stdfs::exists(path));
  // Nothing left behind by the failed attempts.
  CHECK(stdfs::is_empty(dir.path));
}

TEST_CASE("safetensors reader: truncated files", "[ckpt][safetensors]") {
  TempDir dir;
  std::string good = dir / "good.safetensors";
  ck::save_safetensors(good, {{"a", at::arange(10, at::kFloat)}, {"b", at::ones({3}, at::kLong)}});
  std::string bytes = read_bytes(good);
  ck::SafetensorsFile header = ck::read_safetensors_header(good);
  uint64_t hs = header.data_start;
  for (uint64_t cut : {uint64_t(0), uint64_t(3), uint64_t(8), hs / 2, hs - 1, hs, hs + 1, hs + 40,
                       uint64_t(bytes.size() - 1)}) {
    INFO("truncated to " << cut << " of " << bytes.size());
    std::string msg = load_error(dir, bytes.substr(0, cut));
    CHECK(msg != "");
  }
  CHECK(contains(load_error(dir, bytes.substr(0, 3)), "too short"));
  CHECK(contains(load_error(dir, bytes.substr(0, hs / 2)), "larger than the file"));
  CHECK(contains(load_error(dir, bytes.substr(0, hs + 1)), "outside the data buffer"));
}

TEST_CASE("safetensors reader: header length and JSON", "[ckpt][safetensors]") {
  TempDir dir;
  CHECK(contains(load_error(dir, le64(~uint64_t(0)) + "{}"), "over the limit"));
  CHECK(contains(load_error(dir, le64(200000000) + "{}"), "over the limit"));
  CHECK(contains(load_error(dir, le64(100) + "{}      "), "larger than the file"));
  CHECK(contains(load_error(dir, st_file("", "")), "starting with '{'"));
  CHECK(contains(load_error(dir, st_file("[1, 2]  ", "")), "starting with '{'"));
  CHECK(contains(load_error(dir, st_file("  {}", "")), "starting with '{'"));
  CHECK(contains(load_error(dir, st_file("{\"a\": ", "")), "not valid JSON"));
  CHECK(contains(load_error(dir, st_file("{} {}", "")), "not valid JSON"));
  CHECK(contains(load_error(dir, st_file(std::string("{}\0\0\0\0\0\0", 8), "")), "NUL byte"));
  // Deep nesting is refused early instead of being built.
  std::string deep = "{\"a\":" + std::string(5000, '[') + std::string(5000, ']') + "}";
  CHECK(contains(load_error(dir, st_file(deep, "")), "nested"));
  // An empty header and empty buffer is a valid, empty file.
  std::string empty = dir / "empty.safetensors";
  write_bytes(empty, st_file("{}      ", ""));
  CHECK(ck::load_safetensors(empty).empty());
}

TEST_CASE("safetensors reader: duplicate keys", "[ckpt][safetensors]") {
  TempDir dir;
  std::string data(8, '\0');
  CHECK(contains(
      load_error(dir, st_file("{" + f32_entry("w", 1, 0) + "," + f32_entry("w", 1, 4) + "}", data)),
      "duplicate key \"w\""));
  CHECK(contains(load_error(dir, st_file(R"({"w":{"dtype":"F32","dtype":"I32","shape":[1],)"
                                         R"("data_offsets":[0,4]}})",
                                         data.substr(0, 4))),
                 "duplicate key \"dtype\""));
  CHECK(contains(load_error(dir, st_file(R"({"__metadata__":{"k":"a","k":"b"}})", "")),
                 "duplicate key \"k\""));
}

TEST_CASE("safetensors reader: bad entries", "[ckpt][safetensors]") {
  TempDir dir;
  auto one = [&](const std::string& entry, const std::string& data) {
    return load_error(dir, st_file("{\"t\":" + entry + "}", data));
  };
  std::string four(4, '\0');
  std::string msg = one(R"({"dtype":"F128","shape":[1],"data_offsets":[0,4]})", four);
  CHECK(contains(msg, "tensor 't'"));
  CHECK(contains(msg, "unknown or unsupported dtype \"F128\""));
  CHECK(contains(one(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", four),
                 "dtype must be a string"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", four), "negative"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", four),
                 "non-negative integer"));
  CHECK(contains(one(R"({"dtype":"F32","shape":1,"data_offsets":[0,4]})", four),
                 "shape must be an array"));
  // Absurd shapes are refused from the header alone: nothing near 2^80 bytes is ever asked for
  // (an allocation attempt would surface as a libtorch error, not this bv::Error).
  CHECK(contains(one(R"({"dtype":"F32","shape":[1099511627776,1099511627776],)"
                     R"("data_offsets":[0,4]})",
                     four),
                 "is too large"));
  CHECK(contains(one(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]})", four),
                 "is too large"));
  CHECK(
      contains(one(R"({"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]})", four),
               "non-negative integer"));  // beyond uint64: nlohmann reads it as a float
  // A large but consistent shape whose bytes are not in the file: refused before allocating.
  CHECK(
      contains(one(R"({"dtype":"F32","shape":[8589934592],"data_offsets":[0,34359738368]})", four),
               "outside the data buffer"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", four),
                 "span 4 bytes but F32 [2] needs 8"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})", four), "end < begin"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", four),
                 "data_offsets must be [begin, end]"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", four), "negative"));
  CHECK(contains(one(R"({"dtype":"F32","shape":[1]})", four), "missing \"data_offsets\""));
  CHECK(contains(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1})", four),
                 "unexpected key \"x\""));
  CHECK(contains(one(R"([1])", four), "entry must be an object"));
  CHECK(contains(one(R"({"dtype":"BOOL","shape":[4],"data_offsets":[0,4]})",
                     std::string("\x00\x01\x02\x01", 4)),
                 "BOOL data holds a byte other than 0 or 1"));
}

TEST_CASE("safetensors reader: offsets must tile the buffer exactly", "[ckpt][safetensors]") {
  TempDir dir;
  std::string b8(8, '\0');
  // Overlap: b starts inside a.
  std::string overlap = "{" + f32_entry("a", 2, 0) + "," + f32_entry("b", 1, 4) + "}";
  std::string msg = load_error(dir, st_file(overlap, std::string(12, '\0')));
  CHECK(contains(msg, "overlap"));
  CHECK(contains(msg, "tensor 'b'"));
  // Hole: a gap of 4 bytes between a and b.
  msg = load_error(dir, st_file("{" + f32_entry("a", 1, 0) + "," + f32_entry("b", 1, 8) + "}",
                                std::string(12, '\0')));
  CHECK(contains(msg, "leave a hole"));
  // Not starting at 0.
  CHECK(contains(load_error(dir, st_file("{" + f32_entry("a", 1, 4) + "}", b8)), "leave a hole"));
  // Two tensors on the same bytes.
  CHECK(contains(
      load_error(dir, st_file("{" + f32_entry("a", 1, 0) + "," + f32_entry("b", 1, 0) + "}",
                              std::string(4, '\0'))),
      "overlap"));
  // Trailing bytes after the last tensor.
  CHECK(
      contains(load_error(dir, st_file("{" + f32_entry("a", 1, 0) + "}", b8)), "4 trailing bytes"));
  // Beyond the buffer.
  CHECK(contains(load_error(dir, st_file("{" + f32_entry("a", 4, 0) + "}", b8)),
                 "outside the data buffer"));
  // The same layout, consistent, loads.
  std::string ok = dir / "ok.safetensors";
  write_bytes(ok, st_file("{" + f32_entry("a", 1, 0) + "," + f32_entry("b", 1, 4) + "}", b8));
  CHECK(ck::load_safetensors(ok).size() == 2);
}

TEST_CASE("safetensors reader: __metadata__", "[ckpt][safetensors]") {
  TempDir dir;
  CHECK(contains(load_error(dir, st_file(R"({"__metadata__":{"a":1}})", "")),
                 "__metadata__ value for \"a\" must be a string"));
  CHECK(contains(load_error(dir, st_file(R"({"__metadata__":[1]})", "")),
                 "__metadata__ must be an object"));
  std::string ok = dir / "meta.safetensors";
  write_bytes(ok, st_file(R"({"__metadata__":{"a":"1"}})", ""));
  CHECK(ck::read_safetensors_header(ok).metadata.at("a") == "1");
  CHECK(contains(error_of([&] { ck::load_safetensors(dir / "missing.safetensors"); }),
                 "missing.safetensors"));
}

// ---------------------------------------------------------------------------------------------
// Training checkpoints

namespace {

ck::NamedTensors step_tensors(int64_t step) {
  return {{"params/img/head/kernel", at::full({4, 3}, static_cast<double>(step), at::kFloat)},
          {"params/img/head/bias", at::full({3}, static_cast<double>(step), at::kBFloat16)},
          {"opt/count", at::full(at::IntArrayRef{}, step, at::kLong)}};
}

std::string step_state(int64_t step) {
  return "{\"data\":{\"position\":" + std::to_string(step * 10) +
         "},\"step\":" + std::to_string(step) + "}";
}

std::vector<int64_t> steps_of(const std::string& workdir) { return ck::list_checkpoints(workdir); }

void flip_byte(const std::string& path, uint64_t offset) {
  std::string bytes = read_bytes(path);
  REQUIRE(offset < bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x40);
  write_bytes(path, bytes);
}

std::string ckpt_dir(const TempDir& w, int64_t step) { return w / ck::checkpoint_dir_name(step); }

std::string crc_hex_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size()));
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return buf;
}

// Replaces a checkpoint's manifest.json with `text` and manifest.crc32 with its true checksum,
// so that what the test wrote, not the checksum, is what the loader judges.
void write_manifest(const std::string& dir, const std::string& text) {
  write_bytes(dir + "/manifest.json", text);
  write_bytes(dir + "/manifest.crc32", crc_hex_of(text) + "\n");
}

// A pid that no process has, for fake leftovers of dead processes.
long dead_pid() {
  for (long pid = 4000000; pid > 1000; --pid) {
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return pid;
  }
  FAIL("no free pid");
  return -1;
}

}  // namespace

TEST_CASE("checkpoint round trip, LAST and manifest", "[ckpt][checkpoint]") {
  TempDir w;
  CHECK_FALSE(ck::load_latest_checkpoint(w.path).has_value());
  CHECK_FALSE(ck::load_latest_checkpoint(w / "missing").has_value());
  CHECK(ck::checkpoint_dir_name(42) == "ckpt-000000042");

  ck::save_checkpoint(w.path, 42, step_tensors(42), step_state(42), false);
  CHECK(read_bytes(w / "LAST") == "ckpt-000000042\n");
  CHECK(steps_of(w.path) == std::vector<int64_t>{42});
  std::string manifest = read_bytes(ckpt_dir(w, 42) + "/manifest.json");
  CHECK(contains(manifest, "\"crc32\""));
  CHECK(contains(manifest, "\"keep\": false"));
  CHECK(contains(manifest, "\"version\": 2"));
  // manifest.crc32: the manifest's own checksum, 8 hex digits and a newline.
  CHECK(read_bytes(ckpt_dir(w, 42) + "/manifest.crc32") == crc_hex_of(manifest) + "\n");

  auto loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded.has_value());
  CHECK(loaded->step == 42);
  CHECK(loaded->path == ckpt_dir(w, 42));
  CHECK(loaded->warning.empty());
  CHECK(loaded->version == 2);
  CHECK(loaded->state_json == step_state(42));  // nlohmann's compact dump, keys sorted
  REQUIRE(loaded->tensors.size() == 3);
  for (const auto& [name, t] : step_tensors(42)) {
    INFO(name);
    CHECK(same_bits(get(loaded->tensors, name), t));
  }
  // Nothing else in the workdir: no tmp files or directories left.
  std::vector<std::string> names;
  for (const auto& e : stdfs::directory_iterator(w.path)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"LAST", "ckpt-000000042"});

  CHECK(contains(error_of([&] { ck::save_checkpoint(w.path, 43, {}, "{oops", false); }),
                 "not valid JSON"));
  CHECK(contains(error_of([&] { ck::save_checkpoint(w.path, -1, {}, "{}", false); }), ">= 0"));
}

TEST_CASE("checkpoint retention: keep marks survive, the rest is replaced", "[ckpt][checkpoint]") {
  TempDir w;
  for (int64_t step = 1; step <= 6; ++step) {
    bool keep = step == 2 || step == 4;
    ck::save_checkpoint(w.path, step, step_tensors(step), step_state(step), keep);
  }
  CHECK(steps_of(w.path) == std::vector<int64_t>{2, 4, 6});
  auto loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 6);
  CHECK_FALSE(loaded->keep);

  // Re-saving the same step replaces it (here with a keep mark and new values).
  ck::save_checkpoint(w.path, 6, step_tensors(60), step_state(60), true);
  loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 6);
  CHECK(loaded->keep);
  CHECK(same_bits(get(loaded->tensors, "opt/count"), at::full(at::IntArrayRef{}, 60, at::kLong)));
  CHECK(steps_of(w.path) == std::vector<int64_t>{2, 4, 6});

  // Resuming from an earlier step: later non-kept checkpoints of the abandoned run are removed,
  // later kept ones stay.
  ck::save_checkpoint(w.path, 7, step_tensors(7), step_state(7), false);
  CHECK(steps_of(w.path) == std::vector<int64_t>{2, 4, 6, 7});
  ck::save_checkpoint(w.path, 3, step_tensors(3), step_state(3), false);
  CHECK(steps_of(w.path) == std::vector<int64_t>{2, 3, 4, 6});
  // The kept ckpt-6 is newer and valid: the loader takes it, not LAST's ckpt-3, and says so
  // (a resume never rewinds silently).
  loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 6);
  CHECK(contains(loaded->warning, "LAST in '" + w.path + "' names ckpt-000000003"));
  CHECK(contains(loaded->warning, "ckpt-000000006 is newer and valid"));
  CHECK(contains(loaded->warning, "move the newer ckpt-* directories out"));
}

TEST_CASE("checkpoint fallback when LAST is missing, garbage or points to a broken dir",
          "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, step_tensors(1), step_state(1), true);
  ck::save_checkpoint(w.path, 2, step_tensors(2), step_state(2), true);
  ck::save_checkpoint(w.path, 3, step_tensors(3), step_state(3), false);

  SECTION("LAST missing") {
    stdfs::remove(w / "LAST");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 3);
    CHECK(contains(loaded->warning, "no LAST file"));
  }
  SECTION("LAST garbage") {
    write_bytes(w / "LAST", "../../etc");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 3);
    CHECK(contains(loaded->warning, "not a checkpoint name"));
  }
  SECTION("LAST points to a deleted dir") {
    stdfs::remove_all(ckpt_dir(w, 3));
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "ckpt-000000003"));
    CHECK(contains(loaded->warning, "loaded ckpt-000000002"));
    CHECK(same_bits(get(loaded->tensors, "params/img/head/kernel"), step_tensors(2)[0].second));
  }
  SECTION("a flipped byte in the tensor data fails the checksum") {
    std::string file = ckpt_dir(w, 3) + "/tensors.safetensors";
    flip_byte(file, stdfs::file_size(file) - 3);
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "checksum"));
    // The broken directory is not loaded directly either.
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(ckpt_dir(w, 3)); }), "corrupt"));
  }
  SECTION("a flipped byte in the safetensors header") {
    flip_byte(ckpt_dir(w, 3) + "/tensors.safetensors", 20);
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK_FALSE(loaded->warning.empty());
  }
  SECTION("a truncated tensors file") {
    std::string file = ckpt_dir(w, 3) + "/tensors.safetensors";
    stdfs::resize_file(file, stdfs::file_size(file) - 1);
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "the manifest says"));
  }
  SECTION("a broken manifest") {
    write_bytes(ckpt_dir(w, 3) + "/manifest.json", "{\"format\": \"bvlua.check");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "manifest.json is not valid JSON"));
  }
  SECTION("a manifest with wrong types") {
    write_manifest(ckpt_dir(w, 3),
                   R"({"format":"bvlua.checkpoint","version":2,"step":3,"files":[1],"state":{}})");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "manifest.json is malformed"));
  }
  SECTION("two broken checkpoints in a row") {
    stdfs::remove(ckpt_dir(w, 3) + "/manifest.json");
    flip_byte(ckpt_dir(w, 2) + "/tensors.safetensors",
              stdfs::file_size(ckpt_dir(w, 2) + "/tensors.safetensors") - 1);
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 1);
    CHECK(contains(loaded->warning, "ckpt-000000002"));
  }
  SECTION("every checkpoint broken is an error naming them") {
    for (int64_t s : {1, 2, 3}) {
      std::string file = ckpt_dir(w, s) + "/tensors.safetensors";
      flip_byte(file, stdfs::file_size(file) - 1);
    }
    std::string msg = error_of([&] { ck::load_latest_checkpoint(w.path); });
    CHECK(contains(msg, "no valid checkpoint"));
    CHECK(contains(msg, "ckpt-000000001"));
    CHECK(contains(msg, "ckpt-000000003"));
    CHECK(contains(msg, "checksum"));
  }
}

TEST_CASE("checkpoint checksum mismatch with nothing to fall back to", "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 5, step_tensors(5), step_state(5), false);
  std::string file = ckpt_dir(w, 5) + "/tensors.safetensors";
  flip_byte(file, stdfs::file_size(file) - 5);
  std::string msg = error_of([&] { ck::load_latest_checkpoint(w.path); });
  CHECK(contains(msg, "checksum"));
  CHECK(contains(msg, "ckpt-000000005"));
  // LAST pointing at a deleted dir with nothing else is an error too, not a fresh start.
  stdfs::remove_all(ckpt_dir(w, 5));
  CHECK(contains(error_of([&] { ck::load_latest_checkpoint(w.path); }), "no manifest.json"));
}

TEST_CASE("checkpoint tmp leftovers are ignored, and stale ones removed by the next save",
          "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, step_tensors(1), step_state(1), false);
  long dead = dead_pid();
  // A complete-looking copy under a dead writer's tmp name (killed just before its rename).
  std::string dead_tmp = ckpt_dir(w, 2) + ".tmp-" + std::to_string(dead);
  stdfs::copy(ckpt_dir(w, 1), dead_tmp);
  write_bytes(w / ("LAST.tmp-" + std::to_string(dead)), "ckpt-000000002\n");
  // A leftover of a live process (pid 1) must not be touched.
  std::string live_tmp = ckpt_dir(w, 9) + ".tmp-1";
  stdfs::create_directory(live_tmp);

  CHECK(steps_of(w.path) == std::vector<int64_t>{1});
  stdfs::remove(w / "LAST");
  auto loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 1);

  ck::save_checkpoint(w.path, 3, step_tensors(3), step_state(3), false);
  CHECK_FALSE(stdfs::exists(dead_tmp));
  CHECK_FALSE(stdfs::exists(w / ("LAST.tmp-" + std::to_string(dead))));
  CHECK(stdfs::exists(live_tmp));
  CHECK(steps_of(w.path) == std::vector<int64_t>{3});
}

TEST_CASE("a failed save leaves the previous checkpoint and LAST alone", "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, step_tensors(1), step_state(1), false);
  ck::NamedTensors bad = step_tensors(2);
  bad.emplace_back("complex", at::zeros({2}, at::kComplexFloat));
  CHECK(contains(error_of([&] { ck::save_checkpoint(w.path, 2, bad, step_state(2), false); }),
                 "tensor 'complex'"));
  CHECK(read_bytes(w / "LAST") == "ckpt-000000001\n");
  CHECK(steps_of(w.path) == std::vector<int64_t>{1});
  for (const auto& e : stdfs::directory_iterator(w.path)) {
    CHECK_FALSE(contains(e.path().filename().string(), ".tmp-"));
  }
  auto loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 1);
  CHECK(loaded->warning.empty());
}

// Replaces the first `from` in `text` with `to`; the test fails when `from` is not there.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

TEST_CASE("checkpoint manifests nested too deep are failed checkpoints, not a stack overflow",
          "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, step_tensors(1), step_state(1), true);
  ck::save_checkpoint(w.path, 2, step_tensors(2), step_state(2), true);
  std::string manifest = read_bytes(ckpt_dir(w, 2) + "/manifest.json");
  // 60,000 levels in the state, with a true checksum: the nesting bound is what refuses it.
  std::string deep = std::string(60000, '[') + std::string(60000, ']');
  write_manifest(ckpt_dir(w, 2),
                 replaced(manifest, "\"state\": {", "\"state\": {\"x\": " + deep + ", "));
  std::string msg = error_of([&] { ck::load_checkpoint_dir(ckpt_dir(w, 2)); });
  CHECK(contains(msg, ckpt_dir(w, 2)));
  CHECK(contains(msg, "nested deeper than 256 levels"));
  auto loaded = ck::load_latest_checkpoint(w.path);
  REQUIRE(loaded);
  CHECK(loaded->step == 1);
  CHECK(contains(loaded->warning, "nested deeper than 256 levels"));
  // Retention reads manifests too: a save with the deep one around neither crashes nor deletes it
  // (it is unreadable, so it may be a kept checkpoint someone can repair).
  ck::save_checkpoint(w.path, 3, step_tensors(3), step_state(3), false);
  CHECK(steps_of(w.path) == std::vector<int64_t>{1, 2, 3});
  // A manifest of 256 levels is fine, 257 are not. The state sits one level down in it: a state
  // of 255 levels is saved and loads, one of 256 is refused at save (it could not be loaded).
  std::string ok = "{\"x\":" + std::string(254, '[') + std::string(254, ']') + "}";
  ck::save_checkpoint(w.path, 4, step_tensors(4), ok, false);
  auto deepest = ck::load_latest_checkpoint(w.path);
  REQUIRE(deepest);
  CHECK(deepest->step == 4);
  CHECK(deepest->state_json == ok);
  std::string over = "{\"x\":" + std::string(255, '[') + std::string(255, ']') + "}";
  CHECK(contains(error_of([&] { ck::save_checkpoint(w.path, 5, step_tensors(5), over, false); }),
                 "nested deeper than 255 levels"));
}

TEST_CASE("checkpoint manifests are covered by their own checksum", "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, step_tensors(1), step_state(1), true);
  ck::save_checkpoint(w.path, 2, step_tensors(2), step_state(2), false);
  std::string dir = ckpt_dir(w, 2);
  std::string manifest = read_bytes(dir + "/manifest.json");
  REQUIRE(contains(manifest, "\"position\": 20"));

  SECTION("a changed data position") {
    write_bytes(dir + "/manifest.json", replaced(manifest, "\"position\": 20", "\"position\": 0"));
    std::string msg = error_of([&] { ck::load_checkpoint_dir(dir); });
    CHECK(contains(msg, "checkpoint '" + dir + "': manifest.json fails its checksum"));
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 1);
    CHECK(contains(loaded->warning, "ckpt-000000002"));
    CHECK(contains(loaded->warning, "manifest.json fails its checksum"));
  }
  SECTION("a changed step (and its directory renamed to match)") {
    write_bytes(dir + "/manifest.json", replaced(manifest, "\"step\": 2", "\"step\": 5"));
    stdfs::rename(dir, ckpt_dir(w, 5));
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(ckpt_dir(w, 5)); }), "checksum"));
    CHECK(ck::load_latest_checkpoint(w.path)->step == 1);
  }
  SECTION("keep flipped") {
    write_bytes(dir + "/manifest.json", replaced(manifest, "\"keep\": false", "\"keep\": true"));
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }), "checksum"));
  }
  SECTION("the state removed, checksum and all consistent: no state is a failure") {
    nlohmann::json parsed = nlohmann::json::parse(manifest);
    REQUIRE(parsed.erase("state") == 1);
    write_manifest(dir, parsed.dump(2));
    std::string msg = error_of([&] { ck::load_checkpoint_dir(dir); });
    CHECK(contains(msg, "manifest.json has no \"state\""));
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 1);
    CHECK(contains(loaded->warning, "has no \"state\""));
  }
  SECTION("manifest.crc32 missing or garbage") {
    stdfs::remove(dir + "/manifest.crc32");
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }), "manifest.crc32 is missing"));
    write_bytes(dir + "/manifest.crc32", "hello\n");
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }), "manifest.crc32 says 'hello'"));
  }
  SECTION("a version-1 checkpoint loads, with a warning that its state is not verified") {
    stdfs::remove(dir + "/manifest.crc32");
    write_bytes(dir + "/manifest.json", replaced(manifest, "\"version\": 2", "\"version\": 1"));
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(loaded->version == 1);
    CHECK(loaded->state_json == step_state(2));
    CHECK(contains(loaded->warning, "'" + dir + "' is a version-1 checkpoint"));
    CHECK(contains(loaded->warning, "loaded unverified"));
    // Edited down to version 1 with its manifest.crc32 still there: the checksum still applies.
    write_bytes(dir + "/manifest.crc32", crc_hex_of(manifest) + "\n");
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }), "checksum"));
  }
  SECTION("an unknown version") {
    write_manifest(dir, replaced(manifest, "\"version\": 2", "\"version\": 3"));
    CHECK(contains(error_of([&] { ck::load_checkpoint_dir(dir); }),
                   "unsupported manifest version 3"));
  }
}

TEST_CASE("checkpoint LAST naming an older checkpoint than the newest valid one",
          "[ckpt][checkpoint]") {
  TempDir w;
  ck::save_checkpoint(w.path, 1, step_tensors(1), step_state(1), true);
  ck::save_checkpoint(w.path, 2, step_tensors(2), step_state(2), true);

  SECTION("a save killed after its rename, before LAST: the newer one, with a warning") {
    write_bytes(w / "LAST", "ckpt-000000001\n");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "names ckpt-000000001, but ckpt-000000002 is newer and valid"));
    // The next save makes LAST agree again.
    ck::save_checkpoint(w.path, 3, step_tensors(3), step_state(3), false);
    loaded = ck::load_latest_checkpoint(w.path);
    CHECK(loaded->step == 3);
    CHECK(loaded->warning.empty());
  }
  SECTION("newer directories that fail verification are skipped, each named") {
    ck::save_checkpoint(w.path, 3, step_tensors(3), step_state(3), true);
    ck::save_checkpoint(w.path, 4, step_tensors(4), step_state(4), true);
    write_bytes(w / "LAST", "ckpt-000000002\n");
    std::string t3 = ckpt_dir(w, 3) + "/tensors.safetensors";
    flip_byte(t3, stdfs::file_size(t3) - 1);
    stdfs::remove(ckpt_dir(w, 4) + "/manifest.json");
    stdfs::create_directory(ckpt_dir(w, 9));  // an empty directory under a checkpoint's name
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "skipped checkpoint '" + ckpt_dir(w, 9) + "': no manifest"));
    CHECK(contains(loaded->warning, "skipped checkpoint '" + ckpt_dir(w, 4) + "': no manifest"));
    CHECK(contains(loaded->warning, "skipped checkpoint '" + ckpt_dir(w, 3) +
                                        "': tensors.safetensors fails its checksum"));
    CHECK_FALSE(contains(loaded->warning, "LAST"));
  }
  SECTION("LAST naming a step that does not exist, older than the newest") {
    write_bytes(w / "LAST", "ckpt-000000000\n");
    auto loaded = ck::load_latest_checkpoint(w.path);
    REQUIRE(loaded);
    CHECK(loaded->step == 2);
    CHECK(contains(loaded->warning, "LAST in '" + w.path + "' names ckpt-000000000, but"));
  }
}

TEST_CASE("sync_file names the file it cannot sync", "[ckpt][checkpoint]") {
  TempDir w;
  write_bytes(w / "m.txt", "line\n");
  ck::sync_file(w / "m.txt");
  CHECK(contains(error_of([&] { ck::sync_file(w / "nope.txt"); }), "nope.txt"));
}
