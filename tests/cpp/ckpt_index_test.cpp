// The lazy checkpoint index (runtime/ckpt/index.h): npz files, safetensors files, training
// checkpoint directories and workdirs list their tensors from the index alone and load one
// tensor at a time. Laziness is tested by damaging one tensor's data after writing: opening and
// the other tensors still work, and only loading the damaged one fails.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/index.h"
#include "ckpt/npz.h"
#include "ckpt/safetensors.h"
#include "test_util.h"

namespace ck = bv::ckpt;

using bv::test::contains;
using bv::test::error_of;
using TempDir = bv::test::TempDir;

namespace {

std::vector<std::pair<std::string, at::Tensor>> sample_params() {
  return {
      {"img/head/bias", at::arange(3, at::kFloat)},
      {"img/head/kernel", at::arange(12, at::kFloat).reshape({4, 3}) / 7},
      {"img/embedding/kernel", at::arange(24, at::kFloat).reshape({2, 3, 4}).to(at::kBFloat16)},
      {"step_count", at::tensor({int64_t{42}})},
      {"mask", at::arange(3, at::kLong).remainder(2).eq(0)},  // true, false, true
  };
}

// Overwrites `n` bytes at `offset` of a file, in place (same size).
void poke(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f.good());
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void check_all_entries(const ck::CheckpointIndex& index,
                       const std::vector<std::pair<std::string, at::Tensor>>& params) {
  REQUIRE(index.entries().size() == params.size());
  for (size_t i = 1; i < index.entries().size(); ++i)
    CHECK(index.entries()[i - 1].name < index.entries()[i].name);
  for (const auto& [name, t] : params) {
    const ck::IndexEntry* e = index.find(name);
    REQUIRE(e != nullptr);
    CHECK(e->dtype == t.scalar_type());
    CHECK(e->shape == t.sizes().vec());
    CHECK(e->nbytes == t.nbytes());
    at::Tensor loaded = index.load(name);
    CHECK(loaded.scalar_type() == t.scalar_type());
    CHECK(loaded.equal(t));
  }
}

}  // namespace

TEST_CASE("index: an npz lists names, dtypes and shapes and loads one tensor", "[ckpt][index]") {
  TempDir dir;
  auto params = sample_params();
  ck::save_npz(dir / "p.npz", params);
  auto index = ck::CheckpointIndex::open(dir / "p.npz");
  CHECK(index.format() == "npz");
  CHECK(index.step() == -1);
  CHECK(index.file() == dir / "p.npz");
  check_all_entries(index, params);
  CHECK(index.find("img/head") == nullptr);
}

TEST_CASE("index: a safetensors file, told by its bytes and not its name", "[ckpt][index]") {
  TempDir dir;
  auto params = sample_params();
  ck::save_safetensors(dir / "p.bin", params);
  auto index = ck::CheckpointIndex::open(dir / "p.bin");
  CHECK(index.format() == "safetensors");
  check_all_entries(index, params);
}

TEST_CASE("index: opening reads no tensor data", "[ckpt][index]") {
  TempDir dir;
  auto params = sample_params();
  SECTION("npz: a damaged member fails its CRC only when loaded") {
    ck::save_npz(dir / "p.npz", params);
    auto members = ck::npz_index(dir / "p.npz");
    auto it = std::find_if(members.begin(), members.end(),
                           [](const auto& e) { return e.name == "img/head/kernel"; });
    REQUIRE(it != members.end());
    poke(dir / "p.npz", it->data_offset + it->header_size, std::string(4, '\x7f'));
    auto index = ck::CheckpointIndex::open(dir / "p.npz");
    CHECK(index.entries().size() == params.size());
    CHECK(index.load("img/head/bias").equal(params[0].second));
    CHECK(contains(error_of([&] { index.load("img/head/kernel"); }), "CRC"));
  }
  SECTION("safetensors: a bad BOOL byte is found only when that tensor is loaded") {
    ck::save_safetensors(dir / "p.safetensors", params);
    auto header = ck::read_safetensors_header(dir / "p.safetensors");
    auto it = std::find_if(header.tensors.begin(), header.tensors.end(),
                           [](const auto& t) { return t.name == "mask"; });
    REQUIRE(it != header.tensors.end());
    poke(dir / "p.safetensors", header.data_start + it->begin, "\x07");
    auto index = ck::CheckpointIndex::open(dir / "p.safetensors");
    CHECK(index.load("step_count").item<int64_t>() == 42);
    CHECK(contains(error_of([&] { index.load("mask"); }), "BOOL data holds a byte"));
  }
}

TEST_CASE("index: training checkpoints by directory and by workdir", "[ckpt][index]") {
  TempDir dir;
  auto params = sample_params();
  std::string workdir = dir / "run";
  ck::save_checkpoint(workdir, 10, params, "{}", /*keep=*/true);
  params[0].second = params[0].second + 1;
  ck::save_checkpoint(workdir, 20, params, "{}", /*keep=*/false);

  auto latest = ck::CheckpointIndex::open(workdir);
  CHECK(latest.step() == 20);
  CHECK(latest.format() == "safetensors");
  CHECK(contains(latest.file(), "ckpt-000000020/tensors.safetensors"));
  CHECK(latest.load("img/head/bias").equal(params[0].second));

  auto first = ck::CheckpointIndex::open(workdir + "/ckpt-000000010");
  CHECK(first.step() == 10);
  CHECK(first.load("img/head/bias").equal(at::arange(3, at::kFloat)));

  SECTION("LAST naming a missing checkpoint: the newest complete one") {
    std::ofstream(workdir + "/LAST") << "ckpt-000000099\n";
    CHECK(ck::latest_checkpoint_dir(workdir) == workdir + "/ckpt-000000020");
    CHECK(ck::CheckpointIndex::open(workdir).step() == 20);
  }
  SECTION("LAST naming an older checkpoint wins over a newer one") {
    std::ofstream(workdir + "/LAST") << "ckpt-000000010\n";
    CHECK(ck::CheckpointIndex::open(workdir).step() == 10);
  }
}

TEST_CASE("index: errors name the file and the tensor", "[ckpt][index]") {
  TempDir dir;
  auto params = sample_params();
  ck::save_npz(dir / "p.npz", params);
  auto index = ck::CheckpointIndex::open(dir / "p.npz");

  std::string unknown = error_of([&] { index.load("img/head/kernl"); });
  CHECK(contains(unknown, "p.npz' has no tensor 'img/head/kernl'"));
  CHECK(contains(unknown, "names under 'img/head/': img/head/bias, img/head/kernel"));
  CHECK(!contains(error_of([&] { index.load("zzz"); }), "names under"));

  std::ofstream(dir / "p.npz", std::ios::app) << "more";
  CHECK(contains(error_of([&] { index.load("img/head/bias"); }), "changed since it was opened"));

  std::ofstream(dir / "notes.txt") << "hello, not a checkpoint";
  CHECK(contains(error_of([&] { ck::CheckpointIndex::open(dir / "notes.txt"); }),
                 "neither an npz (zip) nor a safetensors file"));
  CHECK(contains(error_of([&] { ck::CheckpointIndex::open(dir / "missing.npz"); }), "missing.npz"));
  std::filesystem::create_directories(dir / "empty");
  CHECK(
      contains(error_of([&] { ck::CheckpointIndex::open(dir / "empty"); }), "holds no checkpoint"));
}
