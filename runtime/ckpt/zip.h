// A small ZIP reader and writer for numpy's .npz files: what np.savez / np.savez_compressed write
// (stored or deflated members, ZIP64 extras, no encryption, one disk). The reader trusts nothing
// in the file: every offset and size is checked against the file and against each other before
// anything is read or allocated, and member data is checked against its CRC-32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace bv::ckpt::zip {

constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;

// One member, as the central directory describes it (sizes already resolved through ZIP64).
struct Member {
  std::string name;
  uint16_t method = kStored;
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t stored_size = 0;    // bytes in the file (compressed size)
  uint64_t size = 0;           // uncompressed bytes
  uint64_t header_offset = 0;  // the local file header
  uint64_t data_offset = 0;    // the member's (possibly compressed) bytes
};

// A read-only file with positioned reads; errors name the path.
class File {
 public:
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset; `what` names the part for the error when the file ends.
  void read_at(uint64_t offset, void* dst, size_t n, const std::string& what) const;
  std::string read_string(uint64_t offset, size_t n, const std::string& what) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Reads and validates the end record (and its ZIP64 record), the whole central directory and
// every member's local header. Members come back in central-directory order.
std::vector<Member> read_directory(const File& file);

// Streams a member's uncompressed bytes from the start. Stored members are read straight into
// the caller's buffer; deflated ones are inflated into it, never past the declared size.
class MemberReader {
 public:
  MemberReader(const File& file, const Member& member);
  ~MemberReader();
  MemberReader(const MemberReader&) = delete;
  MemberReader& operator=(const MemberReader&) = delete;

  uint64_t remaining() const { return member_.size - done_; }
  // Exactly n bytes (an error if the member has fewer).
  void read(void* dst, size_t n);
  // After every byte has been read: the deflate stream must end exactly here and the CRC-32 of
  // everything read must match the directory's.
  void finish();

 private:
  struct Inflater;
  void fill_input();
  [[noreturn]] void fail_member(const std::string& message) const;

  const File& file_;
  Member member_;
  uint64_t done_ = 0;      // uncompressed bytes handed out
  uint64_t consumed_ = 0;  // stored bytes read from the file
  uint32_t crc_ = 0;
  std::unique_ptr<Inflater> inflater_;
};

// Writes a ZIP the way Python's zipfile does for np.savez (fixed 1980-01-01 timestamps, a ZIP64
// extra in every local header, ZIP64 sizes/offsets/end records past zipfile's limits), so numpy
// re-saving what we wrote gives the same bytes. The file appears at `path` only on commit():
// until then it is PATH.tmp-<pid>, removed again if the writer is destroyed uncommitted.
class Writer {
 public:
  // zipfile switches to ZIP64 fields for values above 2^31-1 (not 2^32-1); tests lower the limit
  // to exercise those records on small files.
  static constexpr uint64_t kZip64Limit = (uint64_t{1} << 31) - 1;
  static constexpr uint64_t kCountLimit = 0xFFFF;

  explicit Writer(const std::string& path, uint64_t zip64_limit = kZip64Limit,
                  uint64_t count_limit = kCountLimit);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // A stored member whose bytes are the concatenation of `parts`, written in order without
  // copying them.
  void add_stored(const std::string& name,
                  const std::vector<std::pair<const void*, size_t>>& parts);
  // Central directory and end records, fsync, rename over `path`, fsync the directory.
  void commit();

 private:
  struct Entry {
    std::string name;
    uint32_t crc32;
    uint64_t size;
    uint64_t header_offset;
  };
  void write(const void* data, size_t n);
  void flush();

  std::string path_, tmp_;
  uint64_t zip64_limit_, count_limit_;
  int fd_ = -1;
  uint64_t pos_ = 0;
  std::vector<char> buffer_;
  std::vector<Entry> entries_;
  bool committed_ = false;
};

}  // namespace bv::ckpt::zip
