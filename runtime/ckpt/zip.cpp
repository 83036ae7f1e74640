#include "ckpt/zip.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/error.h"

namespace bv::ckpt::zip {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;    // PK\3\4
constexpr uint32_t kCentralSig = 0x02014b50;  // PK\1\2
constexpr uint32_t kEndSig = 0x06054b50;      // PK\5\6
constexpr uint32_t kEnd64Sig = 0x06064b50;    // PK\6\6
constexpr uint32_t kLocatorSig = 0x07064b50;  // PK\6\7
constexpr size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22;
constexpr size_t kEnd64Size = 56, kLocatorSize = 20;
constexpr uint16_t kFlagEncrypted = 1 << 0, kFlagDescriptor = 1 << 3;
constexpr uint16_t kFlagStrongEncryption = 1 << 6, kFlagUtf8 = 1 << 11, kFlagMasked = 1 << 13;
constexpr uint16_t kZip64ExtraId = 0x0001;
// Deflate's best case is a 258-byte match per 2 bits of input, so no stream of n bytes inflates
// to more than 1032*n bytes: a directory declaring more is lying (a zip bomb or garbage).
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t get16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const unsigned char* p) {
  return static_cast<uint32_t>(get16(p)) | (static_cast<uint32_t>(get16(p + 2)) << 16);
}
uint64_t get64(const unsigned char* p) {
  return static_cast<uint64_t>(get32(p)) | (static_cast<uint64_t>(get32(p + 4)) << 32);
}
const unsigned char* bytes(const std::string& s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

void put16(std::string& out, uint64_t v) {
  out.push_back(static_cast<char>(v & 0xFF));
  out.push_back(static_cast<char>((v >> 8) & 0xFF));
}
void put32(std::string& out, uint64_t v) {
  put16(out, v & 0xFFFF);
  put16(out, (v >> 16) & 0xFFFF);
}
void put64(std::string& out, uint64_t v) {
  put32(out, v & 0xFFFFFFFF);
  put32(out, v >> 32);
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%08llx", static_cast<unsigned long long>(v));
  return buf;
}

// a + b <= limit, without overflowing.
bool fits(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

// zlib's crc32_z(crc, NULL, 0) answers the initial value, not crc: empty parts must not reset it.
uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  if (n == 0) return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Names we accept from a file: what a writer of flat parameter dicts produces. Absolute paths,
// `..` components and NULs are refused even though we never extract to disk, because no honest
// npz has them.
void check_member_name(const std::string& path, const std::string& name) {
  BV_CHECK(!name.empty(), path, ": a member has an empty name");
  BV_CHECK(name.find('\0') == std::string::npos, path, ": member name with a NUL byte");
  BV_CHECK(name[0] != '/', path, ": member '", name, "' has an absolute name");
  BV_CHECK(name != ".." && name.rfind("../", 0) != 0 && name.find("/../") == std::string::npos &&
               (name.size() < 3 || name.compare(name.size() - 3, 3, "/..") != 0),
           path, ": member '", name, "' has a '..' component");
}

// The ZIP64 extra field of a central-directory record: 8-byte values, in this order, for each
// field whose 32-bit (16-bit for the disk) slot is saturated.
void apply_zip64_extra(const std::string& path, Member& m, const unsigned char* extra, size_t len,
                       bool want_size, bool want_stored, bool want_offset, bool want_disk) {
  if (!(want_size || want_stored || want_offset || want_disk)) return;
  size_t pos = 0;
  while (pos + 4 <= len) {
    uint16_t id = get16(extra + pos), n = get16(extra + pos + 2);
    BV_CHECK(pos + 4 + n <= len, path, ": member '", m.name, "': extra field runs past its end");
    if (id == kZip64ExtraId) {
      const unsigned char* p = extra + pos + 4;
      size_t need = 8 * (want_size + want_stored + want_offset) + 4 * want_disk;
      BV_CHECK(n >= need, path, ": member '", m.name, "': ZIP64 extra field is ", n,
               " bytes, needs ", need);
      if (want_size) m.size = get64(p), p += 8;
      if (want_stored) m.stored_size = get64(p), p += 8;
      if (want_offset) m.header_offset = get64(p), p += 8;
      if (want_disk) BV_CHECK(get32(p) == 0, path, ": member '", m.name, "' is on another disk");
      return;
    }
    pos += 4 + n;
  }
  fail(path, ": member '", m.name, "': sizes or offset saturated but no ZIP64 extra field");
}

struct EndRecord {
  uint64_t count = 0, cd_size = 0, cd_offset = 0;
  uint64_t cd_limit = 0;  // where the central directory must end (the first end record)
};

EndRecord read_end_record(const File& file) {
  const std::string& path = file.path();
  uint64_t size = file.size();
  BV_CHECK(size >= kEndSize, path, ": not a zip/npz file: only ", size,
           " bytes, less than an end-of-central-directory record");
  uint64_t tail_len = std::min<uint64_t>(size, 0xFFFF + kEndSize);
  uint64_t tail_start = size - tail_len;
  std::string tail = file.read_string(tail_start, tail_len, "end of central directory");
  const unsigned char* t = bytes(tail);
  // The last signature whose comment length reaches exactly the end of the file.
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail_len - kEndSize); i >= 0; --i) {
    if (get32(t + i) == kEndSig && i + kEndSize + get16(t + i + 20) == tail_len) {
      at = i;
      break;
    }
  }
  BV_CHECK(at >= 0, path, ": no ZIP end-of-central-directory record in the last ", tail_len,
           " bytes (truncated, or not a zip/npz file)");
  const unsigned char* e = t + at;
  uint64_t end_pos = tail_start + static_cast<uint64_t>(at);
  EndRecord r;
  BV_CHECK(get16(e + 4) == 0 && get16(e + 6) == 0 && get16(e + 8) == get16(e + 10), path,
           ": multi-disk zip archives are not supported");
  r.count = get16(e + 10);
  r.cd_size = get32(e + 12);
  r.cd_offset = get32(e + 16);
  r.cd_limit = end_pos;

  // A ZIP64 locator right before the end record points to the ZIP64 end record, whose values
  // replace the saturated (or, from Python's zipfile, merely large) 16/32-bit ones.
  if (end_pos >= kLocatorSize) {
    std::string loc = file.read_string(end_pos - kLocatorSize, kLocatorSize, "ZIP64 locator");
    const unsigned char* l = bytes(loc);
    if (get32(l) == kLocatorSig) {
      uint64_t loc_pos = end_pos - kLocatorSize;
      BV_CHECK(get32(l + 4) == 0 && get32(l + 16) <= 1, path,
               ": multi-disk zip archives are not supported");
      uint64_t rec_pos = get64(l + 8);
      BV_CHECK(fits(rec_pos, kEnd64Size, loc_pos), path, ": ZIP64 end record offset ", rec_pos,
               " is not before its locator at ", loc_pos);
      std::string rec = file.read_string(rec_pos, kEnd64Size, "ZIP64 end record");
      const unsigned char* z = bytes(rec);
      BV_CHECK(get32(z) == kEnd64Sig, path, ": no ZIP64 end record at offset ", rec_pos);
      uint64_t rec_size = get64(z + 4);
      BV_CHECK(rec_size >= kEnd64Size - 12 && fits(rec_pos + 12, rec_size, loc_pos), path,
               ": ZIP64 end record size ", rec_size, " does not fit before its locator");
      BV_CHECK(get32(z + 16) == 0 && get32(z + 20) == 0 && get64(z + 24) == get64(z + 32), path,
               ": multi-disk zip archives are not supported");
      r.count = get64(z + 32);
      r.cd_size = get64(z + 40);
      r.cd_offset = get64(z + 48);
      r.cd_limit = rec_pos;
    }
  }
  BV_CHECK(fits(r.cd_offset, r.cd_size, r.cd_limit) && r.cd_offset + r.cd_size == r.cd_limit, path,
           ": central directory (offset ", r.cd_offset, ", ", r.cd_size,
           " bytes) does not end where the end record starts (offset ", r.cd_limit, ")");
  BV_CHECK(r.count <= r.cd_size / kCentralSize, path, ": end record claims ", r.count,
           " members, but the central directory has only ", r.cd_size, " bytes");
  return r;
}

