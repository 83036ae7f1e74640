// Small filesystem helpers with errors that name the path.
#pragma once

#include <string>

namespace bv::fs {

void mkdirs(const std::string& dir);
bool exists(const std::string& path);
bool is_dir(const std::string& path);
std::string read_file(const std::string& path);
// Writes to PATH.tmp-<pid>, flushes, then renames over PATH: a reader never sees half a file.
void write_file(const std::string& path, const std::string& data);

}  // namespace bv::fs
