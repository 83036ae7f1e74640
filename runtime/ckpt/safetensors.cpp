#include "ckpt/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/tensor_util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors stores little-endian data; this reader and writer assume a little-endian host"
#endif

namespace bv::ckpt {

namespace {

using json = nlohmann::json;

struct DtypeEntry {
  const char* code;
  c10::ScalarType type;
  uint64_t itemsize;
};

constexpr DtypeEntry kDtypes[] = {
    {"F64", at::kDouble, 8},    {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2},
    {"BF16", at::kBFloat16, 2}, {"I64", at::kLong, 8},  {"I32", at::kInt, 4},
    {"I16", at::kShort, 2},     {"I8", at::kChar, 1},   {"U8", at::kByte, 1},
    {"BOOL", at::kBool, 1},
};

const DtypeEntry* find_dtype(const std::string& code) {
  for (const auto& d : kDtypes) {
    if (code == d.code) return &d;
  }
  return nullptr;
}

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += std::string(s.empty() ? "" : " ") + d.code;
  return s;
}

std::string errno_text() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Owns a file descriptor.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& other) noexcept : fd(other.fd) { other.fd = -1; }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  // close() reports write-back errors on some filesystems, so writers check it.
  int release_close() {
    int r = ::close(fd);
    fd = -1;
    return r;
  }
};

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    BV_CHECK(w > 0, "cannot write '", path, "': ", errno_text());
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes at `offset`; a short read means the file shrank under us.
void pread_all(int fd, void* data, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    BV_CHECK(r >= 0, "cannot read '", path, "': ", errno_text());
    BV_CHECK(r > 0, "safetensors file '", path, "': unexpected end of file at byte ", offset);
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;  // zlib returns the initial value for a null buffer (empty tensors)
  return static_cast<uint32_t>(
      crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(n)));
}

// Writes to a file descriptor while keeping the size and CRC-32 of what went out.
struct DigestWriter {
  int fd;
  const std::string& path;
  FileDigest digest;
  void put(const void* data, size_t n) {
    write_all(fd, data, n, path);
    digest.crc32 = crc_update(digest.crc32, data, n);
    digest.bytes += n;
  }
};

// ---------------------------------------------------------------------------------------------
// Header parsing

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  fail("safetensors file '", path, "': ", what);
}

// nlohmann keeps the last of duplicate keys silently; a file with two entries for one name is
// ambiguous (two readers may disagree on it), so the parser callback rejects it. The callback
// also bounds nesting: a valid header never goes deeper than root -> entry -> shape array.
json parse_header_json(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth > 2) bad(path, "header JSON is nested deeper than a safetensors header can be");
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) {
          bad(path, "duplicate key \"" + key + "\" in the header");
        }
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text, callback);
  } catch (const json::exception& e) {
    bad(path, std::string("header is not valid JSON: ") + e.what());
  }
}

// A non-negative JSON integer (nlohmann stores those as unsigned).
uint64_t json_size(const json& v, const std::string& path, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) bad(path, what + " is negative (" + v.dump() + ")");
  bad(path, what + " must be a non-negative integer, got " + v.dump());
}

TensorInfo parse_entry(const std::string& name, const json& e, const std::string& path) {
  std::string where = "tensor '" + name + "'";
  if (!e.is_object()) bad(path, where + ": entry must be an object, got " + e.dump());
  for (const auto& item : e.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      bad(path, where + ": unexpected key \"" + item.key() + "\"");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(key)) bad(path, where + ": missing \"" + key + "\"");
  }
  TensorInfo info;
  info.name = name;
  const json& dtype = e.at("dtype");
  if (!dtype.is_string()) bad(path, where + ": dtype must be a string, got " + dtype.dump());
  info.dtype_code = dtype.get<std::string>();
  const DtypeEntry* d = find_dtype(info.dtype_code);
  if (!d) {
    bad(path, where + ": unknown or unsupported dtype \"" + info.dtype_code +
                  "\" (known: " + known_dtypes() + ")");
  }
  info.dtype = d->type;

  const json& shape = e.at("shape");
  if (!shape.is_array()) bad(path, where + ": shape must be an array, got " + shape.dump());
  // numel * itemsize must fit in 64 bits (and numel in int64 for libtorch); checked before any
  // allocation, so [2^40, 2^40] is an error, not an attempt.
  uint64_t nbytes = d->itemsize;
  for (const auto& dim : shape) {
    uint64_t n = json_size(dim, path, where + ": shape entry");
    BV_CHECK(n <= static_cast<uint64_t>(INT64_MAX), "safetensors file '", path, "': ", where,
             ": shape ", shape.dump(), " is too large");
    if (__builtin_mul_overflow(nbytes, n, &nbytes) || nbytes > static_cast<uint64_t>(INT64_MAX)) {
      bad(path, where + ": shape " + shape.dump() + " is too large");
    }
    info.shape.push_back(static_cast<int64_t>(n));
  }

  const json& offsets = e.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    bad(path, where + ": data_offsets must be [begin, end], got " + offsets.dump());
  }
  info.begin = json_size(offsets[0], path, where + ": data_offsets begin");
  info.end = json_size(offsets[1], path, where + ": data_offsets end");
  if (info.end < info.begin) bad(path, where + ": data_offsets " + offsets.dump() + " end < begin");
  if (info.end - info.begin != nbytes) {
    bad(path, str(where, ": data_offsets ", offsets.dump(), " span ", info.end - info.begin,
                  " bytes but ", info.dtype_code, " ", shape.dump(), " needs ", nbytes));
  }
  return info;
}