// Parses one central-directory record at cd[pos], advancing pos.
Member parse_central(const std::string& path, const std::string& cd, size_t& pos) {
  BV_CHECK(cd.size() - pos >= kCentralSize, path, ": central directory entry at offset ", pos,
           " is truncated");
  const unsigned char* c = bytes(cd) + pos;
  BV_CHECK(get32(c) == kCentralSig, path, ": bad central directory entry signature at offset ", pos,
           " of the central directory");
  size_t name_len = get16(c + 28), extra_len = get16(c + 30), comment_len = get16(c + 32);
  BV_CHECK(cd.size() - pos - kCentralSize >= name_len + extra_len + comment_len, path,
           ": central directory entry at offset ", pos, " runs past the directory's end");
  Member m;
  m.name.assign(cd, pos + kCentralSize, name_len);
  check_member_name(path, m.name);
  m.flags = get16(c + 8);
  m.method = get16(c + 10);
  m.crc32 = get32(c + 16);
  m.stored_size = get32(c + 20);
  m.size = get32(c + 24);
  m.header_offset = get32(c + 42);
  uint16_t disk = get16(c + 34);
  apply_zip64_extra(path, m, c + kCentralSize + name_len, extra_len, m.size == 0xFFFFFFFF,
                    m.stored_size == 0xFFFFFFFF, m.header_offset == 0xFFFFFFFF, disk == 0xFFFF);
  BV_CHECK(disk == 0 || disk == 0xFFFF, path, ": member '", m.name, "' is on another disk");
  pos += kCentralSize + name_len + extra_len + comment_len;

  const std::string who = path + ": member '" + m.name + "'";
  BV_CHECK(!(m.flags & (kFlagEncrypted | kFlagStrongEncryption | kFlagMasked)), who,
           " is encrypted");
  BV_CHECK(m.method == kStored || m.method == kDeflated, who, ": compression method ", m.method,
           " is not supported (only 0 = stored and 8 = deflate)");
  BV_CHECK(m.method != kStored || m.stored_size == m.size, who, ": stored member with ",
           m.stored_size, " bytes in the file but a size of ", m.size);
  BV_CHECK(m.method != kDeflated || m.size / kMaxDeflateRatio <= m.stored_size, who, ": declares ",
           m.size, " inflated bytes, impossible from ", m.stored_size, " deflated bytes");
  return m;
}

