#include "core/signals.h"

#include <atomic>
#include <csignal>

namespace bv {

namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT && g_signal.load() == SIGINT) {
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C: the user really means it
    std::raise(SIGINT);
    return;
  }
  g_signal.store(sig);
}

}  // namespace

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
