#include "distributed/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/process.h"
#include "device/machine.h"

extern char** environ;

namespace bv {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_signal = 0;  // the last SIGINT/SIGTERM the launcher received
void on_signal(int sig) { g_signal = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int fds[2] = {-1, -1};   // the read ends of its stdout and stderr pipes (ranks > 0)
  std::string pending[2];  // a partial line per pipe
};

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // the terminal is gone; nothing better to do with the output
    data += w;
    n -= static_cast<size_t>(w);
  }
}

// Passes complete lines of `c`'s pipe `which` (0 stdout, 1 stderr) on with the rank's prefix;
// at_eof also passes the last partial line.
void emit_lines(Child& c, int which, bool at_eof) {
  std::string& buf = c.pending[which];
  std::string prefix = str("[rank ", c.rank, "] ");
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
    out += prefix;
    out.append(buf, start, nl + 1 - start);
  }
  buf.erase(0, start);
  if (at_eof && !buf.empty()) {
    out += prefix + buf + "\n";
    buf.clear();
  }
  if (!out.empty()) write_all(which == 0 ? STDOUT_FILENO : STDERR_FILENO, out.data(), out.size());
}

// Reads what is ready on the children's pipes, waiting at most timeout_ms. Returns the number
// of pipes still open.
int pump_output(std::vector<Child>& children, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, int>> owners;
  for (Child& c : children) {
    for (int which = 0; which < 2; ++which) {
      if (c.fds[which] < 0) continue;
      fds.push_back({c.fds[which], POLLIN, 0});
      owners.push_back({&c, which});
    }
  }
  if (fds.empty()) {
    if (timeout_ms > 0) ::poll(nullptr, 0, timeout_ms);  // a signal cuts the sleep short
    return 0;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return static_cast<int>(fds.size());
  int open = static_cast<int>(fds.size());
  char buf[65536];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    auto [child, which] = owners[i];
    ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      child->pending[which].append(buf, static_cast<size_t>(n));
      emit_lines(*child, which, false);
    } else {
      emit_lines(*child, which, true);
      ::close(fds[i].fd);
      child->fds[which] = -1;
      --open;
    }
  }
  return open;
}

// The children's environment: ours minus TORCHELASTIC_* (a launcher started under torchrun
// must not make its children clients of torchrun's agent store) and the variables we set.
std::vector<std::string> child_environment(int rank, int nproc, int port) {
  const char* ours[] = {"RANK=",        "LOCAL_RANK=",  "WORLD_SIZE=", "LOCAL_WORLD_SIZE=",
                        "MASTER_ADDR=", "MASTER_PORT=", "GROUP_RANK=", "TORCHELASTIC_"};
  std::vector<std::string> env;
  bool has_omp = false, has_bv_threads = false;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const char* prefix : ours) replaced = replaced || kv.rfind(prefix, 0) == 0;
    if (replaced) continue;
    has_omp = has_omp || kv.rfind("OMP_NUM_THREADS=", 0) == 0;
    has_bv_threads = has_bv_threads || kv.rfind("BV_THREADS=", 0) == 0;
    env.push_back(kv);
  }
  env.push_back(str("RANK=", rank));
  env.push_back(str("LOCAL_RANK=", rank));
  env.push_back(str("GROUP_RANK=0"));
  env.push_back(str("WORLD_SIZE=", nproc));
  env.push_back(str("LOCAL_WORLD_SIZE=", nproc));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(str("MASTER_PORT=", port));
  // N ranks each running all cores' worth of threads would oversubscribe the machine N times.
  int threads = std::max(1, cpu_cores() / nproc);
  if (!has_omp) env.push_back(str("OMP_NUM_THREADS=", threads));
  if (!has_bv_threads) env.push_back(str("BV_THREADS=", threads));
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void start_child(Child& c, const std::vector<std::string>& argv, int nproc, int port) {
  std::vector<std::string> args = argv;
  std::vector<std::string> env = child_environment(c.rank, nproc, port);
  std::vector<char*> cargv = c_strings(args), cenv = c_strings(env);
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (c.rank > 0) {
    BV_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0,
             "dist.launch: pipe failed: ", std::strerror(errno));
  }
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) exec_in_child(launcher, out[1], err[1], cargv.data(), cenv.data());
  int fork_errno = errno;
  for (int fd : {out[1], err[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (pid < 0) {
    for (int fd : {out[0], err[0]}) {
      if (fd >= 0) ::close(fd);
    }
    fail("dist.launch: cannot start rank ", c.rank, ": fork failed: ", std::strerror(fork_errno));
  }
  c.pid = pid;
  c.running = true;
  c.fds[0] = out[0];
  c.fds[1] = err[0];
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return str("was killed by signal ", sig, " (", ::strsignal(sig), ")");
  }
  return str("exited with code ", WEXITSTATUS(status));
}

int exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

void signal_running(std::vector<Child>& children, int sig) {
  for (Child& c : children) {
    if (c.running) ::kill(c.pid, sig);
  }
}

// Restores the launcher's previous SIGINT/SIGTERM handlers on every way out.
struct SignalScope {
  struct sigaction old_int = {};
  struct sigaction old_term = {};
  SignalScope() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: poll() returns early on a signal
    ::sigaction(SIGINT, &sa, &old_int);
    ::sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalScope() {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  }
};

}  // namespace

