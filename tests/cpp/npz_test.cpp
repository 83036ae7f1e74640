// npz checkpoints (runtime/ckpt/npz.h, zip.h): bit-exact round trips of every dtype, the bytes
// np.savez writes, deflated members, ZIP64 records, and corrupt or malicious files, each of which
// must be a clear bv::Error naming the file (and the member), never a crash. Corrupt archives
// are assembled here byte by byte with an independent little zip builder, so every field is
// known.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/npz.h"
#include "ckpt/zip.h"
#include "core/error.h"
#include "test_util.h"

namespace ckpt = bv::ckpt;
using bv::test::contains;
using bv::test::error_of;
using bv::test::TempDir;

namespace {

using bv::test::read_bytes;
using bv::test::write_bytes;

std::string temp_dir() {
  static TempDir dir;
  REQUIRE(!dir.path.empty());
  return dir.path;
}

std::string temp_path(const std::string& name) { return temp_dir() + "/" + name; }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return s;
}

uint32_t crc(const std::string& s) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

std::string raw_deflate(const std::string& data) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, data.size()) + 16, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// An .npy member: version 1.0 prefix, the given header text (padded like numpy), the data.
std::string npy(const std::string& dict, const std::string& data) {
  std::string h = dict;
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h.push_back('\n');
  return std::string("\x93NUMPY\x01\x00", 8) + le(h.size(), 2) + h + data;
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// One member of a hand-built archive; the optional fields lie about it.
struct Part {
  std::string name;
  std::string content;  // uncompressed bytes
  bool deflate = false;
  uint16_t method = 0xFFFF;      // written method (default: from `deflate`)
  int64_t declared_size = -1;    // both headers' uncompressed size
  int64_t declared_stored = -1;  // both headers' compressed size
  int64_t declared_crc = -1;
  std::string local_name = {};  // if set, the local header's name
};

// A plain (non-ZIP64) archive with local headers, central directory and end record.
std::string build_zip(const std::vector<Part>& parts) {
  std::string out, cd;
  for (const Part& p : parts) {
    std::string data = p.deflate ? raw_deflate(p.content) : p.content;
    uint16_t method = p.method != 0xFFFF ? p.method : (p.deflate ? 8 : 0);
    uint32_t c = p.declared_crc >= 0 ? static_cast<uint32_t>(p.declared_crc) : crc(p.content);
    uint64_t size = p.declared_size >= 0 ? p.declared_size : p.content.size();
    uint64_t stored = p.declared_stored >= 0 ? p.declared_stored : data.size();
    std::string lname = p.local_name.empty() ? p.name : p.local_name;
    uint64_t offset = out.size();
    out += le(0x04034b50, 4) + le(20, 2) + le(0, 2) + le(method, 2) + le(0, 4) + le(c, 4) +
           le(stored, 4) + le(size, 4) + le(lname.size(), 2) + le(0, 2) + lname + data;
    cd += le(0x02014b50, 4) + le(20, 2) + le(20, 2) + le(0, 2) + le(method, 2) + le(0, 4) +
          le(c, 4) + le(stored, 4) + le(size, 4) + le(p.name.size(), 2) + le(0, 2) + le(0, 2) +
          le(0, 2) + le(0, 2) + le(0, 4) + le(offset, 4) + p.name;
  }
  uint64_t cd_offset = out.size();
  out += cd;
  out += le(0x06054b50, 4) + le(0, 4) + le(parts.size(), 2) + le(parts.size(), 2) +
         le(cd.size(), 4) + le(cd_offset, 4) + le(0, 2);
  return out;
}

// The error loading `bytes` as an npz gives ("" and a failure if none).
std::string load_error(const std::string& bytes, const std::string& name = "bad.npz") {
  std::string path = temp_path(name);
  write_bytes(path, bytes);
  return error_of([&] { ckpt::load_npz(path); });
}

std::string index_error(const std::string& bytes) {
  std::string path = temp_path("bad_index.npz");
  write_bytes(path, bytes);
  return error_of([&] { ckpt::npz_index(path); });
}

const std::string kF4Dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 ||
          std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0);
}

