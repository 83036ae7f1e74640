// Multi-process training (runtime/distributed): torchrun's environment and its errors, the
// single-process group, and real 2-rank Gloo groups. The ranks are this test binary started again
// (posix_spawn of /proc/self/exe) running the hidden test case "dist worker" with
// RANK/WORLD_SIZE/MASTER_* set: an exec'd process starts with no libtorch threads, which a fork of
// this one would not.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "device/fake_device.h"
#include "device/machine.h"
#include "distributed/dist.h"
#include "distributed/launch.h"
#include "distributed/wait.h"
#include "test_util.h"

extern char** environ;

using bv::test::contains;
using bv::test::error_of;

namespace {

const char* kDistVars[] = {"RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "MASTER_ADDR",
                           "MASTER_PORT",
                           "TORCHELASTIC_USE_AGENT_STORE",
                           "TORCHELASTIC_RESTART_COUNT"};

// Sets the torchrun variables for one scope (unset unless given) and restores them afterwards.
struct ScopedDistEnv {
  std::map<std::string, std::string> saved;
  explicit ScopedDistEnv(const std::map<std::string, std::string>& vars = {}) {
    for (const char* name : kDistVars) {
      if (const char* v = std::getenv(name)) saved[name] = v;
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedDistEnv() {
    for (const char* name : kDistVars) ::unsetenv(name);
    for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string getenv_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

struct Rank {
  pid_t pid = -1;
  int status = -1;  // waitpid status once done
};

// Starts `world` ranks of the hidden "dist worker" test with `scenario`; they write their
// results into `out_dir`.
std::vector<Rank> spawn_ranks(int world, const std::string& scenario, const std::string& out_dir,
                              const std::map<std::string, std::string>& extra = {}) {
  int port = bv::pick_free_port();
  std::string exe = bv::current_executable();
  std::vector<Rank> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    std::map<std::string, std::string> vars = {
        {"RANK", std::to_string(r)},           {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(r)},     {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(port)}, {"BV_DIST_TEST_SCENARIO", scenario},
        {"BV_DIST_TEST_OUT", out_dir},         {"OMP_NUM_THREADS", "1"}};
    for (const auto& [k, v] : extra) vars[k] = v;
    // This process's environment, less the variables set here (getenv would see the first).
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      bool ours = vars.count(kv.substr(0, kv.find('='))) > 0;
      for (const char* name : kDistVars) ours = ours || kv.rfind(std::string(name) + "=", 0) == 0;
      if (!ours) env.push_back(kv);
    }
    for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
    std::vector<std::string> args = {exe, "dist worker"};
    std::vector<char*> cargs, cenv;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    REQUIRE(::posix_spawn(&ranks[r].pid, exe.c_str(), nullptr, nullptr, cargs.data(),
                          cenv.data()) == 0);
  }
  return ranks;
}

// Waits for every rank, at most `limit_s` seconds; kills the rest and fails the test past that.
void wait_ranks(std::vector<Rank>& ranks, double limit_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  size_t done = 0;
  while (done < ranks.size()) {
    for (Rank& r : ranks) {
      if (r.status != -1) continue;
      if (::waitpid(r.pid, &r.status, WNOHANG) == r.pid) ++done;
    }
    if (done < ranks.size() && std::chrono::steady_clock::now() > deadline) {
      for (Rank& r : ranks) {
        if (r.status == -1) {
          ::kill(r.pid, SIGKILL);
          ::waitpid(r.pid, &r.status, 0);
        }
      }
      FAIL("the ranks did not finish within " << limit_s << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool exited_ok(const Rank& r) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

// --- what a worker rank does --------------------------------------------------------------------

void worker_collectives(const std::string& out) {
  auto g = bv::dist_init(bv::dist_env_from_environ(), "gloo", 20);
  int r = bv::dist_rank(*g);
  REQUIRE(bv::dist_world_size(*g) == 2);
  REQUIRE(bv::dist_backend(*g) == "gloo");
  float k = static_cast<float>(r + 1);  // rank 0 holds 1s, rank 1 holds 2s: sums are 3s

  // Different shapes (a 0-d one, a non-contiguous one) in one call; exact sums.
  std::vector<at::Tensor> ts = {at::full({2, 3}, k), at::arange(5, at::kFloat) * k,
                                at::full({}, 10 * k),
                                (at::arange(6, at::kFloat).view({2, 3}) * k).t()};
  bv::dist_all_reduce(*g, ts, false);
  REQUIRE(at::equal(ts[0], at::full({2, 3}, 3.0f)));
  REQUIRE(at::equal(ts[1], at::arange(5, at::kFloat) * 3));
  REQUIRE(ts[2].dim() == 0);
  REQUIRE(ts[2].item<float>() == 30.0f);
  REQUIRE(!ts[3].is_contiguous());
  REQUIRE(at::equal(ts[3], (at::arange(6, at::kFloat).view({2, 3}) * 3).t()));

  // Mean: (1 + 2) / 2 = 1.5, exact in float.
  std::vector<at::Tensor> ms = {at::full({4}, k), at::arange(3, at::kDouble).to(at::kFloat) * k};
  bv::dist_all_reduce(*g, ms, true);
  REQUIRE(at::equal(ms[0], at::full({4}, 1.5f)));
  REQUIRE(at::equal(ms[1], at::arange(3, at::kFloat) * 1.5f));

  // bfloat16 (summed as bfloat16 at each hop) on a non-contiguous view; bool is an error.
  std::vector<at::Tensor> bf = {at::full({2, 2}, k).to(at::kBFloat16).t()};
  bv::dist_all_reduce(*g, bf, true);
  REQUIRE(bf[0].scalar_type() == at::kBFloat16);
  REQUIRE(at::equal(bf[0], at::full({2, 2}, 1.5f).to(at::kBFloat16)));
  std::vector<at::Tensor> flags = {at::ones({2}, at::kBool)};
  REQUIRE(contains(error_of([&] { bv::dist_all_reduce(*g, flags, false); }),
                   "gloo backend cannot reduce or send Bool"));

  // One contiguous integer tensor: reduced in place, no copy.
  at::Tensor ints = at::full({3}, static_cast<int64_t>(r + 1), at::kLong);
  void* data = ints.data_ptr();
  std::vector<at::Tensor> one = {ints};
  bv::dist_all_reduce(*g, one, false);
  REQUIRE(ints.data_ptr() == data);
  REQUIRE(at::equal(ints, at::full({3}, 3, at::kLong)));

  // Broadcast from rank 1: everyone ends with rank 1's values.
  std::vector<at::Tensor> bs = {at::full({3}, r == 1 ? 7.0f : 0.0f),
                                at::arange(2, at::kFloat) + 100.0f * static_cast<float>(r)};
  bv::dist_broadcast(*g, bs, 1);
  REQUIRE(at::equal(bs[0], at::full({3}, 7.0f)));
  REQUIRE(at::equal(bs[1], at::arange(2, at::kFloat) + 100.0f));
  REQUIRE(contains(error_of([&] { bv::dist_broadcast(*g, bs, 2); }), "root 2"));

  // The store, both ways; get waits for a key set later by the other rank.
  bv::dist_store_set(*g, "from" + std::to_string(r), "hello from rank " + std::to_string(r));
  REQUIRE(bv::dist_store_get(*g, "from" + std::to_string(1 - r)) ==
          "hello from rank " + std::to_string(1 - r));
  bv::dist_barrier(*g);
  write_file(out + "/rank" + std::to_string(r), "ok");
}

// One rank (BV_DIST_TEST_VICTIM) dies with SIGKILL after a barrier; the other must get an error
// naming it from its next all_reduce.
void worker_lost(const std::string& out) {
  int victim = std::stoi(getenv_or("BV_DIST_TEST_VICTIM", "1"));
  auto g = bv::dist_init(bv::dist_env_from_environ(), "gloo", 10);
  int r = bv::dist_rank(*g);
  bv::dist_barrier(*g);
  if (r == victim) ::raise(SIGKILL);
  auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    for (int i = 0; i < 3; ++i) {
      std::vector<at::Tensor> ts = {at::ones({8})};
      bv::dist_all_reduce(*g, ts, false);
    }
  } catch (const bv::Error& e) {
    msg = e.what();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file(out + "/rank" + std::to_string(r), std::to_string(secs) + "\n" + msg);
  REQUIRE(!msg.empty());
}

// Rank 1 stays alive but never joins: rank 0's all_reduce must give up after the timeout.
void worker_stuck(const std::string& out) {
  auto g = bv::dist_init(bv::dist_env_from_environ(), "gloo", 3);
  int r = bv::dist_rank(*g);
  if (r == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    return;
  }
  auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    std::vector<at::Tensor> ts = {at::ones({8})};
    bv::dist_all_reduce(*g, ts, false);
  } catch (const bv::Error& e) {
    msg = e.what();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file(out + "/rank0", std::to_string(secs) + "\n" + msg);
  REQUIRE(!msg.empty());
}

// On the fake device, rank 0 sums a device tensor while rank 1 sums a host one: on NCCL the two
// go to different groups (NCCL's and the Gloo host group) and both ranks hang. Each rank writes
// how long it took and its error.
void worker_mismatch(const std::string& out) {
  bv::enable_fake_device();
  int local_rank = bv::dist_env_from_environ().local_rank;
  bv::set_current_device("fake:" + std::to_string(local_rank % 2));
  auto g = bv::dist_init(bv::dist_env_from_environ(), "gloo", 3);
  int r = bv::dist_rank(*g);
  auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    std::vector<at::Tensor> ts = {r == 0 ? at::ones({4}, at::TensorOptions().device("fake"))
                                         : at::ones({4})};
    bv::dist_all_reduce(*g, ts, false);
  } catch (const bv::Error& e) {
    msg = e.what();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file(out + "/rank" + std::to_string(r), std::to_string(secs) + "\n" + msg);
}

double leading_number(const std::string& text) {
  return std::stod(text.substr(0, text.find('\n')));
}

}  // namespace

// Hidden: only run as a rank by the tests below.
TEST_CASE("dist worker", "[.dist_worker]") {
  std::string scenario = getenv_or("BV_DIST_TEST_SCENARIO", "");
  std::string out = getenv_or("BV_DIST_TEST_OUT", "");
  if (out.empty()) {
    WARN("not started as a rank by another dist test: nothing to do");
    return;
  }
  if (scenario == "collectives") {
    worker_collectives(out);
  } else if (scenario == "lost") {
    worker_lost(out);
  } else if (scenario == "stuck") {
    worker_stuck(out);
  } else if (scenario == "mismatch") {
    worker_mismatch(out);
  } else {
    FAIL("unknown BV_DIST_TEST_SCENARIO '" << scenario << "'");
  }
}

TEST_CASE("dist env: unset means one process") {
  ScopedDistEnv env;
  bv::DistEnv e = bv::dist_env_from_environ();
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 0);
  CHECK(e.master_addr.empty());
  CHECK(!e.agent_store);
}

TEST_CASE("dist env: torchrun's variables, agent store included") {
  ScopedDistEnv env({{"RANK", "3"},
                     {"WORLD_SIZE", "4"},
                     {"LOCAL_RANK", "1"},
                     {"MASTER_ADDR", "node0"},
                     {"MASTER_PORT", "29500"},
                     {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                     {"TORCHELASTIC_RESTART_COUNT", "2"}});
  bv::DistEnv e = bv::dist_env_from_environ();
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29500);
  CHECK(e.agent_store);
  CHECK(e.restart_count == 2);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  CHECK(!bv::dist_env_from_environ().agent_store);
}

TEST_CASE("dist env: errors name the variable") {
  {
    ScopedDistEnv env({{"RANK", "2"},
                       {"WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", "29500"}});
    std::string msg = error_of([] { bv::dist_env_from_environ(); });
    CHECK(contains(msg, "RANK=2"));
    CHECK(contains(msg, "WORLD_SIZE=2"));
  }
  {
    ScopedDistEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
    CHECK(contains(error_of([] { bv::dist_env_from_environ(); }), "MASTER_PORT is not set"));
  }
  {
    ScopedDistEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
    CHECK(contains(error_of([] { bv::dist_env_from_environ(); }), "MASTER_ADDR is not set"));
  }
  {
    ScopedDistEnv env({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    CHECK(contains(error_of([] { bv::dist_env_from_environ(); }), "RANK='one' is not an integer"));
  }
  {
    ScopedDistEnv env({{"WORLD_SIZE", "0"}, {"RANK", "0"}});
    CHECK(contains(error_of([] { bv::dist_env_from_environ(); }), "WORLD_SIZE=0"));
  }
  {
    ScopedDistEnv env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
    CHECK(contains(error_of([] { bv::dist_env_from_environ(); }), "MASTER_PORT=70000"));
  }
}

TEST_CASE("dist: a single process needs no network, and collectives are identities") {
  ScopedDistEnv env;
  auto g = bv::dist_init(bv::dist_env_from_environ(), "auto", 5);
  CHECK(bv::dist_rank(*g) == 0);
  CHECK(bv::dist_world_size(*g) == 1);
  CHECK(bv::dist_backend(*g) == "gloo");  // no CUDA here
  std::vector<at::Tensor> ts = {at::full({2}, 3.0f), at::arange(3, at::kFloat)};
  bv::dist_all_reduce(*g, ts, true);
  CHECK(at::equal(ts[0], at::full({2}, 3.0f)));
  CHECK(at::equal(ts[1], at::arange(3, at::kFloat)));
  bv::dist_broadcast(*g, ts, 0);
  bv::dist_barrier(*g);
  bv::dist_store_set(*g, "k", "v");
  CHECK(bv::dist_store_get(*g, "k") == "v");
}

TEST_CASE("dist: bad arguments are errors naming the culprit") {
  ScopedDistEnv env;
  bv::DistEnv e = bv::dist_env_from_environ();
  CHECK(contains(error_of([&] { bv::dist_init(e, "mpi", 5); }), "backend 'mpi'"));
  CHECK(contains(error_of([&] { bv::dist_init(e, "gloo", 0); }), "timeout"));
  if (!bv::cuda_available()) {  // no NCCL in this build, or no device for it
    CHECK(contains(error_of([&] { bv::dist_init(e, "nccl", 5); }), "backend 'nccl'"));
  }
  auto g = bv::dist_init(e, "gloo", 5);
  std::vector<at::Tensor> mixed = {at::ones({2}), at::ones({2}, at::kDouble)};
  std::string msg = error_of([&] { bv::dist_all_reduce(*g, mixed, false); });
  CHECK(contains(msg, "tensor 2 is Double"));
  std::vector<at::Tensor> ints = {at::ones({2}, at::kLong)};
  CHECK(contains(error_of([&] { bv::dist_all_reduce(*g, ints, true); }), "floating-point"));
  CHECK(contains(error_of([&] { bv::dist_broadcast(*g, ints, 1); }), "root 1"));
}

TEST_CASE("dist: two gloo ranks all_reduce, broadcast, share a store and meet at a barrier") {
  bv::test::TempDir tmp("bv_dist");
  std::vector<Rank> ranks = spawn_ranks(2, "collectives", tmp.path);
  wait_ranks(ranks, 120);
  CHECK(exited_ok(ranks[0]));
  CHECK(exited_ok(ranks[1]));
  CHECK(read_file(tmp / "rank0") == "ok");
  CHECK(read_file(tmp / "rank1") == "ok");
}

TEST_CASE("dist: a rank that dies is named by the survivor's next collective") {
  for (int victim : {1, 0}) {  // rank 0 also hosts the store
    INFO("victim: rank " << victim);
    bv::test::TempDir tmp("bv_dist");
    std::vector<Rank> ranks =
        spawn_ranks(2, "lost", tmp.path, {{"BV_DIST_TEST_VICTIM", std::to_string(victim)}});
    wait_ranks(ranks, 60);
    int survivor = 1 - victim;
    CHECK(WIFSIGNALED(ranks[victim].status));
    CHECK(exited_ok(ranks[survivor]));
    std::string report = read_file(tmp / ("rank" + std::to_string(survivor)));
    INFO(report);
    REQUIRE(!report.empty());
    double secs = leading_number(report);
    std::printf("dist lost-rank test: rank %d noticed the loss of rank %d after %.2f s\n", survivor,
                victim, secs);
    CHECK(secs < 30);
    CHECK(contains(report, "dist.all_reduce failed on rank " + std::to_string(survivor) + " of 2"));
    CHECK(contains(report, "lost rank " + std::to_string(victim) + " (pid " +
                               std::to_string(ranks[victim].pid) + ")"));
  }
}

TEST_CASE("dist: a collective that nobody joins times out instead of hanging") {
  bv::test::TempDir tmp("bv_dist");
  std::vector<Rank> ranks = spawn_ranks(2, "stuck", tmp.path);
  wait_ranks(ranks, 60);
  CHECK(exited_ok(ranks[0]));
  CHECK(exited_ok(ranks[1]));
  std::string report = read_file(tmp / "rank0");
  INFO(report);
  REQUIRE(!report.empty());
  double secs = leading_number(report);
  CHECK(secs >= 2.5);  // the group timeout is 3 s
  CHECK(secs < 15);
  CHECK(contains(report, "dist.all_reduce failed on rank 0 of 2"));
  CHECK(contains(report, "within the group timeout (3 s)"));
}

TEST_CASE("dist: on the fake device a device tensor and a host tensor go to different groups") {
  // Without the check, both ranks wait in different groups until the timeout, as on NCCL.
  {
    bv::test::TempDir tmp("bv_dist");
    std::vector<Rank> ranks = spawn_ranks(2, "mismatch", tmp.path, {{"BV_CHECK_COLLECTIVES", "0"}});
    wait_ranks(ranks, 60);
    for (int r : {0, 1}) {
      std::string report = read_file(tmp / ("rank" + std::to_string(r)));
      INFO("rank " << r << ": " << report);
      CHECK(exited_ok(ranks[r]));
      CHECK(leading_number(report) >= 2.5);  // the group timeout is 3 s
      CHECK(contains(report, "dist.all_reduce failed on rank " + std::to_string(r)));
    }
  }
  // With BV_CHECK_COLLECTIVES=1, an error at once that names both ranks' collectives.
  bv::test::TempDir tmp("bv_dist");
  std::vector<Rank> ranks = spawn_ranks(2, "mismatch", tmp.path, {{"BV_CHECK_COLLECTIVES", "1"}});
  wait_ranks(ranks, 60);
  for (int r : {0, 1}) {
    std::string report = read_file(tmp / ("rank" + std::to_string(r)));
    INFO("rank " << r << ": " << report);
    CHECK(exited_ok(ranks[r]));
    CHECK(leading_number(report) < 2);
    CHECK(contains(report, "collective #1 differs across ranks"));
    CHECK(contains(report, "all_reduce of 4 Float on fake"));
    CHECK(contains(report, "all_reduce of 4 Float on cpu"));
  }
}

namespace {

// A collective's Work that records the timeout it was waited with.
struct RecordingWork final : ::c10d::Work {
  std::optional<std::chrono::milliseconds> seen;
  bool wait(std::chrono::milliseconds timeout) override {
    seen = timeout;
    return true;
  }
};

}  // namespace

TEST_CASE("dist: NCCL's collectives are waited for on the stream, Gloo's with the timeout") {
  // A timeout given to ProcessGroupNCCL's wait makes the host busy-wait for the collective.
  RecordingWork nccl, gloo;
  bv::wait_for_work(nccl, /*on_stream=*/true, std::chrono::milliseconds(5000));
  REQUIRE(nccl.seen);
  CHECK(nccl.seen->count() == 0);  // c10d's kNoTimeout: a stream-level wait
  bv::wait_for_work(gloo, /*on_stream=*/false, std::chrono::milliseconds(5000));
  REQUIRE(gloo.seen);
  CHECK(gloo.seen->count() == 5000);
}