// Checks the local header against the directory and sets data_offset.
void check_local_header(const File& file, uint64_t cd_offset, Member& m) {
  const std::string who = file.path() + ": member '" + m.name + "'";
  BV_CHECK(fits(m.header_offset, kLocalSize, cd_offset), who, ": local header offset ",
           m.header_offset, " is not inside the archive's data (central directory at ", cd_offset,
           ")");
  std::string h = file.read_string(m.header_offset, kLocalSize, "local header of '" + m.name + "'");
  const unsigned char* l = bytes(h);
  BV_CHECK(get32(l) == kLocalSig, who, ": no local header at offset ", m.header_offset);
  uint64_t name_len = get16(l + 26), extra_len = get16(l + 28);
  uint64_t header_end = m.header_offset + kLocalSize + name_len + extra_len;
  BV_CHECK(header_end <= cd_offset, who, ": local header runs into the central directory");
  std::string rest = file.read_string(m.header_offset + kLocalSize, name_len + extra_len,
                                      "local header of '" + m.name + "'");
  BV_CHECK(rest.compare(0, name_len, m.name) == 0 && name_len == m.name.size(), who,
           ": local header names it '", rest.substr(0, name_len), "'");
  uint16_t flags = get16(l + 6);
  BV_CHECK(get16(l + 8) == m.method, who, ": compression method ", get16(l + 8),
           " in the local header, ", m.method, " in the central directory");
  BV_CHECK(!(flags & (kFlagEncrypted | kFlagStrongEncryption)), who, " is encrypted");
  if (!(flags & kFlagDescriptor)) {
    // Sizes and CRC are in the local header too (ZIP64 extra when saturated): they must agree.
    Member local;
    local.name = m.name;
    local.crc32 = get32(l + 14);
    local.stored_size = get32(l + 18);
    local.size = get32(l + 22);
    const unsigned char* extra = bytes(rest) + name_len;
    apply_zip64_extra(file.path(), local, extra, extra_len, local.size == 0xFFFFFFFF,
                      local.stored_size == 0xFFFFFFFF, false, false);
    BV_CHECK(local.crc32 == m.crc32 && local.stored_size == m.stored_size && local.size == m.size,
             who, ": local header (crc ", hex(local.crc32), ", ", local.stored_size, " stored, ",
             local.size, " bytes) disagrees with the central directory (crc ", hex(m.crc32), ", ",
             m.stored_size, " stored, ", m.size, " bytes)");
  }
  m.data_offset = header_end;
  BV_CHECK(fits(m.data_offset, m.stored_size, cd_offset), who, ": its ", m.stored_size,
           " bytes at offset ", m.data_offset, " run past the member data (central directory at ",
           cd_offset, ")");
}

}  // namespace