// One tensor of every savable dtype, with awkward values (NaN payloads, -0, inf, extremes).
std::vector<std::pair<std::string, at::Tensor>> every_dtype() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  at::Tensor f = at::randn({3, 5}, gen, at::kFloat);
  f[0][0] = std::numeric_limits<float>::quiet_NaN();
  f[0][1] = -0.0f;
  f[0][2] = std::numeric_limits<float>::infinity();
  at::Tensor ints = at::tensor({std::numeric_limits<int64_t>::min(), int64_t{-1}, int64_t{0},
                                std::numeric_limits<int64_t>::max()});
  return {
      {"Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel", f},
      {"f64", at::randn({2, 2, 3}, gen, at::kDouble)},
      {"f16", at::randn({7}, gen, at::kFloat).to(at::kHalf)},
      {"bf16", at::randn({4, 3}, gen, at::kFloat).to(at::kBFloat16)},
      {"i8", at::tensor({-128, -1, 0, 127}).to(at::kChar)},
      {"u8", at::tensor({0, 1, 200, 255}).to(at::kByte)},
      {"i16", at::tensor({-32768, 5, 32767}).to(at::kShort)},
      {"i32", at::tensor({std::numeric_limits<int32_t>::min(), 0, 42}).to(at::kInt)},
      {"i64", ints},
      {"bool", at::tensor({1, 0, 1}).to(at::kBool)},
      {"scalar", at::scalar_tensor(3.25, at::kFloat)},
      {"scalar_bool", at::scalar_tensor(true, at::kBool)},
      {"empty", at::empty({0, 3}, at::kFloat)},
      {"empty_bf16", at::empty({2, 0}, at::kBFloat16)},
  };
}

}  // namespace

