#include "ckpt/index.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ckpt/checkpoint.h"
#include "ckpt/npz.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json_util.h"

namespace bv::ckpt {

struct CheckpointIndex::Source {
  std::vector<NpzEntry> npz;        // parallel to entries_ (npz files)
  std::vector<TensorInfo> tensors;  // parallel to entries_ (safetensors files)
  uint64_t data_start = 0;          // safetensors: file offset of the data buffer
};

namespace {

constexpr const char* kTensorsFile = "tensors.safetensors";
constexpr const char* kManifestFile = "manifest.json";

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  BV_CHECK(::stat(path.c_str(), &st) == 0, "cannot open checkpoint '", path,
           "': ", std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

// The first bytes tell the format: a zip (npz) starts with "PK", a safetensors file with an
// 8-byte header length and then the header's '{'.
std::string sniff_format(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BV_CHECK(fd >= 0, "cannot open checkpoint '", path, "': ", std::strerror(errno));
  unsigned char head[9] = {0};
  ssize_t n = ::pread(fd, head, sizeof head, 0);
  ::close(fd);
  if (n >= 4 && head[0] == 'P' && head[1] == 'K') return "npz";
  if (n == 9 && head[8] == '{') return "safetensors";
  fail("checkpoint '", path, "' is neither an npz (zip) nor a safetensors file");
}

// A training checkpoint's step from its manifest; -1 when the manifest does not say (or is
// missing, unreadable or over the loader's limit: the tensors can be looked at all the same).
int64_t manifest_step(const std::string& dir) {
  try {
    std::string path = join(dir, kManifestFile);
    std::optional<std::string> text = read_checkpoint_file(path, kMaxManifestBytes);
    if (!text) return -1;
    auto manifest = parse_json(*text, path);
    if (manifest.is_object() && manifest.contains("step") && manifest["step"].is_number_integer())
      return manifest["step"].get<int64_t>();
  } catch (const std::exception&) {
  }
  return -1;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Names sharing the longest "a/b/" prefix with `name`, for the unknown-name error.
std::string near_names(const std::vector<IndexEntry>& entries, const std::string& name) {
  std::string prefix = name;
  while (prefix.size() >= 2) {
    size_t slash = prefix.rfind('/', prefix.size() - 2);
    if (slash == std::string::npos) break;
    prefix = prefix.substr(0, slash + 1);
    std::vector<std::string> hits;
    for (const auto& e : entries)
      if (e.name.compare(0, prefix.size(), prefix) == 0) hits.push_back(e.name);
    if (hits.empty()) continue;
    std::string out = "; names under '" + prefix + "': ";
    for (size_t i = 0; i < hits.size() && i < 6; ++i) out += (i ? ", " : "") + hits[i];
    if (hits.size() > 6) out += str(", ... (", hits.size(), " in all)");
    return out;
  }
  return "";
}

void pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    BV_CHECK(r >= 0, "cannot read '", path, "': ", std::strerror(errno));
    BV_CHECK(r > 0, "checkpoint '", path, "': unexpected end of file at byte ", offset);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

at::Tensor read_safetensors_tensor(const std::string& path, const TensorInfo& info,
                                   uint64_t data_start) {
  at::Tensor t = at::empty(info.shape, at::TensorOptions().dtype(info.dtype));
  size_t nbytes = static_cast<size_t>(info.end - info.begin);
  if (nbytes == 0) return t;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BV_CHECK(fd >= 0, "cannot open checkpoint '", path, "': ", std::strerror(errno));
  try {
    pread_exact(fd, t.data_ptr(), nbytes, data_start + info.begin, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (info.dtype == at::kBool) {
    // libtorch assumes bools are 0 or 1; any other byte would be undefined behaviour later.
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    BV_CHECK(std::all_of(p, p + nbytes, [](unsigned char c) { return c <= 1; }), "checkpoint '",
             path, "': tensor '", info.name, "': BOOL data holds a byte other than 0 or 1");
  }
  return t;
}

}  // namespace

std::string latest_checkpoint_dir(const std::string& workdir) {
  std::vector<int64_t> steps = list_checkpoints(workdir);
  auto usable = [&](const std::string& name) {
    return fs::exists(join(join(workdir, name), kTensorsFile));
  };
  // LAST bounded as the loader bounds it: a huge one is an error naming it, never read.
  if (std::optional<std::string> text =
          read_checkpoint_file(join(workdir, "LAST"), kMaxNameFileBytes)) {
    std::string last = trim(*text);
    for (int64_t s : steps)
      if (checkpoint_dir_name(s) == last && usable(last)) return join(workdir, last);
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    std::string name = checkpoint_dir_name(*it);
    if (usable(name)) return join(workdir, name);
  }
  return "";
}

CheckpointIndex CheckpointIndex::open(const std::string& path) {
  CheckpointIndex index;
  std::string file = path;
  if (fs::is_dir(path)) {
    std::string dir = path;
    if (!fs::exists(join(path, kTensorsFile)) || !fs::exists(join(path, kManifestFile))) {
      dir = latest_checkpoint_dir(path);
      BV_CHECK(!dir.empty(), "'", path, "' holds no checkpoint (no ckpt-*/ directory with a ",
               kManifestFile, " and ", kTensorsFile, ")");
    }
    file = join(dir, kTensorsFile);
    index.step_ = manifest_step(dir);
  }
  index.file_ = file;
  index.format_ = sniff_format(file);
  index.file_size_ = file_size(file);
  auto source = std::make_shared<Source>();
  if (index.format_ == "npz") {
    std::vector<NpzEntry> npz = npz_index(file);
    std::sort(npz.begin(), npz.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (const NpzEntry& e : npz) index.entries_.push_back({e.name, e.dtype, e.shape, e.nbytes});
    source->npz = std::move(npz);
  } else {
    SafetensorsFile header = read_safetensors_header(file);
    std::sort(header.tensors.begin(), header.tensors.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    for (const TensorInfo& t : header.tensors)
      index.entries_.push_back({t.name, t.dtype, t.shape, t.end - t.begin});
    source->tensors = std::move(header.tensors);
    source->data_start = header.data_start;
  }
  index.source_ = std::move(source);
  return index;
}

const IndexEntry* CheckpointIndex::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const IndexEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

at::Tensor CheckpointIndex::load(const std::string& name) const {
  const IndexEntry* e = find(name);
  BV_CHECK(e, "checkpoint '", file_, "' has no tensor '", name, "'", near_names(entries_, name));
  BV_CHECK(file_size(file_) == file_size_, "checkpoint '", file_, "' changed since it was opened (",
           file_size_, " bytes then, ", file_size(file_), " now); open it again");
  size_t i = static_cast<size_t>(e - entries_.data());
  if (format_ == "npz") return load_npz_entry(file_, source_->npz[i]);
  return read_safetensors_tensor(file_, source_->tensors[i], source_->data_start);
}

}  // namespace bv::ckpt
