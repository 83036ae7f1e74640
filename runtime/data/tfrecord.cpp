#include "data/tfrecord.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/quote.h"

namespace bv::data {

// ---------------------------------------------------------------------------------------------
// CRC-32C, written here: Debian 12 (what scripts/setup and the GPU check install from) packages
// no crc32c library (libcrc32c-dev, Google's, comes with Debian 13), and pulling in Boost for
// boost::crc_optimal alone is hundreds of MiB. Table-driven, eight bytes a step ("slicing by
// 8"): the reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF.

namespace {

using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables make_crc_tables() {
  CrcTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][b] = c;
  }
  // t[k][b]: the CRC of byte b followed by k zero bytes.
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}

constexpr CrcTables kCrc = make_crc_tables();

uint32_t load_le32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

uint64_t load_le64(const unsigned char* p) {
  return uint64_t{load_le32(p)} | uint64_t{load_le32(p + 4)} << 32;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo = load_le32(p) ^ c, hi = load_le32(p + 4);
    c = kCrc[7][lo & 0xff] ^ kCrc[6][(lo >> 8) & 0xff] ^ kCrc[5][(lo >> 16) & 0xff] ^
        kCrc[4][lo >> 24] ^ kCrc[3][hi & 0xff] ^ kCrc[2][(hi >> 8) & 0xff] ^
        kCrc[1][(hi >> 16) & 0xff] ^ kCrc[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kCrc[0][(c ^ *p) & 0xff];
  return ~c;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// ---------------------------------------------------------------------------------------------
// Files

namespace {

constexpr uint64_t kHeader = 12;  // length and its CRC
constexpr uint64_t kFooter = 4;   // the data's CRC

// An open file, read with pread (workers share nothing: each read opens its own).
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("bv:tfrecord: cannot open '", snippet(path), "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail("bv:tfrecord: '", snippet(path), "' is not a file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size() const { return size_; }

  // Reads n bytes at `offset`; returns how many there were (fewer at the file's end).
  uint64_t read(void* out, uint64_t n, uint64_t offset) const {
    auto* p = static_cast<char*>(out);
    uint64_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd_, p + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail("bv:tfrecord: reading '", snippet(path_), "': ", std::strerror(errno));
      if (r == 0) break;
      got += static_cast<uint64_t>(r);
    }
    return got;
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::string where(const std::string& file, int64_t record, uint64_t offset) {
  return str("bv:tfrecord: '", snippet(file), "' record ", record, " (byte ", offset, ")");
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Adds shard `s`'s selected records to `index`.
void index_shard(const TFRecordShard& shard, bool keep_bad, TFRecordIndex* index) {
  BV_CHECK(shard.skip >= 0, "bv:tfrecord: '", snippet(shard.file),
           "': skip must be 0 or more, got ", shard.skip);
  BV_CHECK(shard.take >= -1, "bv:tfrecord: '", snippet(shard.file),
           "': take must be 0 or more (or -1: to the end), got ", shard.take);
  File f(shard.file);
  index->files.push_back(shard.file);
  index->first.push_back(index->size());
  index->skip.push_back(shard.skip);
  const uint64_t size = f.size();
  const int64_t end = shard.take < 0 ? INT64_MAX : shard.skip + shard.take;
  uint64_t off = 0;
  for (int64_t rec = 0; rec < end; ++rec) {
    if (off == size) {
      if (shard.take < 0 && rec >= shard.skip) break;
      fail("bv:tfrecord: '", snippet(shard.file), "' has ", rec, " records; the shard asks for ",
           shard.take < 0 ? str("records from ", shard.skip)
                          : str("records [", shard.skip, ", ", end, ")"));
    }
    std::string at = where(shard.file, rec, off);
    unsigned char header[kHeader];
    BV_CHECK(size - off >= kHeader, at, ": truncated: the file ends ", size - off,
             " bytes into the record's 12-byte header");
    f.read(header, kHeader, off);
    uint32_t want = load_le32(header + 8), got = masked_crc32c(header, 8);
    if (want != got) {
      std::string msg = str(at, ": corrupt record: the CRC of its length header does not match (",
                            hex(got), " computed, ", hex(want), " stored)");
      if (!keep_bad) fail(msg);
      // The length is not to be trusted, so nothing past it can be found.
      index->bad[index->size()] = msg + "; the rest of the file is skipped";
      index->offsets.push_back(off);
      index->lengths.push_back(0);
      return;
    }
    uint64_t len = load_le64(header), left = size - off - kHeader;
    BV_CHECK(left >= kFooter && len <= left - kFooter, at, ": truncated: the record's ", len,
             " bytes of data and 4 of CRC go past the file's end (", size, " bytes)");
    if (rec >= shard.skip) {
      index->offsets.push_back(off);
      index->lengths.push_back(len);
    }
    off += kHeader + len + kFooter;
  }
}

}  // namespace

TFRecordIndex index_tfrecords(const std::vector<TFRecordShard>& shards, bool keep_bad) {
  TFRecordIndex index;
  for (const auto& shard : shards) index_shard(shard, keep_bad, &index);
  return index;
}

std::string record_where(const TFRecordIndex& index, int64_t i) {
  BV_CHECK(i >= 0 && i < index.size(), "bv:tfrecord: record ", i, " out of range 0..",
           index.size() - 1);
  auto s = static_cast<size_t>(std::upper_bound(index.first.begin(), index.first.end(), i) -
                               index.first.begin() - 1);
  return where(index.files[s], index.skip[s] + (i - index.first[s]),
               index.offsets[static_cast<size_t>(i)]);
}

std::string read_record(const TFRecordIndex& index, int64_t i) {
  std::string at = record_where(index, i);
  BV_CHECK(!index.bad.count(i), index.bad.at(i));
  auto s = static_cast<size_t>(std::upper_bound(index.first.begin(), index.first.end(), i) -
                               index.first.begin() - 1);
  uint64_t off = index.offsets[static_cast<size_t>(i)];
  uint64_t len = index.lengths[static_cast<size_t>(i)];
  File f(index.files[s]);
  unsigned char header[kHeader];
  BV_CHECK(f.read(header, kHeader, off) == kHeader && load_le64(header) == len &&
               load_le32(header + 8) == masked_crc32c(header, 8),
           at, ": the record's header is not the one indexed: the file changed since it was read");
  std::string data(len, '\0');
  unsigned char footer[kFooter];
  BV_CHECK(f.read(data.data(), len, off + kHeader) == len &&
               f.read(footer, kFooter, off + kHeader + len) == kFooter,
           at, ": truncated: the file changed since it was read");
  uint32_t want = load_le32(footer), got = masked_crc32c(data.data(), data.size());
  BV_CHECK(want == got, at, ": corrupt record: the CRC of its ", len, " bytes of data does not ",
           "match (", hex(got), " computed, ", hex(want), " stored)");
  return data;
}

}  // namespace bv::data