TEST_CASE("npz round trip of every dtype is bit-exact", "[npz]") {
  auto params = every_dtype();
  std::string path = temp_path("every.npz");
  ckpt::save_npz(path, params);
  auto loaded = ckpt::load_npz(path);
  REQUIRE(loaded.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    CHECK(loaded[i].first == params[i].first);
    CHECK(same_bytes(loaded[i].second, params[i].second));
  }
  // The index describes the same arrays without loading them; each entry loads on its own.
  auto index = ckpt::npz_index(path);
  REQUIRE(index.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& e = index[i];
    const at::Tensor& t = params[i].second;
    INFO(e.name);
    CHECK(e.name == params[i].first);
    CHECK(e.shape == std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
    CHECK(e.dtype == t.scalar_type());
    CHECK(e.nbytes == t.nbytes());
    CHECK(e.size == e.header_size + e.nbytes);
    CHECK(e.stored_size == e.size);
    CHECK(e.header_size % 64 == 0);
    CHECK_FALSE(e.deflated);
    CHECK_FALSE(e.fortran_order);
    CHECK(same_bytes(ckpt::load_npz_entry(path, e), t));
  }
  CHECK(index[3].descr == "|V2");
  CHECK(index[9].descr == "|b1");
}

TEST_CASE("npz filter loads a subset", "[npz]") {
  std::string path = temp_path("subset.npz");
  ckpt::save_npz(path, every_dtype());
  auto some = ckpt::load_npz(path, [](const std::string& n) { return n.rfind("i", 0) == 0; });
  REQUIRE(some.size() == 4);
  CHECK(some[0].first == "i8");
  CHECK(some[3].first == "i64");
}

TEST_CASE("npz writer produces np.savez's bytes", "[npz]") {
  // .venv/bin/python (numpy 2.4.6, Python 3.11.7, whose zipfile writes force_zip64 members with
  // version 4.5 and 0xFFFFFFFF sizes in the local header; 3.11.2's wrote 2.0 and the sizes):
  //   t = np.array([1.0, -2.0], dtype='<f4').view(np.dtype('V2'))[:2]
  //   np.savez('gold.npz', **{'params/a/kernel': np.arange(6, dtype='<f4').reshape(2,3) - 2.5,
  //            'params/b': np.array(7, dtype='<i8'), 't': t, 'm': np.array([True, False, True])})
  //   open('gold.npz','rb').read().hex()
  const std::string gold = from_hex(
      "504b03042d0000000000000021006d72dba7ffffffffffffffff13001400706172616d732f612f6b65726e65"
      "6c2e6e70790100100098000000000000009800000000000000934e554d5059010076007b276465736372273a"
      "20273c6634272c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c"
      "2033292c207d2020202020202020202020202020202020202020202020202020202020202020202020202020"
      "20202020202020202020202020202020202020200a000020c00000c0bf000000bf0000003f0000c03f000020"
      "40504b03042d00000000000000210023b8f06cffffffffffffffff0c001400706172616d732f622e6e707901"
      "00100088000000000000008800000000000000934e554d5059010076007b276465736372273a20273c693827"
      "2c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028292c207d20202020"
      "2020202020202020202020202020202020202020202020202020202020202020202020202020202020202020"
      "20202020202020202020202020200a0700000000000000504b03042d0000000000000021002d9c06dbffffff"
      "ffffffffff05001400742e6e70790100100084000000000000008400000000000000934e554d505901007600"
      "7b276465736372273a20277c5632272c2027666f727472616e5f6f72646572273a2046616c73652c20277368"
      "617065273a2028322c292c207d20202020202020202020202020202020202020202020202020202020202020"
      "20202020202020202020202020202020202020202020202020202020200a0000803f504b03042d0000000000"
      "0000210016938cbbffffffffffffffff050014006d2e6e707901001000830000000000000083000000000000"
      "00934e554d5059010076007b276465736372273a20277c6231272c2027666f727472616e5f6f72646572273a"
      "2046616c73652c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020"
      "202020202020202020202020202020202020202020202020202020202020202020202020202020200a010001"
      "504b01022d032d0000000000000021006d72dba7980000009800000013000000000000000000000080010000"
      "0000706172616d732f612f6b65726e656c2e6e7079504b01022d032d00000000000000210023b8f06c880000"
      "00880000000c00000000000000000000008001dd000000706172616d732f622e6e7079504b01022d032d0000"
      "000000000021002d9c06db84000000840000000500000000000000000000008001a3010000742e6e7079504b"
      "01022d032d00000000000000210016938cbb830000008300000005000000000000000000000080015e020000"
      "6d2e6e7079504b05060000000004000400e1000000180300000000");
  REQUIRE(gold.size() == 1039);
  uint16_t t_bits[] = {0x0000, 0x3f80};  // the |V2 bytes above: bf16 0.0 and 1.0
  bool m[] = {true, false, true};
  std::vector<std::pair<std::string, at::Tensor>> params = {
      {"params/a/kernel", at::arange(6, at::kFloat).reshape({2, 3}) - 2.5},
      {"params/b", at::scalar_tensor(7, at::kLong)},
      {"t", at::from_blob(t_bits, {2}, at::kBFloat16).clone()},
      {"m", at::from_blob(m, {3}, at::kBool).clone()},
  };
  std::string path = temp_path("gold.npz");
  ckpt::save_npz(path, params);
  CHECK(read_bytes(path) == gold);
  // And numpy's file reads back as the same arrays.
  write_bytes(temp_path("numpy_gold.npz"), gold);
  auto loaded = ckpt::load_npz(temp_path("numpy_gold.npz"));
  REQUIRE(loaded.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(same_bytes(loaded[i].second, params[i].second));
  // No temporary left behind by the atomic write.
  CHECK_FALSE(std::ifstream(path + ".tmp-" + std::to_string(getpid())).good());
}

TEST_CASE("npy headers are numpy 1.24's", "[npz]") {
  // From numpy 1.24.2: f = io.BytesIO(); np.lib.format._write_array_header(f, {'descr': '<f4',
  // 'fortran_order': False, 'shape': SHAPE}, None); f.getvalue(). The dict, 21 - len(str(SHAPE[0]))
  // spaces of growth room, padding to a multiple of 64 (a whole 64 when already a multiple), '\n'.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }";
  CHECK(ckpt::npy_header(at::kFloat, {3, 5}) ==
        std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(20 + 38, ' ') + "\n");
  CHECK(ckpt::npy_header(at::kBFloat16, {}).substr(10, 56) ==
        "{'descr': '|V2', 'fortran_order': False, 'shape': (), }\x20");
  CHECK(ckpt::npy_header(at::kBool, {0}).substr(10, 57) ==
        "{'descr': '|b1', 'fortran_order': False, 'shape': (0,), }");
  // (1, 100, 1 x 12): dict 97 + growth 20 + '\n' + 10 = 128 exactly, so numpy pads 64 more.
  std::vector<int64_t> exact = {1, 100};
  exact.resize(14, 1);
  CHECK(ckpt::npy_header(at::kFloat, exact).size() == 192);
  CHECK(ckpt::npy_header(at::kFloat, std::vector<int64_t>(15, 1)).size() == 192);
  CHECK(ckpt::npy_header(at::kFloat, std::vector<int64_t>(14, 1)).size() == 128);
  CHECK(contains(error_of([] { ckpt::npy_header(at::kComplexFloat, {2}); }), "cannot be saved"));
}

TEST_CASE("npz reads deflated members (np.savez_compressed)", "[npz]") {
  std::vector<float> v = {1.5f, -2.0f, 0.0f, 1e30f};
  std::string big(4 * 1000, '\0');  // compresses well: exercises the ratio check's honest side
  std::vector<Part> parts = {
      {"w.npy", npy(kF4Dict, f32_bytes(v)), true},
      {"zeros.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }", big), true},
      {"plain.npy", npy(kF4Dict, f32_bytes(v)), false},
  };
  std::string path = temp_path("deflated.npz");
  write_bytes(path, build_zip(parts));
  auto loaded = ckpt::load_npz(path);
  REQUIRE(loaded.size() == 3);
  at::Tensor want = at::tensor(v);
  CHECK(same_bytes(loaded[0].second, want));
  CHECK(loaded[1].second.sum().item<float>() == 0.0f);
  CHECK(loaded[1].second.numel() == 1000);
  CHECK(same_bytes(loaded[2].second, want));
  auto index = ckpt::npz_index(path);
  CHECK(index[0].deflated);
  CHECK(index[0].stored_size < index[0].size);
  CHECK(same_bytes(ckpt::load_npz_entry(path, index[0]), want));
}

TEST_CASE("npz reads what numpy may write beyond np.savez's defaults", "[npz]") {
  // Fortran order: the bytes are the C order of the transpose.
  std::string fdata = f32_bytes({1, 4, 2, 5, 3, 6});
  // Big-endian int32, uint32 beyond int32's range, Python 2 style shape, bool bytes other than 1.
  std::string be = std::string("\x00\x00\x01\x02\xff\xff\xff\xfe", 8);
  std::vector<Part> parts = {
      {"f.npy", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", fdata)},
      {"be.npy", npy("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", be)},
      {"u4.npy", npy("{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }",
                     std::string("\xff\xff\xff\xff", 4))},
      {"u2.npy", npy("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }",
                     std::string("\xfe\xff", 2))},
      {"py2.npy",
       npy("{\"descr\": \"<f4\", \"shape\": (1L,), \"fortran_order\": False}", f32_bytes({7}))},
      {"b.npy", npy("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                    std::string("\x02\x00", 2))},
      {"v2.npy",
       npy("{'descr': '<V2', 'fortran_order': False, 'shape': (), }", std::string("\x80\x3f", 2))},
  };
  std::string path = temp_path("variants.npz");
  write_bytes(path, build_zip(parts));
  auto l = ckpt::load_npz(path);
  REQUIRE(l.size() == parts.size());
  CHECK(at::equal(l[0].second, at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({2, 3})));
  CHECK(l[0].second.is_contiguous());
  CHECK(at::equal(l[1].second, at::tensor({258, -2}).to(at::kInt)));
  CHECK(l[2].second.scalar_type() == at::kLong);
  CHECK(l[2].second.item<int64_t>() == 4294967295LL);
  CHECK(l[3].second.scalar_type() == at::kInt);
  CHECK(l[3].second.item<int64_t>() == 65534);
  CHECK(l[4].second.item<float>() == 7.0f);
  CHECK(at::equal(l[5].second, at::tensor({1, 0}).to(at::kBool)));
  CHECK(l[6].second.scalar_type() == at::kBFloat16);
  CHECK(l[6].second.item<float>() == 1.0f);

  std::string u8 = build_zip({{"u8.npy", npy("{'descr': '<u8', 'fortran_order': False, "
                                             "'shape': (1,), }",
                                             le(uint64_t{1} << 63, 8))}});
  CHECK(contains(load_error(u8), "uint64 values above 2^63-1"));
}

TEST_CASE("npz ZIP64 records: forced by low limits, and past 65535 members", "[npz]") {
  // The writer's ZIP64 paths, exercised on a small file by lowering zipfile's 2^31-1 limit:
  // sizes and offsets in the central directory's ZIP64 extra, a ZIP64 end record + locator.
  std::string path = temp_path("zip64.npz");
  auto params = every_dtype();
  {
    ckpt::zip::Writer w(path, /*zip64_limit=*/100, /*count_limit=*/3);
    for (const auto& [name, t] : params) {
      std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
      std::string h = ckpt::npy_header(t.scalar_type(), shape);
      w.add_stored(name + ".npy", {{h.data(), h.size()}, {t.data_ptr(), t.nbytes()}});
    }
    w.commit();
  }
  std::string bytes = read_bytes(path);
  CHECK(bytes.find(std::string("PK\x06\x06", 4)) != std::string::npos);
  CHECK(bytes.find(std::string("PK\x06\x07", 4)) != std::string::npos);
  CHECK(bytes.find(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8)) != std::string::npos);
  auto loaded = ckpt::load_npz(path);
  REQUIRE(loaded.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) CHECK(same_bytes(loaded[i].second, params[i].second));

  // With the real limits: more members than the 16-bit count holds.
  std::vector<std::pair<std::string, at::Tensor>> many;
  for (int i = 0; i < 65537; ++i)
    many.emplace_back("p" + std::to_string(i), at::scalar_tensor(i, at::kInt));
  std::string many_path = temp_path("many.npz");
  ckpt::save_npz(many_path, many);
  std::string many_bytes = read_bytes(many_path);
  // The 16-bit count in the end record saturates; the ZIP64 end record has the real one.
  CHECK(many_bytes.substr(many_bytes.size() - 22, 4) == std::string("PK\x05\x06", 4));
  CHECK(many_bytes.substr(many_bytes.size() - 12, 2) == std::string("\xff\xff", 2));
  auto index = ckpt::npz_index(many_path);
  REQUIRE(index.size() == 65537);
  CHECK(index.back().name == "p65536");
  CHECK(ckpt::load_npz_entry(many_path, index.back()).item<int>() == 65536);
}

TEST_CASE("npz: every truncation of a valid file is a clear error", "[npz]") {
  std::vector<Part> parts = {
      {"a/w.npy", npy(kF4Dict, f32_bytes({1, 2, 3, 4})), false},
      {"a/z.npy", npy(kF4Dict, f32_bytes({5, 6, 7, 8})), true},
  };
  std::string good = build_zip(parts);
  std::string path = temp_path("trunc.npz");
  write_bytes(path, good);
  REQUIRE(ckpt::load_npz(path).size() == 2);
  std::string ours_path = temp_path("trunc_ours.npz");
  ckpt::save_npz(ours_path, every_dtype());
  for (const std::string& file : {good, read_bytes(ours_path)}) {
    for (size_t n = 0; n < file.size(); ++n) {
      INFO("truncated to " << n << " of " << file.size() << " bytes");
      std::string msg = load_error(file.substr(0, n), "truncated.npz");
      CHECK(contains(msg, "truncated.npz"));
    }
  }
  CHECK(contains(load_error(good.substr(0, 10), "t.npz"), "not a zip/npz file: only 10 bytes"));
  CHECK(contains(load_error(good.substr(0, good.size() - 1), "t.npz"),
                 "no ZIP end-of-central-directory record"));
}

TEST_CASE("npz: broken zip structures are clear errors", "[npz]") {
  std::string content = npy(kF4Dict, f32_bytes({1, 2, 3, 4}));
  std::string good = build_zip({{"w.npy", content}, {"v.npy", content}});
  size_t end = good.size() - 22;
  uint64_t cd_offset = 2 * (30 + 5 + content.size());

  SECTION("end record garbage") {
    std::string b = good;
    b.replace(end + 16, 4, le(0x7fffff00, 4));  // central directory offset
    CHECK(contains(load_error(b), "central directory (offset 2147483392"));
    b = good;
    b.replace(end + 8, 4, le(0x0009, 2) + le(0x0009, 2));  // 9 members
    CHECK(contains(load_error(b), "claims 9 members"));
    b = good;
    b.replace(end + 4, 2, le(1, 2));  // disk number
    CHECK(contains(load_error(b), "multi-disk"));
    b = good;
    b.replace(end + 20, 2, le(5, 2));  // comment length past the end
    CHECK(contains(load_error(b), "no ZIP end-of-central-directory"));
    CHECK(contains(load_error(std::string(300, 'x') + "PK\x05\x06"), "no ZIP end-of-central"));
    // A central directory size past the file is refused before anything that size is read.
    b = good;
    b.replace(end + 12, 4, le(0xFFFFFF00, 4));
    CHECK(contains(load_error(b), "4294967040 bytes) does not end where the end record starts"));
  }
  SECTION("local header offset beyond the end of the file") {
    std::string b = good;
    b.replace(cd_offset + 42, 4, le(0x10000000, 4));
    CHECK(contains(load_error(b), "member 'w.npy': local header offset 268435456 is not inside"));
  }
  SECTION("central directory signature") {
    std::string b = good;
    b[cd_offset + 1] = 'X';
    CHECK(contains(load_error(b), "bad central directory entry signature"));
  }
  SECTION("overlapping members") {
    // The first member's declared span swallows the second's local header (a zip-bomb trick).
    Part a{"a.npy", content};
    a.declared_size = a.declared_stored = content.size() + 40;
    std::string b = build_zip({a, {"b.npy", content}, {"c.npy", content}});
    CHECK(contains(load_error(b), "members 'a.npy' and 'b.npy' overlap"));
  }
  SECTION("duplicate names") {
    std::string b = build_zip({{"w.npy", content}, {"w.npy", content}});
    CHECK(contains(load_error(b), "member 'w.npy' appears twice"));
  }
  SECTION("local and central names differ") {
    Part p{"w.npy", content};
    p.local_name = "x.npy";
    CHECK(contains(load_error(build_zip({p})), "member 'w.npy': local header names it 'x.npy'"));
  }
  SECTION("stored size differs from size") {
    Part p{"w.npy", content};
    p.declared_size = content.size() + 1;
    CHECK(contains(load_error(build_zip({p})), "stored member with 144 bytes in the file but a "
                                               "size of 145"));
  }
  SECTION("unsupported compression, encryption, names") {
    Part p{"w.npy", content};
    p.method = 12;
    CHECK(contains(load_error(build_zip({p})), "compression method 12 is not supported"));
    std::string b = build_zip({{"w.npy", content}});
    b[content.size() + 35 + 8] = 1;  // central flags: encrypted
    CHECK(contains(load_error(b), "member 'w.npy' is encrypted"));
    CHECK(contains(load_error(build_zip({{"../w.npy", content}})), "'..' component"));
    CHECK(contains(load_error(build_zip({{"/w.npy", content}})), "absolute name"));
    CHECK(contains(load_error(build_zip({{"w.txt", content}})),
                   "member 'w.txt' is not a .npy array"));
  }
  SECTION("CRC-32 mismatch, stored and deflated") {
    std::string b = good;
    b[30 + 5 + 128] ^= 1;  // a data byte of the first member
    CHECK(contains(load_error(b), "member 'w.npy': CRC-32 mismatch"));
    Part p{"w.npy", content, true};
    p.declared_crc = crc(content) ^ 1;
    CHECK(contains(load_error(build_zip({p})), "member 'w.npy': CRC-32 mismatch"));
  }
}

TEST_CASE("npz: deflated members that lie about their size", "[npz]") {
  // The npy header claims 4 floats (16 bytes); the deflate stream holds 3 or 5.
  SECTION("declared size larger than the real inflated size") {
    Part p{"w.npy", npy(kF4Dict, f32_bytes({1, 2, 3})), true};
    p.declared_size = p.content.size() + 4;
    CHECK(contains(load_error(build_zip({p})),
                   "member 'w.npy': deflate stream ends after 140 bytes, but the directory "
                   "declares 144"));
  }
  SECTION("declared size smaller than the real inflated size") {
    Part p{"w.npy", npy(kF4Dict, f32_bytes({1, 2, 3, 4, 5})), true};
    p.declared_size = p.content.size() - 4;
    CHECK(contains(load_error(build_zip({p})),
                   "member 'w.npy': inflates to more than the declared 144 bytes"));
  }
  SECTION("a size no deflate stream can reach (zip bomb)") {
    Part p{"w.npy", npy(kF4Dict, f32_bytes({1, 2, 3, 4})), true};
    p.declared_size = 4000000000LL;
    CHECK(contains(load_error(build_zip({p})), "declares 4000000000 inflated bytes, impossible"));
  }
  SECTION("corrupt and truncated deflate data") {
    std::string content = npy(kF4Dict, f32_bytes({1, 2, 3, 4}));
    std::string b = build_zip({{"w.npy", content, true}});
    b[30 + 5] = static_cast<char>(0xff);  // first deflate byte: invalid block type 3
    CHECK(contains(load_error(b), "member 'w.npy': corrupt deflate data"));
    Part p{"w.npy", content, true};
    std::string full = raw_deflate(content);
    p.declared_stored = full.size() - 3;  // the stream is cut short
    std::string cut = build_zip({p});
    CHECK(contains(load_error(cut), "member 'w.npy'"));
  }
}

TEST_CASE("npz: malicious or malformed npy headers", "[npz]") {
  auto with_header = [](const std::string& dict, const std::string& data) {
    return build_zip({{"img/head/kernel.npy", npy(dict, data)}});
  };
  SECTION("shape and data size disagree") {
    std::string b =
        with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }", "123456789012");
    CHECK(contains(load_error(b, "ckpt.npz"),
                   "ckpt.npz: member 'img/head/kernel.npy': data size 12 does not match shape "
                   "[3, 5] float32 (60 bytes)"));
  }
  SECTION("huge shapes: element count and byte count overflow") {
    CHECK(contains(load_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                          "(4294967296, 4294967296, 4294967296), }",
                                          "")),
                   "shape [4294967296, 4294967296, 4294967296] has too many elements"));
    CHECK(contains(load_error(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': "
                                          "(2305843009213693952,), }",
                                          "")),
                   "data size 0 does not match shape [2305843009213693952] float64 (overflow"));
    CHECK(contains(load_error(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': "
                                          "(99999999999999999999,), }",
                                          "")),
                   "dimension too large"));
  }
  SECTION("header longer than numpy's limit, or than the member") {
    std::string long_header =
        std::string("\x93NUMPY\x01\x00", 8) + le(10001, 2) + std::string(10001, ' ');
    CHECK(contains(load_error(build_zip({{"w.npy", long_header}})),
                   "npy header of 10001 bytes is longer than numpy's limit of 10000"));
    std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + le(0x7fffffff, 4) + "{}";
    CHECK(contains(load_error(build_zip({{"w.npy", v2}})), "npy header of 2147483647 bytes"));
    std::string short_member = std::string("\x93NUMPY\x01\x00", 8) + le(100, 2) + "{";
    CHECK(contains(load_error(build_zip({{"w.npy", short_member}})),
                   "npy header (110 bytes) is longer than the member (11 bytes)"));
  }
  SECTION("unknown and unsafe dtypes") {
    auto descr = [&](const std::string& d) {
      return load_error(with_header("{'descr': '" + d +
                                        "', 'fortran_order': False, 'shape': "
                                        "(1,), }",
                                    "x"));
    };
    CHECK(contains(descr("<U5"), "unsupported dtype descr '<U5'"));
    CHECK(contains(descr("|O"), "unsupported dtype descr '|O'"));
    CHECK(contains(descr("|V4"), "unsupported dtype descr '|V4'"));
    CHECK(contains(descr("<f4x"), "unsupported dtype descr '<f4x'"));
    CHECK(contains(load_error(with_header("{'descr': [('a', '<f4')], 'fortran_order': False, "
                                          "'shape': (1,), }",
                                          "1234")),
                   "structured dtypes"));
  }
  SECTION("the dict parser is strict and evaluates nothing") {
    auto header = [&](const std::string& dict) { return load_error(with_header(dict, "1234")); };
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': False}"), "no 'shape'"));
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"),
                   "unexpected key 'x'"));
    CHECK(contains(header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                          "'shape': (1,)}"),
                   "key 'descr' appears twice"));
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1)}"),
                   "shape must be a tuple"));
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}"),
                   "shape must be a tuple"));
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),
                   "negative dimension"));
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}"),
                   "fortran_order must be True or False"));
    CHECK(contains(header("{'descr': __import__('os').system('echo hi'), 'fortran_order': "
                          "False, 'shape': (1,)}"),
                   "expected the descr string"));
    CHECK(contains(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x"),
                   "text after the closing '}'"));
    CHECK(contains(header("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}"),
                   "expected ',' or '}'"));
  }
  SECTION("magic and version") {
    std::string bad_magic = std::string("\x93NUMPZ\x01\x00", 8) + le(2, 2) + "{}";
    CHECK(contains(load_error(build_zip({{"w.npy", bad_magic}})), "not an npy array"));
    std::string bad_version = std::string("\x93NUMPY\x04\x00", 8) + le(2, 2) + "{}";
    CHECK(contains(load_error(build_zip({{"w.npy", bad_version}})),
                   "npy format version 4.0 is not supported"));
    CHECK(contains(load_error(build_zip({{"w.npy", "\x93NUM"}})), "too short for an npy header"));
  }
  SECTION("the index checks headers too") {
    CHECK(contains(index_error(with_header("{'descr': '<U5', 'fortran_order': False, "
                                           "'shape': (1,), }",
                                           "x")),
                   "member 'img/head/kernel.npy': unsupported dtype descr '<U5'"));
  }
}

