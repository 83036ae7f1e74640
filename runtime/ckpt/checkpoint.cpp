#include "ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/fs.h"

namespace bv::ckpt {

namespace {

using json = nlohmann::json;
namespace stdfs = std::filesystem;

constexpr const char* kFormat = "bvlua.checkpoint";
constexpr int kVersion = 1;
constexpr const char* kTensorsFile = "tensors.safetensors";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLastFile = "LAST";
// The manifest holds the caller's state (data position, rng, ...): small, but not tiny.
constexpr uint64_t kMaxManifestBytes = uint64_t(256) << 20;

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

std::string pid_suffix() { return ".tmp-" + std::to_string(::getpid()); }

// "ckpt-000000042" -> 42; nullopt for anything else (tmp leftovers, other files). Only the
// canonical spelling counts, so a name maps to exactly one step and back.
std::optional<int64_t> parse_dir_name(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0) return std::nullopt;
  std::string digits = name.substr(5);
  if (digits.size() < 9 || digits.size() > 18) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int64_t step = std::stoll(digits);
  if (checkpoint_dir_name(step) != name) return std::nullopt;
  return step;
}

std::string crc_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

// The pid in "<anything>.tmp-<pid>[.suffix]", or -1.
long tmp_owner(const std::string& name) {
  size_t at = name.rfind(".tmp-");
  if (at == std::string::npos) return -1;
  size_t i = at + 5, j = i;
  while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j - i > 9) return -1;
  return std::stol(name.substr(i, j - i));
}

bool process_alive(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // A killed writer that its parent has not reaped yet is a zombie: it still holds its pid (for
  // seconds when the parent is a container's init), but it will never finish its save.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  size_t close = text.rfind(')');
  if (close != std::string::npos && close + 2 < text.size()) {
    char state = text[close + 2];
    if (state == 'Z' || state == 'X') return false;
  }
  return true;
}

// Deletes a directory so that it never exists half-deleted under a checkpoint's name: it is first
// renamed to a *.tmp-<pid> name, which loaders ignore and the next save cleans up if we die.
void remove_checkpoint_dir(const std::string& workdir, const std::string& name,
                           std::vector<std::string>& warnings) {
  std::string trash = join(workdir, name + pid_suffix() + ".del");
  std::error_code ec;
  stdfs::rename(join(workdir, name), trash, ec);
  if (ec) {
    warnings.push_back("could not delete old checkpoint '" + join(workdir, name) +
                       "': " + ec.message());
    return;
  }
  stdfs::remove_all(trash, ec);
  if (ec) warnings.push_back("could not delete '" + trash + "': " + ec.message());
}

// Removes checkpoint leftovers (ckpt-*.tmp-<pid>*, LAST.tmp-<pid>) of processes that are gone.
void remove_stale_tmp(const std::string& workdir, std::vector<std::string>& warnings) {
  std::error_code ec;
  for (const auto& entry : stdfs::directory_iterator(workdir, ec)) {
    std::string name = entry.path().filename().string();
    bool ours = name.rfind("ckpt-", 0) == 0 || name.rfind(std::string(kLastFile) + ".tmp-", 0) == 0;
    if (!ours) continue;
    long pid = tmp_owner(name);
    if (pid <= 0 || pid == ::getpid() || process_alive(pid)) continue;
    std::error_code rm_ec;
    stdfs::remove_all(entry.path(), rm_ec);
    if (rm_ec) {
      warnings.push_back("could not remove stale '" + entry.path().string() +
                         "': " + rm_ec.message());
    }
  }
}

// Puts the finished tmp directory at `final_dir`. An existing same-step directory is swapped out
// atomically (renameat2 RENAME_EXCHANGE), so the name never points at nothing; on filesystems
// without it, the old one is first moved aside under a tmp name.
void publish(const std::string& tmp, const std::string& final_dir) {
  if (::rename(tmp.c_str(), final_dir.c_str()) == 0) return;
  BV_CHECK(errno == ENOTEMPTY || errno == EEXIST, "cannot rename '", tmp, "' to '", final_dir,
           "': ", std::strerror(errno));
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ec;
    stdfs::remove_all(tmp, ec);  // now the old checkpoint; the next save cleans it if this fails
    return;
  }
  std::string aside = final_dir + pid_suffix() + ".old";
  BV_CHECK(::rename(final_dir.c_str(), aside.c_str()) == 0, "cannot move '", final_dir,
           "' aside: ", std::strerror(errno));
  BV_CHECK(::rename(tmp.c_str(), final_dir.c_str()) == 0, "cannot rename '", tmp, "' to '",
           final_dir, "': ", std::strerror(errno));
  std::error_code ec;
  stdfs::remove_all(aside, ec);
}

