#include "core/profiler.h"

#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "core/error.h"

namespace bv::profiler {

namespace kineto = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

std::vector<OpTime> summarize(std::vector<Event> events) {
  // Self time: walk each thread's host events in start order (the enclosing one first when two
  // start together) with a stack of the open ones; an event's parent is the innermost open
  // event that has not ended when it starts.
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::vector<int64_t> child_ns(events.size(), 0);
  std::vector<size_t> open;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.on_device) continue;
    if (!open.empty() && events[open.back()].thread != e.thread) open.clear();
    while (!open.empty() && events[open.back()].end_ns <= e.start_ns) open.pop_back();
    if (!open.empty()) {
      // A child that outlives its parent (clocks read on different cores) counts up to the
      // parent's end only.
      int64_t end = std::min(e.end_ns, events[open.back()].end_ns);
      child_ns[open.back()] += std::max<int64_t>(0, end - e.start_ns);
    }
    open.push_back(i);
  }
  std::map<std::pair<std::string, bool>, OpTime> by_name;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    OpTime& op = by_name[{e.name, e.on_device}];
    op.name = e.name;
    op.on_device = e.on_device;
    op.calls += 1;
    int64_t duration = std::max<int64_t>(0, e.end_ns - e.start_ns);
    op.total_ns += duration;
    op.self_ns += std::max<int64_t>(0, duration - child_ns[i]);
  }
  std::vector<OpTime> ops;
  for (auto& [key, op] : by_name) ops.push_back(std::move(op));
  std::stable_sort(ops.begin(), ops.end(),
                   [](const OpTime& a, const OpTime& b) { return a.self_ns > b.self_ns; });
  return ops;
}

namespace {

// The recording under way: the step range open now and the named ranges inside it, innermost
// last, when it began.
struct Recording {
  std::unique_ptr<at::RecordFunction> step;
  std::vector<std::unique_ptr<at::RecordFunction>> ranges;
  std::vector<std::string> range_names;  // every name pushed, once, in the order first pushed
  std::chrono::steady_clock::time_point began;
  int64_t steps = 0;
  bool cuda = false;  // the GPU's kernels are recorded too
};
std::unique_ptr<Recording> g_recording;

const char kStepPrefix[] = "ProfilerStep#";

// Waits for the kernels queued on every CUDA device this process has a context on (the
// profiled steps ran there): the host runs ahead of the GPU, and Kineto stopped before they end
// leaves the last steps' kernels out of the trace or cut short. A device without a context is
// skipped: synchronising it would make one (and take its memory) for nothing.
void synchronize_cuda() {
  if (!at::hasCUDA()) return;
  const at::AcceleratorHooksInterface& hooks =
      at::globalContext().getAcceleratorHooksInterface(c10::DeviceType::CUDA);
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  for (c10::DeviceIndex i = 0; i < guard.deviceCount(); ++i) {
    if (hooks.hasPrimaryContext(i)) guard.synchronizeDevice(i);
  }
}

}  // namespace

bool running() { return g_recording != nullptr; }

void start(bool cuda) {
  BV_CHECK(!g_recording, "profiler: a recording is already under way (stop it first)");
  BV_CHECK(!kineto::isProfilerEnabledInMainThread() && !impl::profilerEnabled(),
           "profiler: libtorch's profiler is already recording in this process");
  // Input shapes go into the trace (Perfetto shows them per op). No FLOP counts: libtorch has
  // formulas for a few ops only, and warns once per call about the convolutions our models make.
  impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
  // Kineto prints a line to stderr at each start and stop unless told otherwise; a user's own
  // KINETO_LOG_LEVEL wins.
  ::setenv("KINETO_LOG_LEVEL", "6", /*overwrite=*/0);
  std::set<impl::ActivityType> activities = {impl::ActivityType::CPU};
  if (cuda) activities.insert(impl::ActivityType::CUDA);
  kineto::prepareProfiler(config, activities);
  kineto::enableProfiler(config, activities);
  g_recording = std::make_unique<Recording>();
  g_recording->began = std::chrono::steady_clock::now();
  g_recording->cuda = cuda;
}

