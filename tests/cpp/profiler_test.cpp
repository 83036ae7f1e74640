// The profiler behind --profile (runtime/core/profiler.h): self times from nested events, and a
// real recording of libtorch ops written as a Chrome trace.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/fs.h"
#include "core/profiler.h"
#include "test_util.h"

using bv::profiler::Event;
using bv::profiler::OpTime;
using bv::test::contains;
using bv::test::error_of;

namespace {

Event ev(const std::string& name, uint64_t thread, int64_t start, int64_t end,
         bool device = false) {
  Event e;
  e.name = name;
  e.thread = thread;
  e.start_ns = start;
  e.end_ns = end;
  e.on_device = device;
  return e;
}

const OpTime& find(const std::vector<OpTime>& ops, const std::string& name, bool device = false) {
  for (const OpTime& op : ops) {
    if (op.name == name && op.on_device == device) return op;
  }
  FAIL("no op " << name);
  return ops.front();
}

}  // namespace

TEST_CASE("profiler summarize: self time leaves out direct children, per thread", "[profiler]") {
  // thread 1: linear [0, 100) calls addmm [10, 70) which calls mm [20, 50); then add [100, 120).
  // thread 2: addmm [0, 40) overlaps thread 1's linear but is not its child.
  std::vector<Event> events = {
      ev("aten::add", 1, 100, 120), ev("aten::mm", 1, 20, 50),   ev("aten::linear", 1, 0, 100),
      ev("aten::addmm", 1, 10, 70), ev("aten::addmm", 2, 0, 40), ev("kernel", 1, 5, 95, true),
  };
  auto ops = bv::profiler::summarize(events);
  const OpTime& linear = find(ops, "aten::linear");
  CHECK(linear.calls == 1);
  CHECK(linear.total_ns == 100);
  CHECK(linear.self_ns == 40);  // 100 - addmm's 60
  const OpTime& addmm = find(ops, "aten::addmm");
  CHECK(addmm.calls == 2);
  CHECK(addmm.total_ns == 100);
  CHECK(addmm.self_ns == 30 + 40);  // thread 1: 60 - mm's 30; thread 2: all of it
  CHECK(find(ops, "aten::mm").self_ns == 30);
  CHECK(find(ops, "aten::add").self_ns == 20);
  // A device kernel is never a parent or a child: its time is its own.
  const OpTime& kernel = find(ops, "kernel", true);
  CHECK(kernel.self_ns == 90);
  // Largest self time first.
  for (size_t i = 1; i < ops.size(); ++i) CHECK(ops[i - 1].self_ns >= ops[i].self_ns);
}

TEST_CASE("profiler summarize: events that start together nest, the longer outside", "[profiler]") {
  auto ops = bv::profiler::summarize(
      {ev("inner", 7, 0, 10), ev("outer", 7, 0, 30), ev("next", 7, 30, 35)});
  CHECK(find(ops, "outer").self_ns == 20);
  CHECK(find(ops, "inner").self_ns == 10);
  CHECK(find(ops, "next").self_ns == 5);  // starts as outer ends: a sibling, not a child
}

