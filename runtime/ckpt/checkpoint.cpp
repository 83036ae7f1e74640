#include "ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json_util.h"

namespace bv::ckpt {

namespace {

using json = nlohmann::json;
namespace stdfs = std::filesystem;

constexpr const char* kFormat = "bvlua.checkpoint";
constexpr int kVersion = 2;  // 2: manifest.crc32 covers manifest.json; 1: no such file
constexpr const char* kTensorsFile = "tensors.safetensors";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kManifestCrcFile = "manifest.crc32";
constexpr const char* kLastFile = "LAST";
// Bounds of the trainers' state keys (checkpoint.h): exact in a double, as bv.json reads numbers.
constexpr int64_t kMaxPosition = int64_t(1) << 53;
constexpr int64_t kMaxWorld = int64_t(1) << 31;

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

uint32_t crc_of(const std::string& bytes) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  if (!bytes.empty()) {
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size());
  }
  return static_cast<uint32_t>(crc);
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
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    int err = errno;
    ::rename(aside.c_str(), final_dir.c_str());  // the old one back under its name
    fail("cannot rename '", tmp, "' to '", final_dir, "': ", std::strerror(err));
  }
  std::error_code ec;
  stdfs::remove_all(aside, ec);
}

// An older checkpoint's manifest, for retention (bounded as the loader bounds it): nullopt when
// there is none or it cannot be read or parsed, the latter with a warning naming it.
std::optional<json> read_manifest_json(const std::string& dir, std::vector<std::string>& warnings) {
  std::string path = join(dir, kManifestFile);
  try {
    std::optional<std::string> text = read_checkpoint_file(path, kMaxManifestBytes);
    if (!text) return std::nullopt;
    return parse_json(*text, path);
  } catch (const std::exception& e) {
    warnings.push_back("left checkpoint '" + dir + "' in place: " + e.what());
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
    auto manifest = read_manifest_json(entry.path().string(), warnings);
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

// state.<key>, when present, as a whole number in [lo, hi); an error naming it otherwise.
void check_whole(const json& state, const char* key, int64_t lo, int64_t hi, const char* hi_text,
                 const std::string& dir) {
  if (!state.contains(key)) return;
  const json& v = state[key];
  bool ok = false;
  if (v.is_number_unsigned()) {
    uint64_t x = v.get<uint64_t>();
    ok = x >= static_cast<uint64_t>(lo) && x < static_cast<uint64_t>(hi);
  } else if (v.is_number_integer()) {
    ok = v.get<int64_t>() >= lo && v.get<int64_t>() < hi;
  }
  if (!ok) {
    bad(dir, str("manifest.json: state.", key, " is ", v.dump().substr(0, 64),
                 ", not a whole number in [", lo, ", ", hi_text, ")"));
  }
}

// state.chrono.<key>, when present, as a number in [0, hi).
void check_amount(const json& chrono, const char* key, double hi, const std::string& dir) {
  if (!chrono.contains(key)) return;
  const json& v = chrono[key];
  if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() < hi)) {
    bad(dir, str("manifest.json: state.chrono.", key, " is ", v.dump().substr(0, 64),
                 ", not a number >= 0", hi < HUGE_VAL ? " below 2^53" : ""));
  }
}

// The ranges of the trainers' state keys (checkpoint.h): the CRC does not stop an edit, and a
// resume must not skip 2^64 examples because of one.
void check_state(const json& state, const std::string& dir) {
  if (!state.is_object()) return;  // a caller's own state: its own business
  check_whole(state, "data_position", 0, kMaxPosition, "2^53", dir);
  check_whole(state, "world", 1, kMaxWorld, "2^31", dir);
  if (!state.contains("chrono")) return;
  const json& chrono = state["chrono"];
  if (!chrono.is_object()) bad(dir, "manifest.json: state.chrono is not an object");
  for (const char* key :
       {"accum_program_time", "accum_train_time", "accum_pause_time", "accum_eval_time"}) {
    check_amount(chrono, key, HUGE_VAL, dir);
  }
  check_amount(chrono, "accum_examples_seen", static_cast<double>(kMaxPosition), dir);
}