// Reads the 8-byte length and the header; validates everything against the file size.
SafetensorsFile read_header(int fd, const std::string& path, std::string* raw_prefix) {
  struct stat st;
  BV_CHECK(::fstat(fd, &st) == 0, "cannot stat '", path, "': ", errno_text());
  BV_CHECK(S_ISREG(st.st_mode), "safetensors file '", path, "': not a regular file");
  SafetensorsFile file;
  file.file_size = static_cast<uint64_t>(st.st_size);
  if (file.file_size < 8) bad(path, str("file is ", file.file_size, " bytes, too short"));
  unsigned char len_bytes[8];
  pread_all(fd, len_bytes, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeader) {
    bad(path, str("header length ", n, " is over the limit of ", kMaxSafetensorsHeader));
  }
  if (n > file.file_size - 8) {
    bad(path, str("header length ", n, " is larger than the file (", file.file_size, " bytes)"));
  }
  std::string text(n, '\0');
  pread_all(fd, text.data(), n, 8, path);
  if (n == 0 || text[0] != '{') bad(path, "header must be a JSON object starting with '{'");
  // nlohmann stops at a NUL as if the input ended, which would let bytes after it through.
  if (text.find('\0') != std::string::npos) bad(path, "header contains a NUL byte");
  json header = parse_header_json(text, path);
  if (!header.is_object()) bad(path, "header must be a JSON object");
  file.data_start = 8 + n;
  uint64_t buffer = file.file_size - file.data_start;

  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) bad(path, "__metadata__ must be an object of strings");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string()) {
          bad(path, "__metadata__ value for \"" + m.key() + "\" must be a string, got " +
                        m.value().dump());
        }
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    file.tensors.push_back(parse_entry(item.key(), item.value(), path));
  }

  // The data buffer must be exactly the tensors, back to back from 0: no holes (hidden data),
  // no overlaps (one byte read as two tensors), nothing after the last one.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : file.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const TensorInfo* t : by_offset) {
    if (t->end > buffer) {
      bad(path, str("tensor '", t->name, "': data_offsets [", t->begin, ", ", t->end,
                    "] are outside the data buffer of ", buffer, " bytes"));
    }
    if (t->begin != expected) {
      bad(path, str("tensor '", t->name, "': data_offsets [", t->begin, ", ", t->end, "] ",
                    t->begin < expected ? "overlap the previous tensor" : "leave a hole",
                    " (expected begin ", expected, ")"));
    }
    expected = t->end;
  }
  if (expected != buffer) {
    bad(path, str(buffer - expected, " trailing bytes after the last tensor (data buffer is ",
                  buffer, " bytes, tensors cover ", expected, ")"));
  }
  if (raw_prefix) {
    raw_prefix->assign(reinterpret_cast<const char*>(len_bytes), 8);
    raw_prefix->append(text);
  }
  return file;
}

