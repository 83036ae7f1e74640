// The fake device's asynchronous streams (device/fake_streams.h): one worker thread runs the
// queued copies in the order they were queued, each after its delay.
#include "device/fake_streams.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

namespace bv::fake {

namespace {

using Clock = std::chrono::steady_clock;

struct Task {
  StreamId stream;
  uint64_t seq;
  Clock::time_point due;
  std::function<void()> copy;
};

// A queued (or done) copy into a device storage.
struct Write {
  StreamId stream;
  uint64_t seq;
};

struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> tasks;
  std::map<StreamId, uint64_t> queued, done;
  std::map<StreamId, uint64_t> synced;                        // the host waited up to here
  std::map<std::pair<StreamId, StreamId>, uint64_t> ordered;  // (c, s): c is after s's first n
  std::unordered_map<const void*, Write> writes;              // by device storage
  bool worker_started = false;
};

// Never destroyed: the worker thread may still be waiting when the program exits.
State& state() {
  static State* s = new State;
  return *s;
}

std::atomic<int64_t> delay_ms{-1};  // -1: BV_FAKE_STREAM_DELAY_MS's, read once (default 2)

std::chrono::milliseconds delay() {
  if (delay_ms < 0) {
    const char* v = std::getenv("BV_FAKE_STREAM_DELAY_MS");
    delay_ms = v && *v ? std::atol(v) : 2;
  }
  return std::chrono::milliseconds(delay_ms.load());
}

void run_worker() {
  State& st = state();
  std::unique_lock<std::mutex> lock(st.mu);
  for (;;) {
    st.cv.wait(lock, [&] { return !st.tasks.empty(); });
    Task task = std::move(st.tasks.front());
    st.tasks.pop_front();
    lock.unlock();
    std::this_thread::sleep_until(task.due);
    try {
      task.copy();
    } catch (const std::exception& e) {
      // A copy's arguments were checked when it was queued; failing here is a bug of ours.
      std::fprintf(stderr, "fake device: a queued copy failed: %s\n", e.what());
      std::abort();
    }
    {
      std::lock_guard<std::mutex> done_lock(st.mu);
      st.done[task.stream] = task.seq;
      st.cv.notify_all();
    }
    task.copy = nullptr;  // frees its tensors (which may call forget) without the lock held
    lock.lock();
  }
}

thread_local StreamId current = 0;

void wait_locked(State& st, std::unique_lock<std::mutex>& lock, StreamId s, uint64_t seq) {
  st.cv.wait(lock, [&] { return st.done[s] >= seq; });
}

}  // namespace

StreamId current_stream() { return current; }

StreamId exchange_stream(StreamId s) {
  StreamId old = current;
  current = s;
  return old;
}

StreamId pool_stream() {
  static std::atomic<int> next{0};
  return 1 + next++ % 4;
}

uint64_t queued(StreamId s) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.queued[s];
}

uint64_t enqueue(StreamId s, const void* writes, std::function<void()> copy) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  uint64_t seq = ++st.queued[s];
  if (writes) st.writes[writes] = Write{s, seq};
  st.tasks.push_back(Task{s, seq, Clock::now() + delay(), std::move(copy)});
  if (!st.worker_started) {
    std::thread(run_worker).detach();
    st.worker_started = true;
  }
  st.cv.notify_all();
  return seq;
}

void wait_until(StreamId s, uint64_t seq) {
  State& st = state();
  std::unique_lock<std::mutex> lock(st.mu);
  wait_locked(st, lock, s, seq);
}

bool done(StreamId s, uint64_t seq) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.done[s] >= seq;
}

void host_sync(StreamId s, uint64_t seq) {
  State& st = state();
  std::unique_lock<std::mutex> lock(st.mu);
  wait_locked(st, lock, s, seq);
  st.synced[s] = std::max(st.synced[s], seq);
}

void host_sync_all() {
  State& st = state();
  std::unique_lock<std::mutex> lock(st.mu);
  for (auto [s, seq] : std::map<StreamId, uint64_t>(st.queued)) {
    wait_locked(st, lock, s, seq);
    st.synced[s] = std::max(st.synced[s], seq);
  }
}

void order(StreamId c, StreamId s, uint64_t seq) {
  State& st = state();
  std::unique_lock<std::mutex> lock(st.mu);
  wait_locked(st, lock, s, seq);
  uint64_t& after = st.ordered[{c, s}];
  after = std::max(after, seq);
}

void check_use(const void* storage, const std::string& op, const std::string& what) {
  State& st = state();
  StreamId c = current;
  std::unique_lock<std::mutex> lock(st.mu);
  wait_locked(st, lock, c, st.queued[c]);  // a stream runs its own work in order
  auto it = st.writes.find(storage);
  if (it == st.writes.end()) return;
  Write w = it->second;
  if (w.stream == c || st.synced[w.stream] >= w.seq || st.ordered[{c, w.stream}] >= w.seq) return;
  bool finished = st.done[w.stream] >= w.seq;
  TORCH_CHECK(false, "fake device: ", op, " uses ", what, " that a copy on stream ", w.stream,
              " writes", finished ? "" : " (still queued)", ", but stream ", c,
              " was never made to wait for that copy: record an event on the copy's stream and "
              "block on it (device/device_copy.h's wait()), or synchronize, before using it");
}

void set_delay(std::chrono::milliseconds delay) { delay_ms = delay.count(); }

void forget(const void* storage) {
  State& st = state();
  std::unique_lock<std::mutex> lock(st.mu);
  auto it = st.writes.find(storage);
  if (it == st.writes.end()) return;
  Write w = it->second;
  wait_locked(st, lock, w.stream, w.seq);
  st.writes.erase(storage);
}

}  // namespace bv::fake
