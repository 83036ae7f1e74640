// The threaded input pipeline. A deterministic stream says which example comes next (shuffle
// once, a tf.data-style shuffle buffer per epoch, repeat, weighted mixtures); worker threads run
// the pp function on examples in any order; the consumer takes results back in stream order and
// stacks them into batches. So the batches depend only on the seed, never on the number of
// workers or on thread timing, and a position (items consumed) is all it takes to resume.
// Knows nothing of Lua: the worker function comes from a factory (bindings/data.cpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/rng.h"
#include "data/example.h"

namespace bv::data {

// splitmix64-style mixing: independent seeds for epochs, sources and examples.
uint64_t mix_seed(uint64_t seed, uint64_t salt);

// The order in which one source's examples are visited.
class IndexStream {
 public:
  // `indices`: this process's examples. shuffle: permute once (seeded), then pass every epoch
  // through a shuffle buffer of `buffer_size` (0 = none) reseeded per epoch.
  IndexStream(std::vector<int64_t> indices, uint64_t seed, bool shuffle, int64_t buffer_size,
              bool repeat);
  bool next(int64_t* out);  // false at the end (only when not repeating)
  // The epoch of the index next() gave last (0 first): each index comes once per epoch, so it
  // is also how many times that index came before.
  int64_t epoch() const { return epoch_; }

 private:
  void start_epoch();
  std::vector<int64_t> order_;
  uint64_t seed_;
  int64_t buffer_size_;
  bool repeat_;
  int64_t epoch_ = -1;
  size_t cursor_ = 0;
  std::vector<int64_t> buffer_;
  Rng rng_{0};
};

struct Item {
  int source = 0;
  int64_t index = 0;
  uint64_t seq = 0;   // position in the stream: fixes the example's random stream
  int64_t epoch = 0;  // its source's epoch: the example's visits before this one
};

// One stream per source, chosen per item with the (normalised) weights.
class ItemStream {
 public:
  ItemStream(std::vector<IndexStream> streams, std::vector<double> weights, uint64_t seed);
  bool next(Item* out);

 private:
  std::vector<IndexStream> streams_;
  std::vector<double> cumulative_;
  Rng rng_;
  uint64_t seq_ = 0;
};

// Runs the pp on one raw item and returns the processed example; throws bv::Error on failure.
using WorkerFn = std::function<Example(const Item&)>;
// Called once in each worker thread to build that thread's WorkerFn (e.g. its own Lua state).
using WorkerFactory = std::function<WorkerFn(int worker_id)>;

struct PipelineOptions {
  int64_t batch_size = 1;
  int workers = 1;
  int64_t prefetch_batches = 2;  // how far workers may run ahead of the consumer
  bool skip_errors = false;
  int64_t max_consecutive_errors = 20;
  bool pad_last_batch = false;  // inference: pad the last batch and add a bool `_mask` key
  // Stack the batch's tensors in pinned host memory (for batches bound for a GPU: see
  // device/device_copy.h); needs a device that has it (CUDA, the test device).
  bool pin_memory = false;
  // A batch whose buffers cannot fit is refused at the first example, before any batch is
  // built: its size times batch_size times the batches held (prefetch_batches in flight, the
  // one being gathered and its stacked copy) against memory_bytes (-1: what the machine has
  // available, device/machine.h; 0: no check). The error names batch_size_key.
  std::string batch_size_key = "batch_size";
  int64_t memory_bytes = -1;
};

class Pipeline {
 public:
  // `skip` items of the stream are passed over first (resuming at a saved position).
  Pipeline(ItemStream stream, WorkerFactory factory, PipelineOptions opts, uint64_t skip = 0);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The next batch (key -> stacked tensor, or list for strings). False when a finite stream is
  // exhausted. Throws the first example error unless skip_errors is set.
  bool next(Example* batch);
  uint64_t position() const;  // stream items consumed by the batches returned so far
  int64_t skipped() const;    // examples dropped because of errors (skip_errors)
  // skipped() per source (index as in the ItemStream), and the last skipped example's error.
  std::vector<int64_t> skipped_by_source() const;
  std::string last_skipped_error() const;

 private:
  struct Result {
    bool ok = false;
    int source = 0;
    Example example;
    std::string error;
  };
  void worker_loop(int id, WorkerFactory factory);
  bool claim(Item* item);
  void check_fits(const Example& first);

  PipelineOptions opts_;
  ItemStream stream_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, result_cv_;
  std::map<uint64_t, Result> results_;
  uint64_t next_seq_;              // next item to hand to a worker
  uint64_t consumed_;              // next item the consumer takes
  uint64_t end_seq_ = UINT64_MAX;  // first seq past a finite stream
  bool stop_ = false;
  std::string fatal_;  // a worker could not start
  int64_t skipped_ = 0;
  std::vector<int64_t> skipped_by_source_;
  std::string last_skipped_error_;
  int64_t consecutive_errors_ = 0;
  bool size_checked_ = false;  // check_fits ran (on the first example)
  Example pad_template_;
  std::vector<std::thread> threads_;
};

// Stacks rows with the same keys: tensors with at::stack, numbers into 1-D tensors, strings and
// lists into lists; pin_memory: the stacked tensors in pinned host memory. Errors name the key
// and the row.
Example stack_examples(const std::vector<Example>& rows, bool pin_memory = false);
// The same structure filled with zeros, empty strings and empty lists (inference padding).
Example zeros_like(const Example& ex);

}  // namespace bv::data
