#include "core/signals.h"

#include <atomic>
#include <csignal>

#include <unistd.h>

namespace bv {

namespace {

std::atomic<int> g_signal{0};
// What the handler tells the user (stop_announcements): off, or the step under way and the last
// checkpoint's step (-1: none yet).
std::atomic<bool> g_announce{false};
std::atomic<long> g_step{-1};
std::atomic<long> g_saved{-1};

// Async-signal-safe output: a line built in a fixed buffer, one write(2).
struct Line {
  char buf[512];
  size_t n = 0;
  void add(const char* s) {
    while (*s && n < sizeof buf - 1) buf[n++] = *s++;
  }
  void add(long v) {
    char digits[24];
    int k = 0;
    unsigned long u = v < 0 ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u > 0 && k < 23);
    if (v < 0) add("-");
    while (k > 0 && n < sizeof buf - 1) buf[n++] = digits[--k];
  }
  void write_out() {
    ssize_t ignored = ::write(STDERR_FILENO, buf, n);
    (void)ignored;
  }
};

// The first SIGINT/SIGTERM: what will happen, at once (an evaluation may take a while first).
void announce_stop(int sig) {
  Line line;
  line.add(sig == SIGINT ? "\nbvlua: SIGINT received" : "\nbvlua: SIGTERM received");
  long step = g_step.load();
  if (step < 0) {
    line.add(" while starting: stopping before the first step");
  } else {
    line.add(" in step ");
    line.add(step);
    line.add(": stopping after it (and its evaluations, when due) with a checkpoint");
  }
  if (sig == SIGINT) line.add("; Ctrl-C again to stop at once without saving");
  line.add("\n");
  line.write_out();
}

// The second SIGINT: what is kept, then the default action (exit status 130).
void announce_abandon() {
  Line line;
  line.add("\nbvlua: second SIGINT: stopped at once without saving; ");
  long saved = g_saved.load();
  if (saved < 0) {
    line.add("no checkpoint was saved\n");
  } else {
    line.add("the last checkpoint is step ");
    line.add(saved);
    line.add(" (the same command resumes from it)\n");
  }
  line.write_out();
}

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_signal.load() == SIGINT) {
    if (g_announce.load()) announce_abandon();
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C: the user really means it
    std::raise(SIGINT);
    return;
  }
  if (g_announce.load() && g_signal.load() == 0) announce_stop(sig);
  g_signal.store(sig);
}

}  // namespace

void stop_announcements(bool on) { g_announce.store(on); }

void stop_progress(long step, long saved_step) {
  g_step.store(step);
  g_saved.store(saved_step);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  // The flag is all the handler does: interrupted reads and waits (stdio, c10d's rendezvous)
  // go on rather than fail with EINTR.
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void clear_stop_request() { g_signal.store(0); }

void release_stop_signals(bool handle) {
  if (handle) install_stop_handlers();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }

const char* stop_signal_name() {
  switch (g_signal.load()) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "";
  }
}

}  // namespace bv