// The manifest's fields, checked; json::exception for a wrong type anywhere.
void read_manifest_fields(const json& manifest, const std::string& dir, LoadedCheckpoint& out,
                          uint64_t& want_bytes, std::string& want_crc) {
  if (!manifest.is_object()) bad(dir, "manifest.json is not a JSON object");
  if (manifest.value("format", json()) != kFormat) {
    bad(dir, "manifest.json is not a bvlua checkpoint");
  }
  json version = manifest.value("version", json());
  if (version != 1 && version != kVersion) {
    bad(dir, "unsupported manifest version " + version.dump().substr(0, 64) +
                 " (this bvlua reads 1 and " + std::to_string(kVersion) + ")");
  }
  out.version = version.get<int>();
  json step = manifest.value("step", json());
  if (!step.is_number_integer()) bad(dir, "manifest.json has no integer step");
  out.step = step.get<int64_t>();
  if (out.step < 0) bad(dir, str("manifest.json: step ", out.step, " is negative"));
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
  // The state is where training resumes (data position, rng, clock): without it a resume would
  // silently start the data over.
  if (!manifest.contains("state")) {
    bad(dir, "manifest.json has no \"state\" (data position, rng, ...) to resume from");
  }
  check_state(manifest["state"], dir);
  out.state_json = manifest["state"].dump();
}

// A note for the error of a save of `step` that failed before publishing: what a resume has
// instead. (Checkpoints of later steps are not it: they are what this run resumed past, being
// invalid, or it would have resumed from them.)
std::string previous_checkpoint_note(const std::string& workdir, int64_t step) {
  std::vector<int64_t> steps = list_checkpoints(workdir);
  while (!steps.empty() && steps.back() > step) steps.pop_back();
  if (steps.empty()) return "there is no earlier checkpoint in '" + workdir + "' yet";
  return "the previous checkpoint, '" + join(workdir, checkpoint_dir_name(steps.back())) +
         "' (step " + std::to_string(steps.back()) + "), is intact";
}

// The error of a failed save (the cause first), once its tmp directory is gone or not.
[[noreturn]] void save_failed(const std::string& workdir, int64_t step, const std::string& tmp,
                              bool published, const std::string& cause) {
  std::string final_dir = join(workdir, checkpoint_dir_name(step));
  if (published) {
    fail("checkpoint step ", step, " is in place as '", final_dir, "', but ", cause,
         " (it may not survive a power cut)");
  }
  std::error_code ec;
  stdfs::remove_all(tmp, ec);
  std::string removed = ec ? "its partial directory '" + tmp + "' could not be removed (" +
                                 ec.message() + "; the loader ignores it)"
                           : "nothing of it is left";
  fail("cannot save checkpoint step ", step, " in '", workdir, "': ", cause, "; ", removed,
       ", and ", previous_checkpoint_note(workdir, step));
}

}  // namespace

std::optional<std::string> read_checkpoint_file(const std::string& path, uint64_t limit) {
  // O_NONBLOCK: a FIFO under a checkpoint file's name is refused below, not waited on.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return std::nullopt;
  BV_CHECK(fd >= 0, "cannot read '", path, "': ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  BV_CHECK(::fstat(fd, &st) == 0, "cannot read '", path, "': ", std::strerror(errno));
  BV_CHECK(!S_ISDIR(st.st_mode), "'", path, "' is a directory, not a file");
  BV_CHECK(S_ISREG(st.st_mode), "'", path, "' is not a regular file (a FIFO, a device, ...)");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  BV_CHECK(size <= limit, "'", path, "' is ", size, " bytes, over the limit of ", limit,
           " bytes for this file: not read");
  std::string text(static_cast<size_t>(size) + 1, '\0');  // one more: a file that grew shows
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    BV_CHECK(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  BV_CHECK(got <= size, "'", path, "' changed while it was read (", size, " bytes, then more)");
  text.resize(got);
  return text;
}

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
  // Bounded as the loader bounds the manifest, which holds the state one level down: nothing is
  // saved that could not be loaded.
  json state = parse_json(state_json,
                          str("save_checkpoint step ", step, ": the state is not valid JSON"),
                          kMaxJsonDepth - 1);
  std::string final_dir = join(workdir, name);
  std::string tmp = final_dir + pid_suffix();
  bool published = false;
  try {
    fs::mkdirs(workdir);
    remove_stale_tmp(workdir, warnings);
    std::error_code ec;
    stdfs::remove_all(tmp, ec);
    BV_CHECK(::mkdir(tmp.c_str(), 0755) == 0, "cannot create '", tmp, "': ", std::strerror(errno));
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
    // Each write fsyncs its file and the tmp directory; the manifest goes after the tensors, so a
    // directory with a manifest always has its tensors, and its checksum last.
    write_file_durable(join(tmp, kManifestFile), text);
    write_file_durable(join(tmp, kManifestCrcFile), crc_hex(crc_of(text)) + "\n");
    publish(tmp, final_dir);
    published = true;
    sync_dir(workdir);
  } catch (const std::exception& e) {
    save_failed(workdir, step, tmp, published, e.what());
  } catch (...) {
    save_failed(workdir, step, tmp, published, "an unknown error");
  }
  try {
    write_file_durable(join(workdir, kLastFile), name + "\n");
  } catch (const std::exception& e) {
    fail("checkpoint step ", step, " is in place as '", final_dir, "', but LAST could not be ",
         "updated (", e.what(),
         "): a resume takes it all the same, as the newest valid checkpoint");
  }
  apply_retention(workdir, step, warnings);
  return warnings;
}

// The size and CRC-32 of a whole file, read in 8 MiB slices (nothing kept).
FileDigest digest_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BV_CHECK(in, "cannot read '", path, "': ", std::strerror(errno));
  std::vector<char> buf(size_t(8) << 20);
  FileDigest d;
  uLong crc = crc32_z(0L, Z_NULL, 0);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<z_size_t>(n));
    d.bytes += static_cast<uint64_t>(n);
  }
  BV_CHECK(in.eof(), "cannot read '", path, "': ", std::strerror(errno));
  d.crc32 = static_cast<uint32_t>(crc);
  return d;
}