std::string current_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  BV_CHECK(n > 0, "cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BV_CHECK(fd >= 0, "dist: socket failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int err = errno;
  ::close(fd);
  BV_CHECK(ok, "dist: cannot find a free port on 127.0.0.1: ", std::strerror(err));
  return ntohs(addr.sin_port);
}

int launch_local(const std::vector<std::string>& argv, int nproc, int master_port, double grace_s) {
  BV_CHECK(!argv.empty() && !argv[0].empty(), "dist.launch: the command is empty");
  BV_CHECK(nproc >= 1 && nproc <= 1024, "dist.launch: nproc must be in [1, 1024], got ", nproc);
  BV_CHECK(master_port >= 0 && master_port <= 65535,
           "dist.launch: port must be in [0, 65535], "
           "got ",
           master_port);
  BV_CHECK(grace_s >= 0 && grace_s < 1e6, "dist.launch: grace must be >= 0 seconds, got ", grace_s);
  int port = master_port > 0 ? master_port : pick_free_port();
  std::fflush(stdout);
  std::fflush(stderr);

  SignalScope signals;
  std::vector<Child> children(static_cast<size_t>(nproc));
  int first_failure = -1;  // its exit code once a rank has failed
  auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  Clock::time_point kill_at = Clock::time_point::max();
  bool stopping = false;  // the ranks have been told to stop (a failure or a signal)
  auto stop_all = [&](int sig) {
    stopping = true;
    signal_running(children, sig);
    if (kill_at == Clock::time_point::max()) kill_at = Clock::now() + grace;
  };

  try {
    for (int r = 0; r < nproc; ++r) {
      children[r].rank = r;
      start_child(children[r], argv, nproc, port);
    }
  } catch (...) {
    signal_running(children, SIGKILL);
    for (Child& c : children) {
      if (c.running) ::waitpid(c.pid, nullptr, 0);
      for (int fd : c.fds) {
        if (fd >= 0) ::close(fd);
      }
    }
    throw;
  }

  int running = nproc;
  Clock::time_point drain_until = Clock::time_point::max();
  while (true) {
    int open_pipes = pump_output(children, 50);
    for (Child& c : children) {
      if (!c.running) continue;
      int status = 0;
      pid_t got = ::waitpid(c.pid, &status, WNOHANG);
      if (got != c.pid) continue;
      c.running = false;
      --running;
      if (exit_code(status) == 0) continue;
      bool first = first_failure < 0;
      if (first) first_failure = exit_code(status);
      std::fprintf(stderr, "bvlua: rank %d (pid %d) %s%s\n", c.rank, static_cast<int>(c.pid),
                   describe_exit(status).c_str(),
                   first && running > 0 && !stopping ? "; stopping the other ranks" : "");
      if (first) stop_all(SIGTERM);
    }
    if (int sig = g_signal) {
      g_signal = 0;
      if (running > 0) {
        std::fprintf(stderr, "bvlua: got %s; passing it on to the ranks\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        stop_all(sig);
      }
    }
    if (running > 0 && Clock::now() >= kill_at) {
      std::fprintf(stderr, "bvlua: %d rank(s) still running %g s later; killing them\n", running,
                   grace_s);
      signal_running(children, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (running == 0) {
      // Output written just before exiting is still in the pipes; a grandchild that inherited
      // one may keep it open forever, so drain for a bounded time only.
      if (drain_until == Clock::time_point::max()) {
        drain_until = Clock::now() + std::chrono::seconds(2);
      }
      if (open_pipes == 0 || Clock::now() >= drain_until) break;
    }
  }
  for (Child& c : children) {
    for (int which = 0; which < 2; ++which) {
      if (c.fds[which] < 0) continue;
      emit_lines(c, which, true);
      ::close(c.fds[which]);
    }
  }
  return first_failure < 0 ? 0 : first_failure;
}

}  // namespace bv
