// Every input bounded: messages quote a snippet of what they were given
// (core/quote.h), JSON refuses integers past int64, a batch that cannot fit in memory is refused
// at its first example (data/pipeline.h), an image over the cap is refused from its header under
// the name of the cap's config key (image/codec.h), and models refuse a zero dimension.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include "core/json_util.h"
#include "core/notes.h"
#include "core/quote.h"
#include "data/pipeline.h"
#include "device/machine.h"
#include "image/codec.h"
#include "models/model.h"
#include "test_util.h"

using bv::test::contains;
using bv::test::error_of;

TEST_CASE("snippet: short text as it is, long text cut with its size", "[quote]") {
  CHECK(bv::snippet("label") == "label");
  std::string big(100 * 1000 * 1000, 'x');
  std::string s = bv::snippet(big);
  CHECK(s == std::string(200, 'x') + "... (100000000 bytes in all)");
  CHECK(bv::snippet("abcdef", 3) == "abc... (6 bytes in all)");
}

TEST_CASE("snippet: control bytes escaped, UTF-8 not cut inside a character", "[quote]") {
  CHECK(bv::snippet(std::string("x.png\0/../etc", 13)) == "x.png\\0/../etc");
  CHECK(bv::snippet("a\nb\tc\x1b[31m\x7f") == "a\\nb\\tc\\x1b[31m\\x7f");
  // "é" is two bytes: a cut after 2 bytes of "hé" keeps "h", not half an "é".
  CHECK(bv::snippet("h\xc3\xa9llo", 2) == "h... (6 bytes in all)");
  // Bytes that are not UTF-8 are cut where they are.
  CHECK(bv::snippet(std::string(10, '\x80'), 4) ==
        std::string(4, '\x80') + "... (10 bytes in all)");
}

TEST_CASE("parse_json: a 20 MB bad line makes a short message", "[quote][json]") {
  std::string line = "{\"label\": \"" + std::string(20 * 1000 * 1000, 'x') + "}";
  std::string msg = error_of([&] { bv::parse_json(line, "big.jsonl:1"); });
  CHECK(msg.size() < 500);
  CHECK(contains(msg, "big.jsonl:1: bad JSON: parse error at line 1"));
  CHECK(contains(msg, "bytes in all)'"));
  std::string digits = "[1" + std::string(10 * 1000 * 1000, '1') + "x]";
  msg = error_of([&] { bv::parse_json(digits, "n.jsonl:2"); });
  CHECK(msg.size() < 500);
  CHECK(contains(msg, "n.jsonl:2: bad JSON: number overflow parsing '111"));
}

TEST_CASE("parse_json: an integer past int64 is an error naming the key", "[json]") {
  std::string msg = error_of(
      [] { bv::parse_json(R"({"image": "a.png", "label": 99999999999999999999999999})", "d:3"); });
  CHECK(msg == "d:3 key 'label': the integer 99999999999999999999999999 does not fit in int64");
  // Inside a list, and after a nested object has closed: the key holding the list.
  msg = error_of([] { bv::parse_json(R"({"a": [{"b": 1}, 100000000000000000000]})", "d:4"); });
  CHECK(msg == "d:4 key 'a': the integer 100000000000000000000 does not fit in int64");
  CHECK(contains(error_of([] { bv::parse_json("[-99999999999999999999]", "d:5"); }),
                 "d:5: the integer -99999999999999999999 does not fit"));
  // Floats written as floats stay floats; integers that fit stay integers.
  auto j = bv::parse_json(R"({"x": 1e26, "y": 99999999999999999999.0, "z": -9223372036854775808})",
                          "d:6");
  CHECK(j["x"].is_number_float());
  CHECK(j["y"].is_number_float());
  CHECK(j["z"].get<int64_t>() == INT64_MIN);
}

