// Small filesystem helpers with errors that name the path.
#pragma once

#include <string>
#include <vector>

namespace bv::fs {

void mkdirs(const std::string& dir);
bool exists(const std::string& path);
bool is_dir(const std::string& path);
// The process's current directory (what relative paths are relative to).
std::string current_dir();
// The names in directory `dir` (not . and ..), sorted; fails naming `dir` when it cannot be read.
std::vector<std::string> list_dir(const std::string& dir);
std::string read_file(const std::string& path);
// Writes to PATH.tmp-<pid>, flushes, then renames over PATH: a reader never sees half a file.
void write_file(const std::string& path, const std::string& data);

// Cuts the file at `path` to `size` bytes (a partly written line is taken back).
void truncate(const std::string& path, long long size);

// One writer per workdir: an exclusive flock on DIR/.bvlua.lock, held until this process exits
// (the kernel releases it when the process dies, so a killed run never leaves a stale lock). The
// file says who holds it ("pid N on host H since TIME"). Fails naming the holder when another
// process has it, except a holder that is this process's parent (`train --nproc`'s launcher,
// which took the lock for its ranks). Taking it again in the same process is a no-op. Returns a
// warning where the filesystem has no flock (some network filesystems), else "".
std::string lock_workdir(const std::string& dir);

// Removes what interrupted writers left in `dir` (not below it), of any process but this one:
// files named "<name>.tmp-<pid>" and checkpoint directories "ckpt-<step>.tmp-<pid>[.del]".
// Call it only while holding the workdir's lock (no other writer can be at work there).
// Returns the names removed.
std::vector<std::string> remove_tmp_leftovers(const std::string& dir);

}  // namespace bv::fs
