#include "data/pipeline.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/signals.h"
#include "core/tensor_util.h"
#include "device/machine.h"

namespace bv::data {

uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// ---------------------------------------------------------------------------------------------
// Streams

IndexStream::IndexStream(std::vector<int64_t> indices, uint64_t seed, bool shuffle,
                         int64_t buffer_size, bool repeat)
    : order_(std::move(indices)), seed_(seed), buffer_size_(shuffle ? buffer_size : 0),
      repeat_(repeat) {
  if (shuffle && order_.size() > 1) {
    // The source's one-time shuffle (big_vision's jsonl shuffles its index list once).
    Rng rng(mix_seed(seed, 0xfeed));
    for (size_t i = order_.size() - 1; i > 0; --i) {
      size_t j = static_cast<size_t>(rng.integer(0, static_cast<int64_t>(i)));
      std::swap(order_[i], order_[j]);
    }
  }
}

void IndexStream::start_epoch() {
  ++epoch_;
  cursor_ = 0;
  rng_ = Rng(mix_seed(seed_, static_cast<uint64_t>(epoch_)));
  buffer_.clear();
}

// tf.data's shuffle buffer: fill it, then repeatedly emit a random slot and refill that slot
// from the input; when the input is done, drain the rest in random order.
bool IndexStream::next(int64_t* out) {
  if (order_.empty()) return false;
  if (epoch_ < 0) start_epoch();
  while (true) {
    if (buffer_size_ <= 1) {
      if (cursor_ < order_.size()) {
        *out = order_[cursor_++];
        return true;
      }
    } else {
      while (static_cast<int64_t>(buffer_.size()) < buffer_size_ && cursor_ < order_.size()) {
        buffer_.push_back(order_[cursor_++]);
      }
      if (!buffer_.empty()) {
        size_t j = static_cast<size_t>(rng_.integer(0, static_cast<int64_t>(buffer_.size()) - 1));
        *out = buffer_[j];
        buffer_[j] = buffer_.back();
        buffer_.pop_back();
        return true;
      }
    }
    if (!repeat_) return false;
    start_epoch();
  }
}

ItemStream::ItemStream(std::vector<IndexStream> streams, std::vector<double> weights, uint64_t seed)
    : streams_(std::move(streams)), rng_(mix_seed(seed, 0xa11)) {
  BV_CHECK(!streams_.empty() && streams_.size() == weights.size(), "data: bad mixture");
  double total = 0;
  for (double w : weights) {
    BV_CHECK(w >= 0, "data: mixture weights must not be negative, got ", w);
    total += w;
    cumulative_.push_back(total);
  }
  BV_CHECK(total > 0, "data: mixture weights sum to zero");
  for (double& c : cumulative_) c /= total;
}

bool ItemStream::next(Item* out) {
  size_t s = 0;
  if (streams_.size() > 1) {
    double u = rng_.uniform();
    while (s + 1 < cumulative_.size() && u >= cumulative_[s]) ++s;
  }
  // Like sample_from_datasets(stop_on_empty_dataset=True): one source ending ends the mixture.
  if (!streams_[s].next(&out->index)) return false;
  out->source = static_cast<int>(s);
  out->epoch = streams_[s].epoch();
  out->seq = seq_++;
  return true;
}

// ---------------------------------------------------------------------------------------------
// The pipeline

Pipeline::Pipeline(ItemStream stream, WorkerFactory factory, PipelineOptions opts, uint64_t skip)
    : opts_(opts), stream_(std::move(stream)), next_seq_(skip), consumed_(skip) {
  BV_CHECK(opts_.batch_size >= 1, "data: batch_size must be at least 1, got ", opts_.batch_size);
  BV_CHECK(opts_.workers >= 1, "data: need at least one worker, got ", opts_.workers);
  Item item;
  for (uint64_t i = 0; i < skip; ++i) {
    // A stop request (SIGTERM, SIGINT) ends a long skip: checked every 65536 items (microseconds).
    if ((i & 0xffff) == 0xffff && stop_requested()) {
      fail("stopped (", stop_signal_name(), ") while skipping to data position ", skip, " (at ", i,
           ")");
    }
    if (!stream_.next(&item)) {
      end_seq_ = i;
      next_seq_ = consumed_ = i;
      break;
    }
  }
  for (int id = 0; id < opts_.workers; ++id) {
    threads_.emplace_back([this, id, factory] { worker_loop(id, factory); });
  }
}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  result_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool Pipeline::claim(Item* item) {
  std::unique_lock<std::mutex> lock(mu_);
  // Saturated: a batch_size near 2^63 must not wrap the window round to nothing.
  auto batches = static_cast<uint64_t>(opts_.prefetch_batches + 1);
  auto batch = static_cast<uint64_t>(opts_.batch_size), workers = uint64_t(opts_.workers);
  uint64_t window = batch <= (UINT64_MAX - workers) / batches ? batches * batch + workers
                                                              : UINT64_MAX;
  work_cv_.wait(lock, [&] { return stop_ || next_seq_ < consumed_ + window; });
  if (stop_ || next_seq_ >= end_seq_) return false;
  if (!stream_.next(item)) {
    end_seq_ = next_seq_;
    result_cv_.notify_all();
    return false;
  }
  ++next_seq_;
  return true;
}

void Pipeline::worker_loop(int id, WorkerFactory factory) {
  use_one_thread_here();
  WorkerFn fn;
  try {
    fn = factory(id);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_.empty()) fatal_ = str("data worker ", id, " failed to start: ", e.what());
    result_cv_.notify_all();
    return;
  }
  Item item;
  while (claim(&item)) {
    Result r;
    r.source = item.source;
    try {
      r.example = fn(item);
      r.ok = true;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    results_[item.seq] = std::move(r);
    result_cv_.notify_all();
  }
}

bool Pipeline::next(Example* batch) {
  std::vector<Example> rows;
  while (static_cast<int64_t>(rows.size()) < opts_.batch_size) {
    Result r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      result_cv_.wait(lock, [&] {
        return !fatal_.empty() || results_.count(consumed_) || consumed_ >= end_seq_;
      });
      if (!fatal_.empty()) throw Error(fatal_);
      if (!results_.count(consumed_)) break;  // the stream ended
      r = std::move(results_[consumed_]);
      results_.erase(consumed_);
      ++consumed_;
    }
    work_cv_.notify_all();
    if (!r.ok) {
      if (!opts_.skip_errors) throw Error(r.error);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++skipped_;
        size_t s = static_cast<size_t>(r.source);
        if (skipped_by_source_.size() <= s) skipped_by_source_.resize(s + 1, 0);
        ++skipped_by_source_[s];
        last_skipped_error_ = r.error;
      }
      if (++consecutive_errors_ > opts_.max_consecutive_errors) {
        fail("data: more than ", opts_.max_consecutive_errors,
             " examples in a row failed (skip_errors); the last one: ", r.error);
      }
      continue;
    }
    consecutive_errors_ = 0;
    if (!size_checked_) check_fits(r.example);
    rows.push_back(std::move(r.example));
  }
  if (rows.empty()) return false;
  if (opts_.pad_last_batch) {
    if (pad_template_.empty()) pad_template_ = zeros_like(rows[0]);
    std::vector<bool> mask(rows.size(), true);
    while (static_cast<int64_t>(rows.size()) < opts_.batch_size) {
      rows.push_back(pad_template_);
      mask.push_back(false);
    }
    *batch = stack_examples(rows, opts_.pin_memory);
    at::Tensor m = at::zeros({opts_.batch_size}, at::kBool);
    for (size_t i = 0; i < mask.size(); ++i)
      m[static_cast<int64_t>(i)] = static_cast<bool>(mask[i]);
    batch->emplace_back("_mask", Value::of_tensor(m));
    return true;
  }
  if (static_cast<int64_t>(rows.size()) < opts_.batch_size) return false;  // drop the remainder
  *batch = stack_examples(rows, opts_.pin_memory);
  return true;
}