TEST_CASE("host_memory_available and bytes_string", "[machine]") {
  CHECK(bv::host_memory_available() > 0);  // Linux: /proc/meminfo
  CHECK(bv::bytes_string(512) == "512 bytes");
  CHECK(bv::bytes_string(12600) == "12.6 KB");
  CHECK(bv::bytes_string(50.3e12) == "50.3 TB");
}

namespace {

using bv::data::Example;
using bv::data::Value;

// A pipeline over `n` items whose examples each hold a float tensor of `floats` values.
std::unique_ptr<bv::data::Pipeline> tensor_pipeline(int64_t floats, int64_t batch_size,
                                                    int64_t memory_bytes) {
  std::vector<int64_t> indices(100);
  for (int64_t i = 0; i < 100; ++i) indices[i] = i;
  std::vector<bv::data::IndexStream> streams;
  streams.emplace_back(indices, 0, false, 0, true);
  bv::data::ItemStream stream(std::move(streams), {1.0}, 0);
  auto factory = [floats](int) {
    return [floats](const bv::data::Item&) {
      return Example{{"x", Value::of_tensor(at::zeros({floats}))}};
    };
  };
  bv::data::PipelineOptions o;
  o.batch_size = batch_size;
  o.workers = 2;
  o.batch_size_key = "input.batch_size";
  o.memory_bytes = memory_bytes;
  return std::make_unique<bv::data::Pipeline>(std::move(stream), factory, o);
}

}  // namespace

TEST_CASE("example_bytes counts tensors, strings and the structs", "[data]") {
  Example ex{{"x", Value::of_tensor(at::zeros({1000}))}, {"s", Value::string("abc")}};
  int64_t n = bv::data::example_bytes(ex);
  CHECK(n >= 4003);
  CHECK(n < 4003 + 1000);
  CHECK(bv::data::example_bytes(Example{}) > 0);
}

TEST_CASE("pipeline: a batch that cannot fit in memory is refused at the first example", "[data]") {
  // 4,000-byte examples, 4 batches held (2 prefetched, gathered, stacked): 64 of them need 1 MB.
  auto p = tensor_pipeline(1000, 64, 1000 * 1000);
  Example batch;
  std::string msg = error_of([&] { p->next(&batch); });
  CHECK(contains(msg, "data: input.batch_size asks for batches of 64 examples (per process), "
                      "which cannot fit in memory: an example takes 4."));
  CHECK(contains(msg, "1.0 MB available; make input.batch_size smaller"));
  // For good: the workers stopped and the next call says the same.
  CHECK(error_of([&] { p->next(&batch); }) == msg);
  // What fits goes through.
  auto q = tensor_pipeline(1000, 16, 1000 * 1000);
  REQUIRE(q->next(&batch));
  CHECK(batch[0].second.tensor.size(0) == 16);
}

TEST_CASE("pipeline: batch_size 1e9 fails at once against the machine's memory", "[data]") {
  auto start = std::chrono::steady_clock::now();
  auto p = tensor_pipeline(1000, 1000 * 1000 * 1000, -1);
  Example batch;
  CHECK(contains(error_of([&] { p->next(&batch); }), "cannot fit in memory"));
  p.reset();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(s < 5);
  // A batch_size near 2^63 neither wraps the workers' window round nor hangs.
  auto huge = tensor_pipeline(10, INT64_MAX / 2, -1);
  CHECK(contains(error_of([&] { huge->next(&batch); }), "cannot fit in memory"));
}

namespace {

// A baseline JPEG whose SOF0 header says height x width (the scan data is the 8x8 image's).
std::string jpeg_claiming(int height, int width) {
  std::string jpeg = bv::image::encode_jpeg(at::zeros({8, 8, 3}, at::kByte));
  size_t sof = jpeg.find("\xFF\xC0");
  REQUIRE(sof != std::string::npos);
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xFF);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xFF);
  return jpeg;
}

}  // namespace

