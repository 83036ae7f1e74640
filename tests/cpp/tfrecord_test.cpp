// bv:tfrecord (runtime/data/tfrecord.h, tf_example.h, sources.h): TFRecord files of
// tf.train.Example written here by a small encoder of the protobuf wire format, read back
// through the source: values, order, skip/take across shards, and every corrupt file (CRCs,
// truncation, a missing file, malformed protos) a clear error naming the file and record.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/pipeline.h"
#include "data/sources.h"
#include "data/tf_example.h"
#include "data/tfrecord.h"
#include "test_util.h"

namespace data = bv::data;
using bv::test::contains;
using bv::test::error_of;
using bv::test::TempDir;

namespace {

// --- a protobuf encoder, just enough for tf.train.Example ---

std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}

std::string tag(uint64_t field, int type) {
  return varint(field << 3 | static_cast<uint64_t>(type));
}

std::string len_field(uint64_t field, const std::string& bytes) {
  return tag(field, 2) + varint(bytes.size()) + bytes;
}

std::string fixed32(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  std::string out;
  for (int k = 0; k < 4; ++k) out += static_cast<char>((u >> (8 * k)) & 0xff);
  return out;
}

std::string bytes_feature(const std::vector<std::string>& values) {
  std::string list;
  for (const auto& v : values) list += len_field(1, v);
  return len_field(1, list);
}

std::string int64_feature(const std::vector<int64_t>& values, bool packed) {
  std::string list, body;
  for (int64_t v : values)
    body += packed ? varint(static_cast<uint64_t>(v))
                   : tag(1, 0) + varint(static_cast<uint64_t>(v));
  list = packed ? len_field(1, body) : body;
  return len_field(3, list);
}

std::string float_feature(const std::vector<float>& values, bool packed) {
  std::string body;
  for (float v : values) body += packed ? fixed32(v) : tag(1, 5) + fixed32(v);
  return len_field(2, packed ? len_field(1, body) : body);
}

// Example{1: Features{1: repeated {1: key, 2: Feature}}}
std::string example(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string feats;
  for (const auto& [key, feature] : features) {
    feats += len_field(1, len_field(1, key) + len_field(2, feature));
  }
  return len_field(1, feats);
}

// --- TFRecord framing ---

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int k = 0; k < bytes; ++k) out += static_cast<char>((v >> (8 * k)) & 0xff);
  return out;
}

std::string frame(const std::string& record) {
  std::string len = le(record.size(), 8);
  return len + le(data::masked_crc32c(len.data(), 8), 4) + record +
         le(data::masked_crc32c(record.data(), record.size()), 4);
}

void write_records(const std::string& path, const std::vector<std::string>& records) {
  std::string all;
  for (const auto& r : records) all += frame(r);
  bv::test::write_bytes(path, all);
}

// A shard of n examples {id = first + k, name = "r<first + k>"}.
std::string write_ids(const TempDir& dir, const std::string& name, int64_t first, int64_t n) {
  std::vector<std::string> records;
  for (int64_t k = first; k < first + n; ++k) {
    records.push_back(example(
        {{"id", int64_feature({k}, false)}, {"name", bytes_feature({"r" + std::to_string(k)})}}));
  }
  write_records(dir / name, records);
  return dir / name;
}

std::vector<int64_t> ids(const data::Source& src) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < data::source_size(src); ++i) {
    out.push_back(data::find(data::source_example(src, i), "id")->i);
  }
  return out;
}

// Runs every example of `src` through a pipeline (two workers, skip_errors as given): the ids
// read, in order, and the examples skipped.
std::pair<std::vector<int64_t>, int64_t> run_pipeline(const data::Source& src, bool skip_errors) {
  std::vector<int64_t> all(static_cast<size_t>(data::source_size(src)));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  std::vector<data::IndexStream> streams;
  streams.emplace_back(all, 0, false, 0, false);
  data::PipelineOptions o;
  o.workers = 2;
  o.skip_errors = skip_errors;
  data::Pipeline p(
      data::ItemStream(std::move(streams), {1.0}, 0),
      [&src](int) {
        return [&src](const data::Item& item) { return data::source_example(src, item.index); };
      },
      o);
  std::vector<int64_t> out;
  data::Example batch;
  while (p.next(&batch)) out.push_back(data::find(batch, "id")->tensor.item<int64_t>());
  return {out, p.skipped()};
}

}  // namespace