// --- File ----------------------------------------------------------------------------------------

File::File(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BV_CHECK(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st;
  const char* problem = nullptr;
  if (::fstat(fd_, &st) != 0) {
    problem = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  }
  if (problem) {
    ::close(fd_);
    fd_ = -1;
    fail("cannot read '", path, "': ", problem);
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const {
  BV_CHECK(fits(offset, n, size_), path_, ": ", what, " (", n, " bytes at offset ", offset,
           ") is past the end of the file (", size_, " bytes): truncated?");
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    ssize_t got = ::pread(fd_, out, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    BV_CHECK(got >= 0, "cannot read '", path_, "': ", std::strerror(errno));
    BV_CHECK(got > 0, path_, ": ", what, " ends early at offset ", offset,
             " (the file shrank while being read?)");
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

std::string File::read_string(uint64_t offset, size_t n, const std::string& what) const {
  BV_CHECK(fits(offset, n, size_), path_, ": ", what, " (", n, " bytes at offset ", offset,
           ") is past the end of the file (", size_, " bytes): truncated?");
  std::string s(n, '\0');
  read_at(offset, s.data(), n, what);
  return s;
}

// --- directory -----------------------------------------------------------------------------------

std::vector<Member> read_directory(const File& file) {
  const std::string& path = file.path();
  EndRecord end = read_end_record(file);
  std::string cd = file.read_string(end.cd_offset, end.cd_size, "central directory");
  std::vector<Member> members;
  members.reserve(end.count);  // bounded: count <= cd_size / 46 and cd_size <= file size
  std::set<std::string> names;
  size_t pos = 0;
  for (uint64_t i = 0; i < end.count; ++i) {
    members.push_back(parse_central(path, cd, pos));
    BV_CHECK(names.insert(members.back().name).second, path, ": member '", members.back().name,
             "' appears twice");
  }
  BV_CHECK(pos == cd.size(), path, ": central directory has ", cd.size() - pos, " bytes after its ",
           end.count, " entries (wrong entry count?)");
  for (Member& m : members) check_local_header(file, end.cd_offset, m);

  // No two members may share bytes: overlapping members are how zip bombs multiply their size.
  std::vector<const Member*> order;
  for (const Member& m : members) order.push_back(&m);
  std::sort(order.begin(), order.end(),
            [](const Member* a, const Member* b) { return a->header_offset < b->header_offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const Member& a = *order[i - 1];
    const Member& b = *order[i];
    BV_CHECK(a.data_offset + a.stored_size <= b.header_offset, path, ": members '", a.name,
             "' and '", b.name, "' overlap (bytes ", a.header_offset, "..",
             a.data_offset + a.stored_size, " and ", b.header_offset, "..",
             b.data_offset + b.stored_size, ")");
  }
  return members;
}

// --- MemberReader --------------------------------------------------------------------------------

struct MemberReader::Inflater {
  z_stream z{};
  std::vector<unsigned char> input;
  bool ended = false;
  Inflater() { BV_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, "zlib: inflateInit2 failed"); }
  ~Inflater() { inflateEnd(&z); }
};

MemberReader::MemberReader(const File& file, const Member& member) : file_(file), member_(member) {
  if (member_.method == kDeflated) {
    inflater_ = std::make_unique<Inflater>();
    inflater_->input.resize(std::min<uint64_t>(member_.stored_size, uint64_t{1} << 20));
  }
}

MemberReader::~MemberReader() = default;

void MemberReader::fail_member(const std::string& message) const {
  fail(file_.path(), ": member '", member_.name, "': ", message);
}

void MemberReader::fill_input() {
  Inflater& in = *inflater_;
  size_t n = std::min<uint64_t>(in.input.size(), member_.stored_size - consumed_);
  file_.read_at(member_.data_offset + consumed_, in.input.data(), n,
                "data of member '" + member_.name + "'");
  consumed_ += n;
  in.z.next_in = in.input.data();
  in.z.avail_in = static_cast<uInt>(n);
}

void MemberReader::read(void* dst, size_t n) {
  if (n > remaining())
    fail_member(str("wanted ", n, " more bytes but only ", remaining(), " of its ", member_.size,
                    " are left"));
  unsigned char* out = static_cast<unsigned char*>(dst);
  if (member_.method == kStored) {
    file_.read_at(member_.data_offset + done_, out, n, "data of member '" + member_.name + "'");
    consumed_ += n;
  } else {
    z_stream& z = inflater_->z;
    size_t left = n;
    unsigned char* next = out;
    while (left > 0) {
      if (inflater_->ended)
        fail_member(str("deflate stream ends after ", done_ + (n - left),
                        " bytes, but the "
                        "directory declares ",
                        member_.size));
      if (z.avail_in == 0 && consumed_ < member_.stored_size) fill_input();
      uInt room = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
      z.next_out = next;
      z.avail_out = room;
      int ret = inflate(&z, Z_NO_FLUSH);
      size_t produced = room - z.avail_out;
      next += produced;
      left -= produced;
      if (ret == Z_STREAM_END) {
        inflater_->ended = true;
      } else if (ret == Z_BUF_ERROR && z.avail_in == 0 && consumed_ == member_.stored_size) {
        fail_member(str("deflated data ends after ", done_ + (n - left), " of the declared ",
                        member_.size, " bytes (truncated?)"));
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        fail_member(str("corrupt deflate data: ", z.msg ? z.msg : zError(ret)));
      }
    }
  }
  crc_ = crc_update(crc_, out, n);
  done_ += n;
}

void MemberReader::finish() {
  if (done_ != member_.size) fail_member(str("read ", done_, " of its ", member_.size, " bytes"));
  if (member_.method == kDeflated) {
    // The stream must end here: offer one byte of room; any output means it inflates to more
    // than declared.
    z_stream& z = inflater_->z;
    unsigned char extra;
    while (!inflater_->ended) {
      if (z.avail_in == 0 && consumed_ < member_.stored_size) fill_input();
      z.next_out = &extra;
      z.avail_out = 1;
      int ret = inflate(&z, Z_NO_FLUSH);
      if (z.avail_out == 0)
        fail_member(str("inflates to more than the declared ", member_.size, " bytes"));
      if (ret == Z_STREAM_END) {
        inflater_->ended = true;
      } else if (ret == Z_BUF_ERROR && z.avail_in == 0 && consumed_ == member_.stored_size) {
        fail_member("deflated data ends before its deflate stream does (truncated?)");
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        fail_member(str("corrupt deflate data: ", z.msg ? z.msg : zError(ret)));
      }
    }
    uint64_t unused = z.avail_in + (member_.stored_size - consumed_);
    if (unused != 0) fail_member(str(unused, " stray bytes after the deflate stream"));
  }
  if (crc_ != member_.crc32)
    fail_member(str("CRC-32 mismatch: the directory says ", hex(member_.crc32), ", the data gives ",
                    hex(crc_), " (corrupt file)"));
}

// --- Writer --------------------------------------------------------------------------------------

namespace {
constexpr uint16_t kVersionZip64 = 45;  // what zipfile writes for force_zip64 members
constexpr uint16_t kDosTime = 0;        // 00:00:00
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: zipfile's ZipInfo default
constexpr uint32_t kUnixMode600 = 0600u << 16;          // zipfile's external_attr for open('w')
constexpr uint16_t kSystemUnix = 3;
constexpr size_t kBufferSize = size_t{1} << 20;
}  // namespace

Writer::Writer(const std::string& path, uint64_t zip64_limit, uint64_t count_limit)
    : path_(path), tmp_(path + ".tmp-" + std::to_string(::getpid())), zip64_limit_(zip64_limit),
      count_limit_(count_limit) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  BV_CHECK(fd_ >= 0, "cannot write '", path, "': ", std::strerror(errno));
  buffer_.reserve(kBufferSize);
}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void Writer::flush() {
  const char* p = buffer_.data();
  size_t n = buffer_.size();
  while (n > 0) {
    ssize_t put = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (put < 0 && errno == EINTR) continue;
    BV_CHECK(put > 0, "cannot write '", path_, "': ", std::strerror(errno));
    p += put;
    n -= static_cast<size_t>(put);
  }
  buffer_.clear();
}

void Writer::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  pos_ += n;
  if (buffer_.size() + n <= kBufferSize) {
    buffer_.insert(buffer_.end(), p, p + n);
    return;
  }
  flush();
  if (n < kBufferSize) {
    buffer_.insert(buffer_.end(), p, p + n);
    return;
  }
  while (n > 0) {  // big tensors go straight from their memory to the file
    ssize_t put = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (put < 0 && errno == EINTR) continue;
    BV_CHECK(put > 0, "cannot write '", path_, "': ", std::strerror(errno));
    p += put;
    n -= static_cast<size_t>(put);
  }
}

void Writer::add_stored(const std::string& name,
                        const std::vector<std::pair<const void*, size_t>>& parts) {
  BV_CHECK(!committed_, "zip writer for '", path_, "': add after commit");
  BV_CHECK(!name.empty() && name.size() <= 0xFFFF && name.find('\0') == std::string::npos,
           "cannot write '", path_, "': bad member name '", name, "'");
  Entry e{name, 0, 0, pos_};
  for (const auto& [data, n] : parts) {
    e.crc32 = crc_update(e.crc32, data, n);
    e.size += n;
  }
  // numpy opens every member with force_zip64=True, so the local header always has the ZIP64
  // extra, and with it (CPython 3.11.7's zipfile; 3.11.2's wrote the real sizes and version 2.0)
  // version 4.5 and 0xFFFFFFFF sizes, as the ZIP spec asks when the extra holds the sizes.
  std::string h;
  put32(h, kLocalSig);
  put16(h, kVersionZip64);
  put16(h, is_ascii(name) ? 0 : kFlagUtf8);
  put16(h, kStored);
  put16(h, kDosTime);
  put16(h, kDosDate);
  put32(h, e.crc32);
  put32(h, 0xFFFFFFFF);  // compressed: in the extra
  put32(h, 0xFFFFFFFF);  // uncompressed: in the extra
  put16(h, name.size());
  put16(h, 20);
  h += name;
  put16(h, kZip64ExtraId);
  put16(h, 16);
  put64(h, e.size);
  put64(h, e.size);
  write(h.data(), h.size());
  for (const auto& [data, n] : parts) write(data, n);
  entries_.push_back(std::move(e));
}

void Writer::commit() {
  BV_CHECK(!committed_, "zip writer for '", path_, "': committed twice");
  uint64_t cd_offset = pos_;
  for (const Entry& e : entries_) {
    bool big = e.size > zip64_limit_;
    bool far = e.header_offset > zip64_limit_;
    std::string extra;
    if (big || far) {
      put16(extra, kZip64ExtraId);
      put16(extra, 8 * (2 * big + far));
      if (big) put64(extra, e.size), put64(extra, e.size);
      if (far) put64(extra, e.header_offset);
    }
    uint16_t version = kVersionZip64;  // every member was written with the ZIP64 extra
    std::string c;
    put32(c, kCentralSig);
    put16(c, version | (kSystemUnix << 8));
    put16(c, version);
    put16(c, is_ascii(e.name) ? 0 : kFlagUtf8);
    put16(c, kStored);
    put16(c, kDosTime);
    put16(c, kDosDate);
    put32(c, e.crc32);
    put32(c, big ? 0xFFFFFFFF : e.size);
    put32(c, big ? 0xFFFFFFFF : e.size);
    put16(c, e.name.size());
    put16(c, extra.size());
    put16(c, 0);  // comment
    put16(c, 0);  // disk
    put16(c, 0);  // internal attributes
    put32(c, kUnixMode600);
    put32(c, far ? 0xFFFFFFFF : e.header_offset);
    c += e.name;
    c += extra;
    write(c.data(), c.size());
  }
  uint64_t end64_offset = pos_;
  uint64_t count = entries_.size(), cd_size = pos_ - cd_offset;
  std::string end;
  if (count > count_limit_ || cd_offset > zip64_limit_ || cd_size > zip64_limit_) {
    put32(end, kEnd64Sig);
    put64(end, kEnd64Size - 12);
    put16(end, kVersionZip64);
    put16(end, kVersionZip64);
    put32(end, 0);
    put32(end, 0);
    put64(end, count);
    put64(end, count);
    put64(end, cd_size);
    put64(end, cd_offset);
    put32(end, kLocatorSig);
    put32(end, 0);
    put64(end, end64_offset);
    put32(end, 1);
    // Like zipfile: saturate only what does not fit.
    count = std::min<uint64_t>(count, 0xFFFF);
    cd_size = std::min<uint64_t>(cd_size, 0xFFFFFFFF);
    cd_offset = std::min<uint64_t>(cd_offset, 0xFFFFFFFF);
  }
  put32(end, kEndSig);
  put16(end, 0);
  put16(end, 0);
  put16(end, count);
  put16(end, count);
  put32(end, cd_size);
  put32(end, cd_offset);
  put16(end, 0);
  write(end.data(), end.size());
  flush();
  BV_CHECK(::fsync(fd_) == 0, "cannot write '", path_, "': fsync: ", std::strerror(errno));
  int fd = fd_;
  fd_ = -1;
  BV_CHECK(::close(fd) == 0, "cannot write '", path_, "': close: ", std::strerror(errno));
  BV_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot write '", path_,
           "': rename from '", tmp_, "': ", std::strerror(errno));
  committed_ = true;
  // The rename itself must survive a crash: sync the directory entry too (best effort).
  std::string dir = path_.find('/') == std::string::npos ? "." : path_.substr(0, path_.rfind('/'));
  if (dir.empty()) dir = "/";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace bv::ckpt::zip