TEST_CASE("profiler records libtorch ops and writes a Chrome trace", "[profiler]") {
  bv::test::TempDir dir("bv_profiler");
  std::string trace = dir.path + "/t.pt.trace.json";
  auto a = at::randn({64, 128});
  auto b = at::randn({128, 32});
  bv::profiler::start(/*cuda=*/false);
  CHECK(bv::profiler::running());
  CHECK(contains(error_of([] { bv::profiler::start(false); }), "already under way"));
  bv::profiler::mark_step(3);
  auto c = at::mm(a, b);
  bv::profiler::mark_step(4);
  c = at::relu(c);
  auto r = bv::profiler::stop(trace);
  CHECK_FALSE(bv::profiler::running());
  CHECK(r.steps == 2);
  CHECK(r.steps_ns > 0);
  CHECK(r.outside_ops_ns <= r.steps_ns);
  CHECK(r.wall_ns >= r.steps_ns);
  const OpTime& mm = find(r.ops, "aten::mm");
  CHECK(mm.calls == 1);
  find(r.ops, "aten::relu");
  for (const OpTime& op : r.ops) CHECK(op.name.rfind("ProfilerStep#", 0) != 0);

  auto j = nlohmann::json::parse(bv::fs::read_file(trace));
  std::set<std::string> names;
  for (const auto& e : j.at("traceEvents")) {
    if (e.contains("name")) names.insert(e["name"].get<std::string>());
  }
  CHECK(names.count("aten::mm") == 1);
  CHECK(names.count("ProfilerStep#3") == 1);
  CHECK(names.count("ProfilerStep#4") == 1);
  CHECK_FALSE(bv::fs::exists(trace + ".tmp"));

  CHECK(contains(error_of([&] { bv::profiler::stop(trace); }), "no recording is under way"));
  // A trace that cannot be written: the recording still ends, the error names the path.
  bv::profiler::start(false);
  std::string msg = error_of([&] { bv::profiler::stop(dir.path + "/no/such/dir/t.json"); });
  CHECK(contains(msg, "no/such/dir/t.json"));
  CHECK_FALSE(bv::profiler::running());
}

TEST_CASE("profiler named ranges: apart from the ops, nested in their step in the trace",
          "[profiler]") {
  bv::test::TempDir dir("bv_profiler_ranges");
  std::string trace = dir.path + "/t.pt.trace.json";
  auto a = at::randn({64, 64});
  bv::profiler::push_range("ignored");  // not recording: nothing
  CHECK_NOTHROW(bv::profiler::pop_range());
  bv::profiler::start(false);
  bv::profiler::mark_step(1);
  auto c = at::mm(a, a);
  bv::profiler::push_range("eval/acc");
  c = at::relu(at::mm(c, a));
  bv::profiler::pop_range();
  CHECK(contains(error_of([] { bv::profiler::pop_range(); }), "no range open"));
  CHECK(contains(error_of([] { bv::profiler::push_range("ProfilerStep#9"); }), "ProfilerStep#"));
  bv::profiler::mark_step(2);
  bv::profiler::push_range("checkpoint");
  bv::profiler::push_range("eval/acc");  // left open: the next step (here stop) ends both
  c = at::mm(c, a);
  auto r = bv::profiler::stop(trace);
  REQUIRE(r.ranges.size() == 2);
  CHECK(r.ranges[0].name == "eval/acc");
  CHECK(r.ranges[0].calls == 2);
  CHECK(r.ranges[0].self_ns <= r.ranges[0].total_ns);
  CHECK(r.ranges[1].name == "checkpoint");
  CHECK(r.ranges[1].calls == 1);
  CHECK(r.ranges[1].self_ns < r.ranges[1].total_ns);  // it holds the second eval/acc
  CHECK(r.ranges[0].total_ns + r.outside_ops_ns <= r.steps_ns);
  for (const OpTime& op : r.ops) CHECK(op.name != "eval/acc");
  CHECK(find(r.ops, "aten::mm").calls == 3);

  auto j = nlohmann::json::parse(bv::fs::read_file(trace));
  double step1_ts = -1, step1_end = -1;
  std::vector<double> eval_ts;
  for (const auto& e : j.at("traceEvents")) {
    if (!e.contains("name") || !e.contains("ts") || !e.contains("dur")) continue;
    double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
    if (e["name"] == "ProfilerStep#1") step1_ts = ts, step1_end = end;
    if (e["name"] == "eval/acc") eval_ts.push_back(ts);
  }
  REQUIRE(eval_ts.size() == 2);
  std::sort(eval_ts.begin(), eval_ts.end());
  CHECK(eval_ts[0] >= step1_ts);
  CHECK(eval_ts[0] <= step1_end);
  CHECK(eval_ts[1] > step1_end);
}
