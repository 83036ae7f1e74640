// Child processes for `bvlua sweep`: start a command with its output in a file and some
// environment variables changed, see whether it has ended, signal it. Children die with us
// (PR_SET_PDEATHSIG) and run in their own process group, so a Ctrl-C at the terminal reaches
// the sweep alone, which then stops its jobs in order.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bv {

// Starts argv (argv[0]: a path) with stdout and stderr appended to `log_path`, and `env` set on
// top of our environment (an empty value removes the variable). Returns the child's pid; fails
// naming the command or the log file.
int spawn_process(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, const std::string& log_path);

// The exit code of child `pid` once it has ended (128 + N for signal N), else nothing. Does not
// wait.
std::optional<int> poll_process(int pid);

// Sends signal `sig` to child `pid` (nothing when it has already ended).
void signal_process(int pid, int sig);

// The child's half of starting a process, between fork and exec (async-signal-safe calls only):
// dies with `parent` (PR_SET_PDEATHSIG), its own process group, default SIGINT/SIGTERM/SIGPIPE
// and no blocked signals (bvlua itself, named bvlua or bvlua-core: SIGTERM and SIGINT blocked
// until its stop handlers exist, core/signals.h), stdout/stderr onto out_fd/err_fd (-1: kept),
// then execve; exit code
// 127 with a message naming argv[0] when that fails. Also the launcher's (distributed/launch.cpp).
[[noreturn]] void exec_in_child(int parent, int out_fd, int err_fd, char** argv, char** envp);

}  // namespace bv