TEST_CASE("tfrecord: crc32c and its mask on known vectors", "[tfrecord]") {
  CHECK(data::crc32c("123456789", 9) == 0xE3069283u);
  // RFC 3720 (iSCSI) B.4: 32 zeros, 32 0xff, the bytes 0..31.
  std::string zeros(32, '\0'), ones(32, '\xff'), up;
  for (int k = 0; k < 32; ++k) up += static_cast<char>(k);
  CHECK(data::crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(data::crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(data::crc32c(up.data(), 32) == 0x46DD794Eu);
  // In pieces: the CRC continues from the one before.
  CHECK(data::crc32c("6789", 4, data::crc32c("12345", 5)) == 0xE3069283u);
  CHECK(data::masked_crc32c("123456789", 9) == 0xC78AB0E5u);
  CHECK(data::masked_crc32c(up.data(), 32) == 0x951F7892u);
}

TEST_CASE("tfrecord: a tf.train.Example's features as values, sorted by key", "[tfrecord]") {
  TempDir dir("bv_tfrecord");
  std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + std::string(3, '\0') + "rest";
  write_records(dir / "a.tfrecord",
                {example({{"label", int64_feature({-7}, false)},
                          {"image", bytes_feature({png})},
                          {"score", float_feature({0.5f}, false)},
                          {"ints", int64_feature({1, -2, 300000000000}, true)},
                          {"ints_unpacked", int64_feature({4, 5}, false)},
                          {"floats", float_feature({1.5f, -2.25f}, true)},
                          {"floats_unpacked", float_feature({3.0f, 4.0f, 5.0f}, false)},
                          {"texts", bytes_feature({"a", "", "c"})},
                          {"empty_ints", int64_feature({}, true)},
                          {"unset", ""}})});
  data::Source src = data::load_tfrecord({{dir / "a.tfrecord", 0, -1}}, false);
  REQUIRE(data::source_size(src) == 1);
  data::Example ex = data::source_example(src, 0);
  std::vector<std::string> keys;
  for (const auto& kv : ex) keys.push_back(kv.first);
  CHECK(keys == std::vector<std::string>{"empty_ints", "floats", "floats_unpacked", "image", "ints",
                                         "ints_unpacked", "label", "score", "texts", "unset"});
  using K = data::Value::Kind;
  CHECK(data::find(ex, "image")->kind == K::kString);
  CHECK(data::find(ex, "image")->s == png);  // binary bytes, NULs included
  CHECK(data::find(ex, "label")->kind == K::kInt);
  CHECK(data::find(ex, "label")->i == -7);
  CHECK(data::find(ex, "score")->kind == K::kFloat);
  CHECK(data::find(ex, "score")->f == 0.5);
  const at::Tensor& ints = data::find(ex, "ints")->tensor;
  CHECK(ints.scalar_type() == at::kLong);
  CHECK(ints.equal(at::tensor(std::vector<int64_t>{1, -2, 300000000000})));
  CHECK(data::find(ex, "ints_unpacked")->tensor.equal(at::tensor(std::vector<int64_t>{4, 5})));
  const at::Tensor& floats = data::find(ex, "floats")->tensor;
  CHECK(floats.scalar_type() == at::kFloat);
  CHECK(floats.equal(at::tensor(std::vector<float>{1.5f, -2.25f})));
  CHECK(data::find(ex, "floats_unpacked")->tensor.equal(at::tensor(std::vector<float>{3, 4, 5})));
  const data::Value* texts = data::find(ex, "texts");
  REQUIRE(texts->kind == K::kList);
  REQUIRE(texts->list.size() == 3);
  CHECK((texts->list[0].s == "a" && texts->list[1].s == "" && texts->list[2].s == "c"));
  CHECK(data::find(ex, "empty_ints")->tensor.sizes() == at::IntArrayRef{0});
  CHECK(data::find(ex, "empty_ints")->tensor.scalar_type() == at::kLong);
  CHECK(data::find(ex, "unset")->tensor.scalar_type() == at::kFloat);
  CHECK(data::find(ex, "unset")->tensor.numel() == 0);
}

TEST_CASE("tfrecord: unknown fields are skipped, repeated messages merge", "[tfrecord]") {
  std::string unknown = tag(9, 0) + varint(UINT64_MAX) + tag(10, 1) + std::string(8, 'x') +
                        tag(11, 5) + "abcd" + len_field(12, "zzz") + tag(13, 3) + tag(1, 0) +
                        varint(5) + tag(14, 3) + tag(14, 4) + tag(13, 4);
  // BytesList with an unknown field, a Feature with one, an entry with one.
  std::string feature = len_field(1, unknown + len_field(1, "v") + unknown) + unknown;
  std::string entry = unknown + len_field(1, "k") + len_field(2, feature);
  std::string ex =
      unknown + len_field(1, len_field(1, entry) + unknown) + unknown +
      len_field(1, len_field(1, len_field(1, "n") + len_field(2, int64_feature({3}, true))));
  data::Example out = data::parse_tf_example(ex, "here");
  REQUIRE(out.size() == 2);
  CHECK(data::find(out, "k")->s == "v");
  CHECK(data::find(out, "n")->i == 3);
  // A key given twice: the last entry; a oneof's later kind replaces the earlier one.
  std::string twice = example({{"x", int64_feature({1}, false)}, {"x", int64_feature({2}, false)}});
  CHECK(data::find(data::parse_tf_example(twice, "here"), "x")->i == 2);
  std::string both = int64_feature({1}, false) + bytes_feature({"b"});
  CHECK(data::find(data::parse_tf_example(example({{"x", both}}), "here"), "x")->s == "b");
  CHECK(data::parse_tf_example("", "here").empty());
}

TEST_CASE("tfrecord: malformed protos are errors naming the record", "[tfrecord]") {
  auto err = [](const std::string& bytes) {
    return error_of([&] { data::parse_tf_example(bytes, "f.tfrecord record 3"); });
  };
  std::string e = err(len_field(1, "ab").substr(0, 3));
  CHECK(contains(e, "f.tfrecord record 3: malformed tf.train.Example"));
  CHECK(contains(e, "runs past the end"));
  CHECK(contains(err("\x0f"), "wire type 7"));
  CHECK(contains(err(std::string(1, '\0')), "field number 0"));
  CHECK(contains(err(std::string(11, '\xff')), "varint"));
  CHECK(contains(err(tag(1, 0) + varint(5)), "field 1 (features) has wire type 0, expected 2"));
  CHECK(contains(err(example({{"f", len_field(2, len_field(1, "abc"))}})),
                 "in feature 'f': packed floats of 3 bytes"));
  CHECK(contains(err(tag(5, 3) + tag(1, 0) + varint(1)), "group 5 has no end"));
  CHECK(contains(err(tag(5, 4)), "end of group 5 with no start"));
  // Through the source: the file and the record.
  TempDir dir("bv_tfrecord");
  write_records(dir / "m.tfrecord",
                {example({{"id", int64_feature({0}, false)}}), std::string("\x0a\x05") + "ab"});
  data::Source src = data::load_tfrecord({{dir / "m.tfrecord", 0, -1}}, false);
  e = error_of([&] { data::source_example(src, 1); });
  CHECK(contains(e, "m.tfrecord' record 1 (byte 30): malformed tf.train.Example"));
}

TEST_CASE("tfrecord: shards in order, take records from skip in each", "[tfrecord]") {
  TempDir dir("bv_tfrecord");
  std::string a = write_ids(dir, "x.tfrecord-00000-of-00002", 0, 5);
  std::string b = write_ids(dir, "x.tfrecord-00001-of-00002", 10, 5);
  data::Source src = data::load_tfrecord({{a, 1, 2}, {b, 0, -1}, {a, 3, -1}}, false);
  CHECK(ids(src) == std::vector<int64_t>{1, 2, 10, 11, 12, 13, 14, 3, 4});
  CHECK(data::find(data::source_example(src, 2), "name")->s == "r10");
  CHECK(contains(data::source_origin(src, 8), "x.tfrecord-00000-of-00002' record 4 (byte "));
  CHECK(ids(data::load_tfrecord({{a, 5, -1}, {b, 4, 1}, {a, 0, 0}}, false)) ==
        std::vector<int64_t>{14});
  // The pipeline reads them in the same order, whatever the workers.
  CHECK(run_pipeline(src, false).first == ids(src));
  std::string e = error_of([&] { data::load_tfrecord({{a, 3, 3}}, false); });
  CHECK(contains(e, "x.tfrecord-00000-of-00002' has 5 records; the shard asks for records [3, 6)"));
  CHECK(contains(error_of([&] {
                   data::load_tfrecord({{a, 6, -1}}, false);
                 }),
                 "has 5 records; the shard asks for records from 6"));
  CHECK(contains(error_of([&] {
                   data::load_tfrecord({{a, -1, 2}}, false);
                 }),
                 "skip must be 0 or more"));
  CHECK(contains(error_of([&] {
                   data::load_tfrecord({{a, 0, -2}}, false);
                 }),
                 "take must be 0 or more"));
  CHECK(contains(error_of([&] { data::load_tfrecord({}, false); }), "no shards"));
}

TEST_CASE("tfrecord: a missing or truncated file is an error naming it", "[tfrecord]") {
  TempDir dir("bv_tfrecord");
  std::string e = error_of([&] { data::load_tfrecord({{dir / "nope.tfrecord", 0, -1}}, true); });
  CHECK(contains(e, "bv:tfrecord: cannot open '" + dir / "nope.tfrecord" + "': No such file"));
  CHECK(contains(error_of([&] {
                   data::load_tfrecord({{dir.path, 0, -1}}, true);
                 }),
                 "is not a file"));
  std::string f = write_ids(dir, "t.tfrecord", 0, 3);
  std::string bytes = bv::test::read_bytes(f);
  int64_t rec = static_cast<int64_t>(bytes.size() / 3);  // the records are of one size
  bv::test::write_bytes(f, bytes.substr(0, bytes.size() - 3));
  e = error_of([&] { data::load_tfrecord({{f, 0, -1}}, true); });
  CHECK(contains(e, "t.tfrecord' record 2 (byte " + std::to_string(2 * rec) + "): truncated"));
  // Records before the cut are still there to take.
  CHECK(ids(data::load_tfrecord({{f, 0, 2}}, false)) == std::vector<int64_t>{0, 1});
  bv::test::write_bytes(f, bytes.substr(0, static_cast<size_t>(rec + 5)));
  e = error_of([&] { data::load_tfrecord({{f, 0, -1}}, true); });
  CHECK(contains(e, "record 1 (byte " + std::to_string(rec) +
                        "): truncated: the file ends 5 bytes into the record's 12-byte header"));
  // A file cut after it was indexed: the read says so.
  bv::test::write_bytes(f, bytes);
  data::Source src = data::load_tfrecord({{f, 0, -1}}, false);
  bv::test::write_bytes(f, bytes.substr(0, bytes.size() - 3));
  CHECK(contains(error_of([&] { data::source_example(src, 2); }), "record 2 (byte "));
}

TEST_CASE("tfrecord: a corrupt data CRC fails that record, counted under skip_errors",
          "[tfrecord]") {
  TempDir dir("bv_tfrecord");
  std::string f = write_ids(dir, "c.tfrecord", 0, 4);
  std::string bytes = bv::test::read_bytes(f);
  size_t rec = bytes.size() / 4;
  bytes[2 * rec + 12 + 3] ^= 0x20;  // a byte of record 2's data
  bv::test::write_bytes(f, bytes);
  data::Source src = data::load_tfrecord({{f, 0, -1}}, false);  // the headers are fine
  REQUIRE(data::source_size(src) == 4);
  std::string e = error_of([&] { data::source_example(src, 2); });
  CHECK(contains(e, "c.tfrecord' record 2 (byte " + std::to_string(2 * rec) +
                        "): corrupt record: the CRC of its "));
  CHECK(contains(e, "bytes of data does not match"));
  CHECK(contains(error_of([&] { run_pipeline(src, false); }), "c.tfrecord' record 2"));
  auto [read, skipped] = run_pipeline(src, true);
  CHECK(read == std::vector<int64_t>{0, 1, 3});
  CHECK(skipped == 1);
}

TEST_CASE("tfrecord: a corrupt length CRC is an error, or under skip_errors a counted example",
          "[tfrecord]") {
  TempDir dir("bv_tfrecord");
  std::string f = write_ids(dir, "l.tfrecord", 0, 4);
  std::string g = write_ids(dir, "m.tfrecord", 10, 2);
  std::string bytes = bv::test::read_bytes(f);
  size_t rec = bytes.size() / 4;
  bytes[rec + 9] ^= 0x01;  // record 1's length CRC
  bv::test::write_bytes(f, bytes);
  std::string e = error_of([&] { data::load_tfrecord({{f, 0, -1}}, false); });
  CHECK(contains(e, "l.tfrecord' record 1 (byte " + std::to_string(rec) +
                        "): corrupt record: the CRC of its length header does not match"));
  // Also when the record is before the shard's skip: nothing past it can be found.
  CHECK(contains(error_of([&] { data::load_tfrecord({{f, 2, 1}}, false); }), "record 1 (byte "));
  data::Source src = data::load_tfrecord({{f, 0, -1}, {g, 0, -1}}, true);
  CHECK(data::source_size(src) == 4);  // record 0, the bad one (for the rest of l), m's two
  CHECK(src.bad_lines.size() == 1);
  CHECK(contains(error_of([&] { data::source_example(src, 1); }),
                 "length header does not match (0x"));
  CHECK(contains(error_of([&] { data::source_example(src, 1); }), "the rest of the file"));
  auto [read, skipped] = run_pipeline(src, true);
  CHECK(read == std::vector<int64_t>{0, 10, 11});
  CHECK(skipped == 1);
}
