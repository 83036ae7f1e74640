// The profiler behind `bvlua train --profile START:STOP`: libtorch's own (Kineto, as
// torch.profiler uses), recording the ops this thread runs between start() and stop(), with a
// "ProfilerStep#N" range around each training step as torch.profiler marks them. stop() writes
// the Chrome trace format that Perfetto (ui.perfetto.dev) and chrome://tracing open, and
// returns the ops summed by name for a table of the slowest ones.
//
// One recording at a time per process, on the thread that started it: ops on other threads
// (the data pipeline's workers) are not in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bv::profiler {

// One recorded op, as summarize() needs it. Times in ns on one clock; `thread` tells nested
// calls apart from calls that merely overlap on another thread.
struct Event {
  std::string name;
  uint64_t thread = 0;
  int64_t start_ns = 0, end_ns = 0;
  bool on_device = false;  // a GPU kernel or copy (its own timeline, never nested)
};

// The calls of one op name summed: `self_ns` leaves out the time of the ops it called (its
// direct children on its thread), `total_ns` includes it.
struct OpTime {
  std::string name;
  int64_t calls = 0;
  int64_t self_ns = 0, total_ns = 0;
  bool on_device = false;
};

// Sums events by (name, on_device); largest self time first, then by name.
std::vector<OpTime> summarize(std::vector<Event> events);

// Starts recording on this thread: host ops, and the GPU's kernels when `cuda`. Fails if a
// recording is already under way.
void start(bool cuda);

// Whether a recording is under way.
bool running();

// Ends the previous step's range (if any) and opens "ProfilerStep#<step>". No-op when not
// recording. The named ranges still open end first.
void mark_step(int64_t step);

// Opens a range named `name` (e.g. "eval/acc") inside the ranges open now, in the trace as the
// steps' are, until pop_range(). No-op when not recording.
void push_range(const std::string& name);

// Ends the innermost named range. No-op when not recording; fails if none is open.
void pop_range();

struct Result {
  std::vector<OpTime> ops;     // summarize()'s, the step and named ranges excluded
  std::vector<OpTime> ranges;  // the named ranges (push_range), in the order first opened
  int64_t wall_ns = 0;         // from start() to stop()
  int64_t steps = 0;           // step ranges recorded (mark_step calls)
  int64_t steps_ns = 0;        // their time, and of it, the time no op of libtorch ran on
  int64_t outside_ops_ns = 0;  // the recording thread (Lua, waits, the host side of a step)
};

// Stops recording, writes the trace to `trace_path` (its directory must exist) and returns the
// summary. Fails if no recording is under way or the trace cannot be written.
Result stop(const std::string& trace_path);

}  // namespace bv::profiler