// Ends the open named ranges, innermost first (a RecordFunction's destructor ends its range).
void end_ranges(Recording& recording) {
  while (!recording.ranges.empty()) recording.ranges.pop_back();
}

std::unique_ptr<at::RecordFunction> open_range(const std::string& name) {
  auto range = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (range->isActive()) range->before(name);
  return range;
}

void mark_step(int64_t step) {
  if (!g_recording) return;
  end_ranges(*g_recording);
  g_recording->step.reset();
  g_recording->step = open_range(std::string(kStepPrefix) + std::to_string(step));
  g_recording->steps += 1;
}

void push_range(const std::string& name) {
  if (!g_recording) return;
  BV_CHECK(!name.empty() && name.rfind(kStepPrefix, 0) != 0,
           "profiler: a range's name must "
           "be non-empty and not begin with '",
           kStepPrefix, "', got '", name, "'");
  std::vector<std::string>& names = g_recording->range_names;
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  g_recording->ranges.push_back(open_range(name));
}

void pop_range() {
  if (!g_recording) return;
  BV_CHECK(!g_recording->ranges.empty(), "profiler: pop_range with no range open");
  g_recording->ranges.pop_back();
}

Result stop(const std::string& trace_path) {
  BV_CHECK(g_recording, "profiler: no recording is under way (start one first)");
  std::unique_ptr<Recording> recording = std::move(g_recording);
  end_ranges(*recording);
  recording->step.reset();
  // As torch.profiler: the step's range closed, then the GPU waited for, then Kineto stopped.
  if (recording->cuda) synchronize_cuda();
  auto wall = std::chrono::steady_clock::now() - recording->began;
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  BV_CHECK(result, "profiler: libtorch returned no recording");

  Result out;
  out.wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count();
  out.steps = recording->steps;
  std::vector<Event> events;
  for (const kineto::KinetoEvent& k : result->events()) {
    if (k.isHiddenEvent()) continue;
    Event e;
    e.name = k.name();
    e.thread = k.startThreadId();
    e.start_ns = static_cast<int64_t>(k.startNs());
    e.end_ns = static_cast<int64_t>(k.endNs());
    e.on_device = k.deviceType() != c10::DeviceType::CPU;
    events.push_back(std::move(e));
  }
  std::vector<OpTime> ops = summarize(std::move(events));
  const std::vector<std::string>& names = recording->range_names;
  out.ranges.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) out.ranges[i].name = names[i];
  for (OpTime& op : ops) {
    auto named = std::find(names.begin(), names.end(), op.name);
    if (!op.on_device && op.name.rfind(kStepPrefix, 0) == 0) {
      out.steps_ns += op.total_ns;
      out.outside_ops_ns += op.self_ns;
    } else if (!op.on_device && named != names.end()) {
      out.ranges[named - names.begin()] = std::move(op);
    } else {
      out.ops.push_back(std::move(op));
    }
  }

  // Written beside and renamed, so that a trace with this name is always whole.
  std::filesystem::path path(trace_path);
  std::error_code ec;
  std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  BV_CHECK(std::filesystem::is_directory(dir, ec), "profiler: cannot write the trace to '",
           trace_path, "': no directory '", dir.string(), "'");
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  result->save(tmp.string());
  BV_CHECK(std::filesystem::is_regular_file(tmp, ec) && std::filesystem::file_size(tmp, ec) > 0,
           "profiler: could not write the trace to '", tmp.string(), "'");
  std::filesystem::rename(tmp, path, ec);
  BV_CHECK(!ec, "profiler: could not rename '", tmp.string(), "' to '", trace_path,
           "': ", ec.message());
  return out;
}

}  // namespace bv::profiler
