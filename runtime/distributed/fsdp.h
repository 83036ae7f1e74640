// Fully sharded parameters (big_vision's fsdp strategy on the 1-D data mesh, in the style of
// ZeRO-3): every large parameter, or every layer of a large layer stack, has one owner process
// that alone keeps it between steps. The model's Params hold placeholders for these (tensors of
// the full shape whose one element is repeated: no memory). While FsdpParams is the thread's
// models::ParamSource, a read of a placeholder brings the value from its owner (a broadcast);
// the value's backward sends its gradient back to the owner (a reduce, started without waiting
// so that it overlaps the rest of the backward: reduce_grad), which averages it over processes.
// A scanned model reads its stacks one layer at a time (models::layer_param), so a layer is
// fetched when the forward reaches it.
//
// Every process must make the same reads in the same order (the same model on the same batch
// shapes): each read is a collective.
//
// Prefetch: the reads of one run (a training step's forward and backward, between two
// clear_cache calls) are remembered in order. While the next run makes the same reads, each
// read starts the broadcasts of the reads that followed it last time (up to kPrefetchReads or
// kPrefetchBytes ahead), so the next parameters travel while this layer computes. Every
// process decides this alike from the same reads, so the collectives still match.
//
// Under remat (models/remat.h) a layer's parts are read twice a step: by its gradient-free forward
// and by its recomputation in the backward. reshard_after_forward (FSDP's choice; true by default)
// drops the forward's values, so each part is broadcast twice. With false, a part read during
// remat's forward is kept (on the ranks that do not own it; the owner has its own) until the
// recomputation's read, which takes it with its gradient path and no broadcast; the script of
// prefetches holds broadcasts only, so a kept read is never prefetched. The cost: the layers'
// parts stay whole from their forward to their recomputation (at the end of the forward, every
// layer's). Every process keeps and serves alike: the decision follows the reads.
//
// wire_dtype bfloat16 (config.sharding_wire_dtype; float32, the default, sends parameters and
// gradients as they are): a float32 parameter's parts travel as bfloat16 both ways. The owner
// broadcasts its float32 value rounded to bfloat16 (round to nearest even), and every rank, the
// owner included, computes with that rounded value converted back to float32: all replicas of the
// forward see the same parameter, as they do in float32. Each rank rounds its gradient of a part
// to bfloat16 and the sum over ranks arrives at the owner as bfloat16 (Gloo and NCCL add two
// bfloat16 values and round the sum to bfloat16 at each hop); the owner converts that sum to
// float32, divides it by the number of processes and adds it to its float32 gradient, so the
// accumulation over accum_steps passes and over a part's several reads is float32. The owned
// values, their gradients and the optimizer's state stay float32; gather (whole values for
// checkpoints and evaluation) sends float32; a parameter of another dtype travels as it is.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/model.h"

namespace bv {

struct DistGroup;
struct PendingCollective;

struct FsdpParamSpec {
  std::string name;
  at::Tensor full;          // the starting value; each process keeps only the parts it owns
  std::vector<int> owners;  // one owner (the whole tensor) or one per row of dim 0 (a stack)
};

class FsdpParams : public models::ParamSource {
 public:
  FsdpParams(std::shared_ptr<DistGroup> group, std::vector<FsdpParamSpec> specs,
             bool reshard_after_forward = true, bool wire_bfloat16 = false);

  // What the model's Params hold for `name`.
  at::Tensor placeholder(const std::string& name) const;
  // What this process owns of `name`: the whole tensor, the rows it owns stacked ([k, ...]) for a
  // split one, or undefined when it owns none. A leaf that requires grad; the optimizer updates
  // it in place.
  at::Tensor owned(const std::string& name) const;
  // The rows of a split parameter that `rank` owns, in order (empty for a whole one).
  std::vector<int64_t> rows(const std::string& name, int rank) const;
  // The gradients of this process's parts after backward passes (already averaged over
  // processes); they are taken, so the next step starts from none.
  std::map<std::string, at::Tensor> take_grads();
  // The whole value on every process (a collective; no gradient).
  at::Tensor gather(const std::string& name);
  // The end of a run (a step): forgets the values fetched whole, finishes prefetches that were
  // not used, and keeps this run's reads as the script for the next run's prefetches.
  void clear_cache();
  // Reads served by a prefetch since this FsdpParams was made (tests, diagnostics).
  int64_t prefetched() const { return prefetched_; }
  // Broadcasts of parts started by reads and prefetches, and gradient reduces, since this
  // FsdpParams was made (tests, diagnostics; gather's are not counted).
  int64_t broadcasts() const { return broadcasts_; }
  int64_t reduces() const { return reduces_; }
  // The bytes of those broadcasts and reduces (each counted once, as it is handed to the
  // collective: the bfloat16 copies under wire_dtype bfloat16).
  int64_t broadcast_bytes() const { return broadcast_bytes_; }
  int64_t reduce_bytes() const { return reduce_bytes_; }
  // The most bytes of parts kept for remat's recomputation at any time (reshard_after_forward =
  // false) on this rank, and the bytes kept now.
  int64_t kept_peak_bytes() const { return kept_peak_bytes_; }
  int64_t kept_bytes() const { return kept_bytes_; }  // now