// Refuses (for good: the workers stop, and every later next() throws the same) a batch size
// whose buffers cannot fit in memory, judged from the first example, before a batch is built.
void Pipeline::check_fits(const Example& first) {
  size_checked_ = true;
  int64_t memory = opts_.memory_bytes < 0 ? host_memory_available() : opts_.memory_bytes;
  if (memory < 0) return;  // unknown (no /proc/meminfo, no cgroup limit)
  double per_example = static_cast<double>(example_bytes(first));
  double held = static_cast<double>(opts_.prefetch_batches) + 2;
  double need = per_example * static_cast<double>(opts_.batch_size) * held;
  if (need <= static_cast<double>(memory)) return;
  std::string msg = str(
      "data: ", opts_.batch_size_key, " asks for batches of ", opts_.batch_size,
      " examples (per process), which cannot fit in memory: an example takes ",
      bytes_string(per_example), " after the pp, and the pipeline holds ", held, " batches (",
      opts_.prefetch_batches, " prefetched, the one being gathered and its stacked copy), about ",
      bytes_string(need), ", where this machine has ", bytes_string(static_cast<double>(memory)),
      " available; make ", opts_.batch_size_key, " smaller");
  {
    std::lock_guard<std::mutex> lock(mu_);
    fatal_ = msg;
    stop_ = true;
  }
  work_cv_.notify_all();
  throw Error(msg);
}