TEST_CASE("npz: random corruption never crashes", "[npz]") {
  // Byte flips over a valid archive (stored and deflated members): each load either succeeds
  // (a flip in padding or timestamps) or throws bv::Error; nothing else may happen.
  std::vector<Part> parts = {
      {"a/w.npy", npy(kF4Dict, f32_bytes({1, 2, 3, 4})), false},
      {"a/z.npy", npy(kF4Dict, f32_bytes({5, 6, 7, 8})), true},
  };
  std::string good = build_zip(parts);
  std::string path = temp_path("flip.npz");
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  int errors = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string b = good;
    int flips = 1 + next() % 3;
    for (int i = 0; i < flips; ++i) b[next() % b.size()] = static_cast<char>(next() >> 24);
    write_bytes(path, b);
    try {
      ckpt::load_npz(path);
    } catch (const bv::Error& e) {
      ++errors;
      CHECK(contains(e.what(), "flip.npz"));
    }
  }
  CHECK(errors > 1000);
}

TEST_CASE("npz writer errors", "[npz]") {
  std::string path = temp_path("bad_write.npz");
  CHECK(contains(error_of([&] {
                   ckpt::save_npz(path, {{"c", at::zeros({2}, at::kComplexFloat)}});
                 }),
                 "array 'c' has dtype"));
  CHECK(contains(error_of([&] {
                   ckpt::save_npz(path, {{"a", at::zeros({2})}, {"a", at::zeros({2})}});
                 }),
                 "array 'a' given twice"));
  CHECK(contains(error_of([&] {
                   ckpt::save_npz("/nonexistent/dir/x.npz", {{"a", at::zeros({2})}});
                 }),
                 "cannot write '/nonexistent/dir/x.npz'"));
  CHECK_FALSE(std::ifstream(path).good());
  // A non-contiguous view is written as its values.
  at::Tensor t = at::arange(6, at::kFloat).reshape({2, 3}).t();
  ckpt::save_npz(path, {{"t", t}});
  auto l = ckpt::load_npz(path);
  CHECK(at::equal(l[0].second, t.contiguous()));
  CHECK(contains(error_of([] { ckpt::load_npz("/nonexistent.npz"); }),
                 "cannot open '/nonexistent.npz'"));
}