  at::Tensor whole(const at::Tensor& held) override;
  at::Tensor layer(const at::Tensor& held, int64_t i) override;

  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    at::TensorOptions options;
    std::vector<int> owners;         // size 1 (whole) or shape[0] (split by rows)
    std::vector<int64_t> owned_row;  // split: row -> index in `owned`, -1 when not ours
    at::Tensor owned, placeholder;
  };
  // Broadcasts part `row` of `p` (-1: the whole tensor) from its owner, as a tensor whose
  // gradient goes back to the owner.
  at::Tensor fetch(Param& p, int64_t row);

  using Part = std::pair<size_t, int64_t>;  // (parameter index, row; -1 = whole)
  // Part `part`'s value from its owner (the forward of a fetch): a prefetched broadcast's, else
  // one made now; `kept`: the value remat's forward kept (taken). `input`: the owner's own value
  // (others: dummy_), the fetch's autograd input; the value sent is read from `owned`.
  at::Tensor receive(const Part& part, const at::Tensor& input, bool kept);
  // The backward of a fetch: starts reducing `grad` to the part's owner and returns at once, so
  // the reduce overlaps the rest of the backward. The owner adds the reduced value (a mean over
  // processes) to its gradient when the reduce is finished: once more than kReduceParts or
  // kReduceBytes are under way (the oldest first), at the end of the run, or in take_grads.
  void reduce_grad(const Part& part, const at::Tensor& grad);

  DistGroup& group() { return *group_; }
  const Param& param(size_t index) const { return params_[index]; }
  at::Tensor dummy_;  // the input of fetches of parts we do not own (so backward still runs)

 private:
  Param& find(const std::string& name);
  const Param& find(const std::string& name) const;
  struct Ahead {
    at::Tensor value;
    std::shared_ptr<PendingCollective> pending;
  };
  // Starts the broadcasts of the reads that followed read number `pos` in the last run.
  void prefetch_after(size_t pos);
  at::Tensor owner_value(const Param& p, int64_t row) const;
  // Whether `p`'s parts travel as bfloat16 (wire_dtype bfloat16 and a float32 parameter).
  bool narrow(const Param& p) const;
  // What a broadcast of part `row` of `p` sends (the owner: owner_value, as bfloat16 when
  // narrow) or receives into (the others: a new buffer of that dtype), and its value for the
  // model (the buffer, or its float32 copy when narrow: the same on every rank).
  at::Tensor send_buffer(const Param& p, int64_t row) const;
  at::Tensor from_wire(const Param& p, const at::Tensor& buffer) const;
  // The owner's own value of a part that it does not broadcast (one kept for remat's
  // recomputation): what the others received, rounded alike when narrow.
  at::Tensor own_value(const Param& p, int64_t row) const;
  // Broadcasts `buffer` from `owner`: now (start false) or started (the pending collective).
  std::shared_ptr<PendingCollective> broadcast(const Param& p, const at::Tensor& buffer, int owner,
                                               bool start);
  struct Reducing {
    Part part;
    at::Tensor buffer;
    std::shared_ptr<PendingCollective> pending;
  };
  void finish_reduce();  // the oldest under way
  void finish_reduces();

  std::shared_ptr<DistGroup> group_;
  int rank_ = 0, world_ = 1;
  std::vector<Param> params_;
  std::unordered_map<const void*, size_t> by_placeholder_;  // TensorImpl* -> index
  std::map<size_t, at::Tensor> cache_;                      // whole values fetched this step
  std::vector<Part> reads_, last_reads_;     // this run's reads in order, and the last run's
  bool on_script_ = true;                    // this run has read what the last one did, so far
  size_t started_up_to_ = 0;                 // last_reads_ positions below this were prefetched
  std::map<Part, std::deque<Ahead>> ahead_;  // prefetches under way, in read order per part
  int64_t ahead_bytes_ = 0, prefetched_ = 0;
  std::deque<Reducing> reducing_;  // gradient reduces under way, oldest first
  int64_t reducing_bytes_ = 0;
  std::map<size_t, at::Tensor> grads_;  // parameter index -> gradient of what this rank owns
  bool reshard_after_forward_ = true;
  bool wire_bfloat16_ = false;
  // Parts read during remat's forward, until the recomputation reads them: the value, or
  // undefined on the owner (it serves its own).
  std::map<Part, at::Tensor> kept_;
  int64_t kept_bytes_ = 0, kept_peak_bytes_ = 0, broadcasts_ = 0, reduces_ = 0;
  int64_t broadcast_bytes_ = 0, reduce_bytes_ = 0;
};

}  // namespace bv