Fd open_for_reading(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  BV_CHECK(fd.fd >= 0, "cannot open safetensors file '", path, "': ", errno_text());
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writing

std::string safetensors_dtype_code(c10::ScalarType dtype) {
  for (const auto& d : kDtypes) {
    if (d.type == dtype) return d.code;
  }
  fail("safetensors cannot store dtype ", dtype_name(dtype), " (supported: ", known_dtypes(), ")");
}

FileDigest save_safetensors_digest(const std::string& path, const NamedTensors& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  // Name order, as the format's reference writer does; a map also finds duplicates.
  std::map<std::string, const at::Tensor*> sorted;
  for (const auto& [name, t] : tensors) {
    BV_CHECK(!name.empty(), "save_safetensors '", path, "': empty tensor name");
    BV_CHECK(name != "__metadata__", "save_safetensors '", path,
             "': '__metadata__' is reserved and cannot name a tensor");
    BV_CHECK(t.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    BV_CHECK(sorted.emplace(name, &t).second, "save_safetensors '", path, "': tensor '", name,
             "' appears twice");
  }
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : sorted) {
    std::string code;
    try {
      code = safetensors_dtype_code(t->scalar_type());
    } catch (const Error& e) {
      fail("save_safetensors '", path, "': tensor '", name, "': ", e.what());
    }
    uint64_t nbytes = static_cast<uint64_t>(t->numel()) * t->element_size();
    header[name] = {
        {"dtype", code}, {"shape", t->sizes().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail("save_safetensors '", path,
         "': a tensor name or metadata string is not UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned
  BV_CHECK(text.size() <= kMaxSafetensorsHeader, "save_safetensors '", path, "': header of ",
           text.size(), " bytes is over the format's limit");

  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  BV_CHECK(fd.fd >= 0, "cannot write '", path, "': ", errno_text());
  try {
    DigestWriter out{fd.fd, tmp, {}};
    unsigned char len_bytes[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));
    out.put(len_bytes, 8);
    out.put(text.data(), text.size());
    for (const auto& [name, t] : sorted) {
      // One tensor at a time on the host, so a GPU model never needs a second full copy.
      at::Tensor host = t->to(at::kCPU).contiguous();
      size_t nbytes = static_cast<size_t>(host.numel()) * host.element_size();
      if (nbytes > 0) out.put(host.data_ptr(), nbytes);
    }
    BV_CHECK(::fsync(fd.fd) == 0, "cannot write '", path, "': fsync: ", errno_text());
    BV_CHECK(fd.release_close() == 0, "cannot write '", path, "': close: ", errno_text());
    BV_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot write '", path,
             "': rename: ", errno_text());
    sync_dir(parent_dir(path));
    return out.digest;
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  save_safetensors_digest(path, tensors, metadata);
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile read_safetensors_header(const std::string& path) {
  Fd fd = open_for_reading(path);
  return read_header(fd.fd, path, nullptr);
}

NamedTensors load_safetensors(const std::string& path,
                              const std::function<bool(const std::string&)>& filter,
                              FileDigest* digest) {
  Fd fd = open_for_reading(path);
  std::string prefix;
  SafetensorsFile file = read_header(fd.fd, path, digest ? &prefix : nullptr);
  uint32_t crc = digest ? crc_update(0, prefix.data(), prefix.size()) : 0;

  // Every size below was checked against the file size, so these allocations are bounded by it.
  std::vector<at::Tensor> loaded(file.tensors.size());
  std::vector<size_t> order(file.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return file.tensors[a].begin < file.tensors[b].begin; });
  std::vector<char> scratch;
  for (size_t i : order) {
    const TensorInfo& info = file.tensors[i];
    uint64_t offset = file.data_start + info.begin;
    size_t nbytes = static_cast<size_t>(info.end - info.begin);
    if (!filter || filter(info.name)) {
      at::Tensor t = at::empty(info.shape, at::TensorOptions().dtype(info.dtype));
      if (nbytes > 0) pread_all(fd.fd, t.data_ptr(), nbytes, offset, path);
      if (digest) crc = crc_update(crc, t.data_ptr(), nbytes);
      if (info.dtype == at::kBool && nbytes > 0) {
        // libtorch assumes bools are 0 or 1; any other byte is undefined behaviour later.
        const auto* p = static_cast<const unsigned char*>(t.data_ptr());
        if (!std::all_of(p, p + nbytes, [](unsigned char c) { return c <= 1; })) {
          bad(path, "tensor '" + info.name + "': BOOL data holds a byte other than 0 or 1");
        }
      }
      loaded[i] = std::move(t);
    } else if (digest) {
      scratch.resize(std::min<size_t>(nbytes, size_t(16) << 20));
      for (size_t done = 0; done < nbytes;) {
        size_t n = std::min(scratch.size(), nbytes - done);
        pread_all(fd.fd, scratch.data(), n, offset + done, path);
        crc = crc_update(crc, scratch.data(), n);
        done += n;
      }
    }
  }
  if (digest) *digest = FileDigest{file.file_size, crc};
  NamedTensors out;
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    if (loaded[i].defined()) out.emplace_back(file.tensors[i].name, std::move(loaded[i]));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Durable file helpers

void sync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  BV_CHECK(fd.fd >= 0, "cannot open directory '", dir, "' to sync it: ", errno_text());
  // Some filesystems cannot fsync a directory (EINVAL); the rename is then as durable as it gets.
  if (::fsync(fd.fd) != 0 && errno != EINVAL) {
    fail("cannot sync directory '", dir, "': ", errno_text());
  }
}

void write_file_durable(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  BV_CHECK(fd.fd >= 0, "cannot write '", path, "': ", errno_text());
  try {
    write_all(fd.fd, data.data(), data.size(), tmp);
    BV_CHECK(::fsync(fd.fd) == 0, "cannot write '", path, "': fsync: ", errno_text());
    BV_CHECK(fd.release_close() == 0, "cannot write '", path, "': close: ", errno_text());
    BV_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot write '", path,
             "': rename: ", errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  sync_dir(parent_dir(path));
}

}  // namespace bv::ckpt
