// A checkpoint opened for looking inside (the REPL's `ckpt`): the names, dtypes and shapes of
// its tensors come from the file's index alone (an npz's zip directory and .npy headers, a
// safetensors header), and a tensor's data is read only when it is asked for. Listing a
// multi-GB checkpoint therefore costs milliseconds, not a full load.
//
// What can be opened:
//   x.npz                big_vision's np.savez checkpoints (npz.h)
//   x.safetensors        a safetensors file (safetensors.h)
//   WORKDIR/ckpt-N/      a training checkpoint directory (checkpoint.h): its tensors file
//   WORKDIR              the checkpoint WORKDIR/LAST names, else the newest complete one
// The format is told by the file's first bytes, not its name. Opening checks what the index
// readers check (every offset and size against the file); it does not verify a training
// checkpoint's CRC-32, which would read every byte.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bv::ckpt {

struct IndexEntry {
  std::string name;
  c10::ScalarType dtype;  // of the tensor load() returns
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;  // the array's data as stored in the file
};

class CheckpointIndex {
 public:
  static CheckpointIndex open(const std::string& path);

  const std::string& file() const { return file_; }      // the file whose tensors these are
  const std::string& format() const { return format_; }  // "npz" or "safetensors"
  int64_t step() const { return step_; }                 // a training checkpoint's step, else -1
  const std::vector<IndexEntry>& entries() const { return entries_; }  // sorted by name

  const IndexEntry* find(const std::string& name) const;  // nullptr when absent
  // One tensor's data, read now (CPU). An unknown name is an error naming the file, and the
  // closest names when there are some; a file changed since open() is an error too.
  at::Tensor load(const std::string& name) const;

 private:
  struct Source;  // per-format offsets, kept out of this header
  std::string file_, format_;
  int64_t step_ = -1;
  uint64_t file_size_ = 0;
  std::vector<IndexEntry> entries_;
  std::shared_ptr<const Source> source_;
};

// The training checkpoint directory `open(workdir)` would read: the one LAST names when it is
// complete, else the newest complete ckpt-* directory. Empty when there is none.
std::string latest_checkpoint_dir(const std::string& workdir);

}  // namespace bv::ckpt