TEST_CASE("decode: a header over the cap is refused before decoding, naming the cap's key",
          "[image]") {
  std::string jpeg = jpeg_claiming(12000, 11000);
  CHECK(jpeg.size() < 2000);
  CHECK(bv::image::peek(jpeg).height == 12000);
  std::string msg =
      error_of([&] { bv::image::decode(jpeg, 3, false, 89478485, "input.max_pixels"); });
  CHECK(msg == "decode: image of 12000x11000 pixels (height x width) exceeds the cap of 89478485 "
               "(input.max_pixels)");
  CHECK(contains(error_of([&] { bv::image::decode_crop(jpeg, 0, 0, 8, 8, 3, false, 100, "k"); }),
                 "exceeds the cap of 100 (k)"));
}

TEST_CASE("models refuse zero and indivisible dimensions, naming the config key", "[models]") {
  using nlohmann::json;
  const auto& vit = bv::models::vit_api();
  auto vit_error = [&](json cfg) { return error_of([&] { vit.param_specs(cfg); }); };
  CHECK(vit_error({{"variant", "mu/0"}}) ==
        "vit: model.variant 'mu/0': the patch size must be positive");
  CHECK(contains(vit_error({{"variant", "mu/99999999999999999999"}}), "too large"));
  CHECK(contains(vit_error({{"variant", "mu/8"}, {"image_size", 6}}),
                 "vit: the image size 6x6 (model.image_size; the training images' size when it "
                 "is not set) is smaller than one 8x8 patch (model.variant 'mu/8')"));
  // Not divisible: big_vision drops the pixels that do not fill a patch; a note says so.
  bv::take_notes();
  vit.param_specs({{"variant", "mu/8"}, {"image_size", 30}});
  auto notes = bv::take_notes();
  REQUIRE(notes.size() == 1);
  CHECK(contains(notes[0], "the image size 30x30 is not divisible into 8x8 patches"));
  CHECK(contains(vit_error({{"variant", "mu/8"}, {"num_heads", 3}}),
                 "width 32 (model.width or the variant's) is not divisible by num_heads 3"));
  CHECK(vit_error({{"variant", "mu/8"}, {"depth", 0}}) ==
        "vit: model.depth must be a positive integer, got 0");
  CHECK(contains(vit_error({{"variant", "mu/8"}, {"mlp_dim", -1}}), "model.mlp_dim must be"));
  CHECK(contains(vit_error({{"variant", 8}}), "model.variant must be a string"));
  // Parts of composite models are named by their path.
  json towers = {{"image", {{"variant", "mu/0"}}}, {"text", {{"variant", "mu"}}}};
  CHECK(contains(error_of([&] { bv::models::two_towers_api().param_specs(towers); }),
                 "model.image.variant 'mu/0'"));
  json text = {{"image", {{"variant", "mu/8"}, {"image_size", 8}}},
               {"text", {{"variant", "mu"}, {"num_heads", 5}}}};
  CHECK(contains(error_of([&] { bv::models::two_towers_api().param_specs(text); }),
                 "(model.text.width or the variant's) is not divisible by num_heads 5"));
  json pg = {{"img", {{"variant", "mu/0"}}}};
  CHECK(contains(error_of([&] { bv::models::paligemma_api().param_specs(pg); }),
                 "vit: model.img.variant 'mu/0'"));
  json llm = {{"img", {{"variant", "mu/8"}, {"image_size", 8}}}, {"llm", {{"num_kv_heads", 3}}}};
  CHECK(contains(error_of([&] { bv::models::paligemma_api().param_specs(llm); }),
                 "(model.llm.num_kv_heads or the variant's)"));
  CHECK(contains(error_of([&] {
                   bv::models::bit_api().param_specs({{"depth", {2, 0}}});
                 }),
                 "bit: model.depth must list positive numbers of units per stage"));
  CHECK(contains(error_of([&] {
                   bv::models::two_towers_api().param_specs({{"temperature_init", 0}});
                 }),
                 "model.temperature_init must be a positive number"));
}
