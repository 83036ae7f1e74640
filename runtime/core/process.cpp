#include "core/process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace bv {

void exec_in_child(int parent, int out_fd, int err_fd, char** argv, char** envp) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the parent died before prctl
  // Its own process group: a Ctrl-C at the terminal reaches the parent only, which stops its
  // children in order (bvlua's trainer treats a second SIGINT as "die now").
  ::setpgid(0, 0);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  // Nothing blocked, except for bvlua itself (a rank, a sweep's job): SIGTERM and SIGINT stay
  // pending until its stop handlers exist, so that one sent while libtorch loads is a stop
  // request, not a death (core/signals.h).
  sigset_t mask;
  sigemptyset(&mask);
  // (No allocation here, between fork and exec: another thread may have held malloc's lock.)
  const char* slash = std::strrchr(argv[0], '/');
  const char* name = slash ? slash + 1 : argv[0];
  if (std::strcmp(name, "bvlua-core") == 0 || std::strcmp(name, "bvlua") == 0) {
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
  }
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
  ::execve(argv[0], argv, envp);
  const char msg[] = "bvlua: cannot execute ";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  ignored = ::write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
  ignored = ::write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  ::_exit(127);
}

int spawn_process(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, const std::string& log_path) {
  BV_CHECK(!argv.empty(), "spawn: no command");
  // The environment: ours, with `env` applied.
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) vars[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : env) {
    if (v.empty()) {
      vars.erase(k);
    } else {
      vars[k] = v;
    }
  }
  std::vector<std::string> env_strings, args = argv;
  for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (std::string& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  for (std::string& s : env_strings) cenv.push_back(s.data());
  cenv.push_back(nullptr);

  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  BV_CHECK(fd >= 0, "spawn: cannot open the log file '", log_path, "': ", std::strerror(errno));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) exec_in_child(parent, fd, fd, cargv.data(), cenv.data());
  int fork_errno = errno;
  ::close(fd);
  BV_CHECK(pid > 0, "spawn: cannot start '", argv[0],
           "': fork failed: ", std::strerror(fork_errno));
  return static_cast<int>(pid);
}

std::optional<int> poll_process(int pid) {
  int status = 0;
  pid_t got = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
  if (got == 0) return std::nullopt;
  BV_CHECK(got == pid, "poll: process ", pid, " is not a child of this one");
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

void signal_process(int pid, int sig) { ::kill(static_cast<pid_t>(pid), sig); }

}  // namespace bv