// One of a checkpoint's files (read_checkpoint_file), its errors naming the checkpoint too.
std::optional<std::string> read_in(const std::string& dir, const char* name, uint64_t limit) {
  try {
    return read_checkpoint_file(join(dir, name), limit);
  } catch (const Error& e) {
    bad(dir, e.what());
  }
}

LoadedCheckpoint load_checkpoint_dir(const std::string& dir, bool with_tensors) {
  std::optional<std::string> manifest_text = read_in(dir, kManifestFile, kMaxManifestBytes);
  if (!manifest_text) bad(dir, "no manifest.json (incomplete save?)");
  const std::string& text = *manifest_text;
  json manifest;
  try {
    manifest = parse_json(text, "manifest.json is not valid JSON");
  } catch (const Error& e) {
    bad(dir, e.what());
  }
  // manifest.crc32: required from version 2 on, and checked whenever it is there (so that a
  // manifest edited down to "version": 1 is caught too).
  std::optional<std::string> crc_text = read_in(dir, kManifestCrcFile, kMaxNameFileBytes);
  bool has_crc = crc_text.has_value();
  if (has_crc) {
    std::string recorded = *crc_text;
    size_t end = recorded.find_last_not_of(" \t\r\n");
    recorded = end == std::string::npos ? "" : recorded.substr(0, end + 1);
    std::string actual = crc_hex(crc_of(text));
    if (recorded != actual) {
      bad(dir, "manifest.json fails its checksum (crc32 " + actual + ", manifest.crc32 says '" +
                   recorded.substr(0, 16) + "'): the manifest was changed or is corrupt");
    }
  }
  LoadedCheckpoint out;
  uint64_t want_bytes = 0;
  std::string want_crc;
  try {
    read_manifest_fields(manifest, dir, out, want_bytes, want_crc);
  } catch (const json::exception& e) {
    bad(dir, std::string("manifest.json is malformed: ") + e.what());
  }
  if (out.version >= 2 && !has_crc) {
    bad(dir, "manifest.crc32 is missing (a version-" + std::to_string(out.version) +
                 " checkpoint records its manifest's checksum there)");
  }
  if (out.version == 1 && !has_crc) {
    out.warning = "checkpoint '" + dir +
                  "' is a version-1 checkpoint: its manifest (step, data position, rng) has no "
                  "checksum and was loaded unverified";
  }
  std::string tensors_path = join(dir, kTensorsFile);
  struct stat st;
  if (::stat(tensors_path.c_str(), &st) != 0) {
    if (errno == ENOENT) bad(dir, "tensors.safetensors is missing");
    bad(dir, str("cannot read '", tensors_path, "': ", std::strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) != want_bytes) {
    bad(dir, str("tensors.safetensors is ", st.st_size, " bytes, the manifest says ", want_bytes));
  }
  FileDigest digest;
  if (with_tensors) {
    out.tensors = load_safetensors(tensors_path, nullptr, &digest);
  } else {
    digest = digest_file(tensors_path);
  }
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

void sync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BV_CHECK(fd >= 0, "cannot open '", path, "' to sync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  BV_CHECK(rc == 0, "cannot sync '", path, "': ", std::strerror(err));
}

std::optional<LoadedCheckpoint> load_latest_checkpoint(const std::string& workdir,
                                                       bool with_tensors) {
  struct stat st;
  if (::stat(workdir.c_str(), &st) != 0) {
    // A workdir that cannot be looked at is not an empty one: the run must not start over.
    BV_CHECK(errno == ENOENT, "cannot read the checkpoints of '", workdir,
             "': ", std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISDIR(st.st_mode)) return std::nullopt;
  std::vector<std::string> names = fs::list_dir(workdir);  // fails naming it when unreadable
  // What LAST says: a checkpoint name, or a problem with LAST itself.
  std::string last_name, last_problem;
  bool has_last = true;
  std::string text;
  try {
    std::optional<std::string> last =
        read_checkpoint_file(join(workdir, kLastFile), kMaxNameFileBytes);
    has_last = last.has_value();
    if (last) text = *last;
  } catch (const Error& e) {
    last_problem = e.what();
  }
  if (has_last) {
    size_t end = text.find_last_not_of(" \t\r\n");
    std::string name = end == std::string::npos ? "" : text.substr(0, end + 1);
    if (last_problem.empty() && !parse_dir_name(name)) {
      last_problem = "LAST holds '" + name.substr(0, 64) + "', not a checkpoint name";
    } else if (last_problem.empty()) {
      last_name = name;
    }
  }
  // Every ckpt-* directory, newest first, and LAST's target even when it is not there (so that
  // the error below names it). Not only those with a manifest: the errors name incomplete ones.
  std::vector<std::pair<int64_t, std::string>> candidates;
  for (const std::string& name : names) {
    auto step = parse_dir_name(name);
    if (step && (name == last_name || fs::is_dir(join(workdir, name)))) {
      candidates.emplace_back(*step, name);
    }
  }
  if (!last_name.empty() && std::none_of(candidates.begin(), candidates.end(),
                                         [&](const auto& c) { return c.second == last_name; })) {
    candidates.emplace_back(*parse_dir_name(last_name), last_name);
  }
  if (!has_last && candidates.empty()) return std::nullopt;
  std::sort(candidates.rbegin(), candidates.rend());

  // The newest that verifies; the newer ones that fail are named in the warning.
  std::vector<std::string> skipped;
  std::string last_failure;  // why LAST's target failed, when it was tried
  for (const auto& [step, name] : candidates) {
    LoadedCheckpoint out;
    try {
      out = load_checkpoint_dir(join(workdir, name), with_tensors);
    } catch (const std::exception& e) {
      if (name == last_name) {
        last_failure = e.what();
      } else {
        skipped.push_back(e.what());
      }
      continue;
    }
    std::vector<std::string> warnings;
    if (!has_last) {
      warnings.push_back("no LAST file in '" + workdir + "'; loaded " + name +
                         ", the newest valid checkpoint");
    } else if (!last_problem.empty()) {
      warnings.push_back("LAST could not be used (" + last_problem + "); loaded " + name +
                         ", the newest valid checkpoint, instead");
    } else if (!last_failure.empty()) {
      warnings.push_back("LAST names " + last_name + ", which could not be used (" + last_failure +
                         "); loaded " + name + ", the newest valid checkpoint, instead");
    } else if (last_name != name) {
      warnings.push_back(
          "LAST in '" + workdir + "' names " + last_name + ", but " + name +
          " is newer and valid (a run stopped before it updated LAST, or LAST was edited): "
          "resuming from " +
          name + ", the newest valid checkpoint; to resume from " + last_name +
          ", move the newer ckpt-* directories out of the workdir");
    }
    for (const auto& problem : skipped) warnings.push_back("skipped " + problem);
    if (!out.warning.empty()) warnings.push_back(out.warning);
    out.warning.clear();
    for (size_t i = 0; i < warnings.size(); ++i) out.warning += (i ? "; " : "") + warnings[i];
    return out;
  }
  std::string message = "no valid checkpoint in '" + workdir + "':";
  if (!last_problem.empty()) message += " " + last_problem + ";";
  if (!last_failure.empty()) message += " " + last_failure + ";";
  for (const auto& p : skipped) message += " " + p + ";";
  fail(message);
}

}  // namespace bv::ckpt
