// A local launcher in the manner of `torchrun --standalone --nproc_per_node N`: starts N copies
// of a command as ranks of one process group on this machine and watches them.
#pragma once

#include <string>
#include <vector>

namespace bv {

// Runs `argv` (argv[0]: the executable's path, e.g. /proc/self/exe's target) `nproc` times with
// RANK=LOCAL_RANK=i, WORLD_SIZE=LOCAL_WORLD_SIZE=nproc, MASTER_ADDR=127.0.0.1, MASTER_PORT
// (master_port 0: a free port), OMP_NUM_THREADS and BV_THREADS = max(1, cores / nproc) unless
// already set; TORCHELASTIC_* are removed (the children host their own store).
// Rank 0's stdout/stderr pass straight through; other ranks' lines get a "[rank N] " prefix.
// When a rank exits non-zero or by a signal, the others get SIGTERM, then SIGKILL after grace_s.
// SIGINT/SIGTERM sent to the launcher are forwarded to the ranks (then the same grace applies).
// Children die with the launcher (PR_SET_PDEATHSIG).
// Returns 0 when every rank exited 0, else the first failing rank's exit code (128 + signal
// number for a signal).
int launch_local(const std::vector<std::string>& argv, int nproc, int master_port, double grace_s);

// The running executable's path (/proc/self/exe), for relaunching ourselves.
std::string current_executable();

// A TCP port on 127.0.0.1 that was free a moment ago.
int pick_free_port();

}  // namespace bv