uint64_t Pipeline::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumed_;
}

int64_t Pipeline::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

std::vector<int64_t> Pipeline::skipped_by_source() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_by_source_;
}

std::string Pipeline::last_skipped_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_skipped_error_;
}

// ---------------------------------------------------------------------------------------------
// Batching

namespace {

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "boolean";
    case Value::Kind::kInt: return "integer";
    case Value::Kind::kFloat: return "number";
    case Value::Kind::kString: return "string";
    case Value::Kind::kFile: return "file";
    case Value::Kind::kTensor: return "tensor";
    case Value::Kind::kList: return "list";
  }
  return "?";
}

// A batch's tensor, in pinned host memory when asked: the device copy then starts without a
// staging copy, and does not hold the host while it runs (device/device_copy.h).
at::Tensor batch_tensor(at::IntArrayRef shape, at::ScalarType dtype, bool pin_memory) {
  return at::empty(shape, at::TensorOptions(dtype).pinned_memory(pin_memory));
}

}  // namespace

Example stack_examples(const std::vector<Example>& rows, bool pin_memory) {
  BV_CHECK(!rows.empty(), "data: cannot stack an empty batch");
  Example out;
  for (const auto& [key, first] : rows[0]) {
    std::vector<const Value*> column;
    for (size_t r = 0; r < rows.size(); ++r) {
      const Value* v = find(rows[r], key);
      BV_CHECK(v, "data: key '", key, "' is missing in example ", r + 1, " of the batch");
      BV_CHECK(v->kind == first.kind ||
                   (first.kind == Value::Kind::kInt && v->kind == Value::Kind::kFloat) ||
                   (first.kind == Value::Kind::kFloat && v->kind == Value::Kind::kInt),
               "data: key '", key, "' is a ", kind_name(first.kind), " in the first example but a ",
               kind_name(v->kind), " in example ", r + 1);
      column.push_back(v);
    }
    Value stacked;
    switch (first.kind) {
      case Value::Kind::kTensor: {
        std::vector<at::Tensor> ts;
        for (size_t r = 0; r < column.size(); ++r) {
          BV_CHECK(column[r]->tensor.sizes() == first.tensor.sizes(), "data: key '", key,
                   "' has shape ", shape_string(first.tensor), " in the first example but ",
                   shape_string(column[r]->tensor), " in example ", r + 1,
                   " (pad or resize to one shape before batching)");
          ts.push_back(column[r]->tensor);
        }
        std::vector<int64_t> shape{static_cast<int64_t>(ts.size())};
        for (int64_t d : first.tensor.sizes()) shape.push_back(d);
        at::Tensor out = batch_tensor(shape, first.tensor.scalar_type(), pin_memory);
        stacked = Value::of_tensor(at::stack_out(out, ts));
        break;
      }
      case Value::Kind::kInt:
      case Value::Kind::kFloat: {
        bool all_int = true;
        for (const Value* v : column) all_int = all_int && v->kind == Value::Kind::kInt;
        at::Tensor t = batch_tensor({static_cast<int64_t>(column.size())},
                                    all_int ? at::kLong : at::kFloat, pin_memory);
        for (size_t r = 0; r < column.size(); ++r) {
          const Value* v = column[r];
          if (all_int) {
            t.data_ptr<int64_t>()[r] = v->i;
          } else {
            t.data_ptr<float>()[r] = static_cast<float>(v->kind == Value::Kind::kInt ? v->i : v->f);
          }
        }
        stacked = Value::of_tensor(t);
        break;
      }
      case Value::Kind::kBool: {
        at::Tensor t = batch_tensor({static_cast<int64_t>(column.size())}, at::kBool, pin_memory);
        for (size_t r = 0; r < column.size(); ++r) t.data_ptr<bool>()[r] = column[r]->b;
        stacked = Value::of_tensor(t);
        break;
      }
      case Value::Kind::kString:
      case Value::Kind::kList:
      case Value::Kind::kFile:
      case Value::Kind::kNone: {
        stacked.kind = Value::Kind::kList;
        for (const Value* v : column) stacked.list.push_back(*v);
        break;
      }
    }
    out.emplace_back(key, std::move(stacked));
  }
  return out;
}

Example zeros_like(const Example& ex) {
  Example out;
  for (const auto& [key, v] : ex) {
    Value z;
    z.kind = v.kind;
    if (v.kind == Value::Kind::kTensor) z.tensor = at::zeros_like(v.tensor);
    out.emplace_back(key, std::move(z));
  }
  return out;
}

}  // namespace bv::data
