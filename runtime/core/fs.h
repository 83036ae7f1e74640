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

}  // namespace bv::fs
