// TFRecord files (TensorFlow's record framing, what TFDS writes its shards in), read without
// loading them: index_tfrecords walks the record headers once and keeps where each selected
// record lies (16 bytes a record); read_record reads and checks one record when it is needed
// (by a pipeline worker). Each record on disk:
//   uint64 length (little-endian) | uint32 masked crc32c(length) | data | uint32 masked
//   crc32c(data)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bv::data {

// CRC-32C (Castagnoli), continuing from `crc` (0 to start): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's stored form: ((crc >> 15) | (crc << 17)) + 0xa282ead8 of the bytes' crc32c.
uint32_t masked_crc32c(const void* data, size_t n);

// Records [skip, skip + take) of `file`; take -1: to the end of the file.
struct TFRecordShard {
  std::string file;
  int64_t skip = 0;
  int64_t take = -1;
};

// Where the selected records of the shards lie, in the shards' order, concatenated.
struct TFRecordIndex {
  std::vector<std::string> files;  // one per shard
  std::vector<int64_t> first;      // per shard: its first record's index in the concatenation
  std::vector<int64_t> skip;       // per shard: that record's number in its file
  std::vector<uint64_t> offsets;   // per record: where its header starts in its file
  std::vector<uint64_t> lengths;   // per record: its data's length
  // Records whose length header failed its CRC (only with keep_bad): index -> the error. Such a
  // record stands for the rest of its shard, which cannot be found past it.
  std::map<int64_t, std::string> bad;

  int64_t size() const { return static_cast<int64_t>(offsets.size()); }
};

// Walks the shards' record headers. A missing or truncated file, a record past the file's end,
// fewer records than skip + take, or a length whose CRC fails is an error naming the file and the
// record (its number in the file and its byte offset); keep_bad: a failed length CRC is kept in
// `bad` instead (and the shard ends there).
TFRecordIndex index_tfrecords(const std::vector<TFRecordShard>& shards, bool keep_bad);

// "FILE record N (byte B)": record i of the index, N its number in its file.
std::string record_where(const TFRecordIndex& index, int64_t i);

// Record i's data, read now and checked (its length as indexed, its data's CRC); an error names
// the record (record_where). Record i must not be in index.bad.
std::string read_record(const TFRecordIndex& index, int64_t i);

}  // namespace bv::data