std::optional<json> read_manifest_json(const std::string& dir) {
  try {
    return json::parse(fs::read_file(join(dir, kManifestFile)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Deletes every other checkpoint whose manifest says keep=false. Failures are warnings: the new
// checkpoint is already safe, and a leftover only costs disk space.
void apply_retention(const std::string& workdir, int64_t saved_step,
                     std::vector<std::string>& warnings) {
  std::error_code ec;
  std::vector<std::string> doomed;
  for (const auto& entry : stdfs::directory_iterator(workdir, ec)) {
    std::string name = entry.path().filename().string();
    auto step = parse_dir_name(name);
    if (!step || *step == saved_step || !entry.is_directory(ec)) continue;
    auto manifest = read_manifest_json(entry.path().string());
    // An unreadable manifest is left alone: it may be a kept checkpoint someone can repair.
    if (!manifest || !manifest->is_object() || !manifest->contains("keep")) continue;
    const json& keep = (*manifest)["keep"];
    if (keep.is_boolean() && !keep.get<bool>()) doomed.push_back(name);
  }
  for (const auto& name : doomed) remove_checkpoint_dir(workdir, name, warnings);
}

[[noreturn]] void bad(const std::string& dir, const std::string& what) {
  fail("checkpoint '", dir, "': ", what);
}

// The manifest's fields, checked; json::exception for a wrong type anywhere.
void read_manifest_fields(const json& manifest, const std::string& dir, LoadedCheckpoint& out,
                          uint64_t& want_bytes, std::string& want_crc) {
  if (!manifest.is_object()) bad(dir, "manifest.json is not a JSON object");
  if (manifest.value("format", json()) != kFormat) {
    bad(dir, "manifest.json is not a bvlua checkpoint");
  }
  if (manifest.value("version", json()) != kVersion) {
    bad(dir, "unsupported manifest version " + manifest.value("version", json()).dump());
  }
  json step = manifest.value("step", json());
  if (!step.is_number_integer()) bad(dir, "manifest.json has no integer step");
  out.step = step.get<int64_t>();
  auto dir_step = parse_dir_name(stdfs::path(dir).filename().string());
  if (dir_step && *dir_step != out.step) {
    bad(dir, str("manifest step ", out.step, " does not match the directory name"));
  }
  out.keep = manifest.value("keep", json(false)) == json(true);
  json entry = manifest.at("files").at(kTensorsFile);
  if (!entry.is_object() || !entry.value("bytes", json()).is_number_unsigned() ||
      !entry.value("crc32", json()).is_string()) {
    bad(dir, "manifest.json does not record the size and crc32 of tensors.safetensors");
  }
  want_bytes = entry["bytes"].get<uint64_t>();
  want_crc = entry["crc32"].get<std::string>();
  out.state_json = manifest.contains("state") ? manifest["state"].dump() : "{}";
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  BV_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%09lld", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> save_checkpoint(
    const std::string& workdir, int64_t step,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::string& state_json,
    bool keep) {
  std::vector<std::string> warnings;
  std::string name = checkpoint_dir_name(step);
  json state;
  try {
    state = json::parse(state_json);
  } catch (const json::exception& e) {
    fail("save_checkpoint step ", step, ": the state is not valid JSON: ", e.what());
  }
  fs::mkdirs(workdir);
  remove_stale_tmp(workdir, warnings);

  std::string final_dir = join(workdir, name);
  std::string tmp = final_dir + pid_suffix();
  std::error_code ec;
  stdfs::remove_all(tmp, ec);
  BV_CHECK(::mkdir(tmp.c_str(), 0755) == 0, "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    FileDigest digest = save_safetensors_digest(
        join(tmp, kTensorsFile), tensors, {{"format", kFormat}, {"step", std::to_string(step)}});
    json manifest = {
        {"format", kFormat},
        {"version", kVersion},
        {"step", step},
        {"keep", keep},
        {"files", {{kTensorsFile, {{"bytes", digest.bytes}, {"crc32", crc_hex(digest.crc32)}}}}},
        {"state", std::move(state)},
    };
    std::string text;
    try {
      text = manifest.dump(2) + "\n";
    } catch (const json::exception& e) {
      fail("save_checkpoint step ", step, ": the state is not valid UTF-8 JSON: ", e.what());
    }
    // Each write fsyncs its file and the tmp directory; the manifest goes last, so a directory
    // with a manifest always has its tensors.
    write_file_durable(join(tmp, kManifestFile), text);
    publish(tmp, final_dir);
    sync_dir(workdir);
  } catch (...) {
    stdfs::remove_all(tmp, ec);
    throw;
  }
  write_file_durable(join(workdir, kLastFile), name + "\n");
  apply_retention(workdir, step, warnings);
  return warnings;
}

LoadedCheckpoint load_checkpoint_dir(const std::string& dir) {
  std::string manifest_path = join(dir, kManifestFile);
  struct stat st;
  if (::stat(manifest_path.c_str(), &st) != 0) bad(dir, "no manifest.json (incomplete save?)");
  if (static_cast<uint64_t>(st.st_size) > kMaxManifestBytes) {
    bad(dir, str("manifest.json is ", st.st_size, " bytes, over the limit"));
  }
  json manifest;
  try {
    manifest = json::parse(fs::read_file(manifest_path));
  } catch (const json::exception& e) {
    bad(dir, std::string("manifest.json is not valid JSON: ") + e.what());
  }
  LoadedCheckpoint out;
  uint64_t want_bytes = 0;
  std::string want_crc;
  try {
    read_manifest_fields(manifest, dir, out, want_bytes, want_crc);
  } catch (const json::exception& e) {
    bad(dir, std::string("manifest.json is malformed: ") + e.what());
  }
  std::string tensors_path = join(dir, kTensorsFile);
  if (::stat(tensors_path.c_str(), &st) != 0) bad(dir, "tensors.safetensors is missing");
  if (static_cast<uint64_t>(st.st_size) != want_bytes) {
    bad(dir, str("tensors.safetensors is ", st.st_size, " bytes, the manifest says ", want_bytes));
  }
  FileDigest digest;
  out.tensors = load_safetensors(tensors_path, nullptr, &digest);
  if (crc_hex(digest.crc32) != want_crc || digest.bytes != want_bytes) {
    bad(dir, "tensors.safetensors fails its checksum (crc32 " + crc_hex(digest.crc32) +
                 ", manifest says " + want_crc + "): the file is corrupt");
  }
  out.path = dir;
  return out;
}

std::vector<int64_t> list_checkpoints(const std::string& workdir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : stdfs::directory_iterator(workdir, ec)) {
    auto step = parse_dir_name(entry.path().filename().string());
    if (step && entry.is_directory(ec) && fs::exists(join(entry.path().string(), kManifestFile))) {
      steps.push_back(*step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& workdir) {
  if (!fs::is_dir(workdir)) return std::nullopt;
  std::vector<std::string> problems;
  std::string last_name;
  bool has_last = fs::exists(join(workdir, kLastFile));
  if (has_last) {
    std::string text;
    try {
      text = fs::read_file(join(workdir, kLastFile));
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
    size_t end = text.find_last_not_of(" \t\r\n");
    last_name = end == std::string::npos ? "" : text.substr(0, end + 1);
    if (!parse_dir_name(last_name)) {
      problems.push_back("LAST holds '" + last_name.substr(0, 64) + "', not a checkpoint name");
      last_name.clear();
    } else {
      try {
        return load_checkpoint_dir(join(workdir, last_name));
      } catch (const std::exception& e) {
        problems.push_back(e.what());
      }
    }
  }
  // Newest first; every directory, not only those with a manifest, so the error below can name
  // a directory that is incomplete.
  std::vector<std::pair<int64_t, std::string>> candidates;
  std::error_code ec;
  for (const auto& entry : stdfs::directory_iterator(workdir, ec)) {
    std::string name = entry.path().filename().string();
    auto step = parse_dir_name(name);
    if (step && name != last_name && entry.is_directory(ec)) candidates.emplace_back(*step, name);
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [step, name] : candidates) {
    try {
      LoadedCheckpoint out = load_checkpoint_dir(join(workdir, name));
      out.warning = has_last ? "LAST could not be used (" + problems.front() + "); loaded " + name +
                                   ", the newest valid checkpoint, instead"
                             : "no LAST file in '" + workdir + "'; loaded " + name +
                                   ", the newest valid checkpoint";
      if (problems.size() > 1) {
        out.warning += "; also skipped:";
        for (size_t i = 1; i < problems.size(); ++i) out.warning += " " + problems[i] + ";";
      }
      return out;
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (!has_last && candidates.empty()) return std::nullopt;
  std::string message = "no valid checkpoint in '" + workdir + "':";
  for (const auto& p : problems) message += " " + p + ";";
  fail(message);
}

}  // namespace bv::ckpt
