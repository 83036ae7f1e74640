#include "distributed/fsdp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/tensor_util.h"
#include "distributed/dist.h"
#include "models/remat.h"

namespace bv {

namespace {

// A tensor of `shape` whose storage is one zero: what Params holds for a parameter kept
// elsewhere. A plain leaf (not a view), so the trainer can mark it as requiring grad.
at::Tensor make_placeholder(const std::vector<int64_t>& shape, const at::TensorOptions& opts) {
  std::vector<int64_t> strides(shape.size(), 0);
  at::Tensor t = at::empty_strided(shape, strides, opts);
  if (t.numel() > 0) t.as_strided({1}, {1}).zero_();
  return t;
}

// The autograd node of a fetch: forward broadcasts from the owner; backward starts reducing the
// gradient to the owner, which gets the mean over processes (FsdpParams::reduce_grad adds it to
// the owner's gradient; the node passes none back itself). Every process runs both, in the same
// order (backward visits the same graph on every process).
struct Fetch : torch::autograd::Function<Fetch> {
  // input: the owner's part (the owner) or FsdpParams::dummy_ (the others). kept: 1 when the
  // value is the one remat's forward kept (FsdpParams::kept_).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor input,
                            FsdpParams* self, int64_t index, int64_t row, int64_t kept) {
    ctx->saved_data["self"] = reinterpret_cast<int64_t>(self);
    ctx->saved_data["index"] = index;
    ctx->saved_data["row"] = row;
    return self->receive({static_cast<size_t>(index), row}, input, kept != 0);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* self = reinterpret_cast<FsdpParams*>(ctx->saved_data["self"].toInt());
    self->reduce_grad(
        {static_cast<size_t>(ctx->saved_data["index"].toInt()), ctx->saved_data["row"].toInt()},
        grads[0]);
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

FsdpParams::FsdpParams(std::shared_ptr<DistGroup> group, std::vector<FsdpParamSpec> specs,
                       bool reshard_after_forward, bool wire_bfloat16)
    : group_(std::move(group)), reshard_after_forward_(reshard_after_forward),
      wire_bfloat16_(wire_bfloat16) {
  BV_CHECK(group_, "fsdp: no process group");
  rank_ = dist_rank(*group_);
  world_ = dist_world_size(*group_);
  at::NoGradGuard no_grad;
  for (auto& s : specs) {
    BV_CHECK(s.full.defined(), "fsdp: parameter '", s.name, "' has no value");
    Param p;
    p.name = s.name;
    p.shape = s.full.sizes().vec();
    p.options = s.full.options();
    p.owners = s.owners;
    bool split = p.owners.size() != 1;
    BV_CHECK(!p.owners.empty() && (!split || (s.full.dim() >= 1 &&
                                              static_cast<int64_t>(p.owners.size()) == p.shape[0])),
             "fsdp: parameter '", s.name, "' ", shape_string(s.full),
             " needs one owner or one "
             "per row of dim 0, got ",
             p.owners.size());
    for (int o : p.owners) {
      BV_CHECK(o >= 0 && o < world_, "fsdp: owner ", o, " of '", s.name, "' is not a rank (0 to ",
               world_ - 1, ")");
    }
    if (!split) {
      if (p.owners[0] == rank_) p.owned = s.full.detach().clone();
    } else {
      std::vector<int64_t> mine;
      p.owned_row.assign(p.owners.size(), -1);
      for (size_t r = 0; r < p.owners.size(); ++r) {
        if (p.owners[r] != rank_) continue;
        p.owned_row[r] = static_cast<int64_t>(mine.size());
        mine.push_back(static_cast<int64_t>(r));
      }
      if (!mine.empty()) {
        p.owned = s.full.detach().index_select(0, at::tensor(mine, at::kLong).to(s.full.device()));
      }
    }
    if (p.owned.defined()) p.owned.set_requires_grad(true);
    p.placeholder = make_placeholder(p.shape, p.options);
    s.full = at::Tensor();  // the caller's copy may go now
    by_placeholder_[p.placeholder.unsafeGetTensorImpl()] = params_.size();
    params_.push_back(std::move(p));
  }
  // On the parameters' device, like everything a step touches.
  c10::Device device = params_.empty() ? c10::Device(c10::kCPU) : params_[0].options.device();
  dummy_ = at::zeros({}, at::TensorOptions(at::kFloat).device(device)).set_requires_grad(true);
}

FsdpParams::Param& FsdpParams::find(const std::string& name) {
  for (auto& p : params_) {
    if (p.name == name) return p;
  }
  fail("fsdp: no sharded parameter named '", name, "'");
}

const FsdpParams::Param& FsdpParams::find(const std::string& name) const {
  return const_cast<FsdpParams*>(this)->find(name);
}

at::Tensor FsdpParams::placeholder(const std::string& name) const { return find(name).placeholder; }
at::Tensor FsdpParams::owned(const std::string& name) const { return find(name).owned; }

std::vector<int64_t> FsdpParams::rows(const std::string& name, int rank) const {
  const Param& p = find(name);
  std::vector<int64_t> out;
  if (p.owners.size() == 1) return out;
  for (size_t r = 0; r < p.owners.size(); ++r) {
    if (p.owners[r] == rank) out.push_back(static_cast<int64_t>(r));
  }
  return out;
}

std::map<std::string, at::Tensor> FsdpParams::take_grads() {
  finish_reduces();
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    if (!p.owned.defined()) continue;
    at::Tensor g;
    auto it = grads_.find(i);
    if (it != grads_.end()) g = it->second;
    at::Tensor& direct = p.owned.mutable_grad();  // from a use of `owned` outside a fetch
    if (direct.defined()) {
      g = g.defined() ? g + direct : direct;
      direct = at::Tensor();
    }
    if (g.defined()) out[p.name] = g;
  }
  grads_.clear();
  return out;
}

// How much of the gradient reduces may be under way before the oldest is waited for: a few
// tensors (part of a layer: a transformer block has 7 to 16), capped in bytes for large ones.
// scripts/bench_sharding (ViT-B/16, 2 processes): with 4 here and 4 reads prefetched, fsdp ran
// at 0.66 steps/s against 0.43 before either existed, in the same peak memory (1959 MiB against
// 1945); with 16 and 16, at 0.59 steps/s in 2248 MiB.
constexpr int64_t kReduceBytes = 256 << 20;
constexpr size_t kReduceParts = 4;

void FsdpParams::reduce_grad(const Part& part, const at::Tensor& grad) {
  at::NoGradGuard no_grad;
  const Param& p = params_[part.first];
  int owner = part.second < 0 ? p.owners[0] : p.owners[static_cast<size_t>(part.second)];
  // A copy: reduced in place, and the engine may still hold the incoming buffer. Narrow: this
  // rank's gradient rounded to bfloat16, and the sum travels as bfloat16.
  at::Tensor buffer = narrow(p) ? grad.to(grad.options().dtype(at::kBFloat16), false, false,
                                          at::MemoryFormat::Contiguous)
                                : grad.contiguous().clone();
  ++reduces_;
  reduce_bytes_ += static_cast<int64_t>(buffer.nbytes());
  reducing_bytes_ += static_cast<int64_t>(buffer.nbytes());
  reducing_.push_back({part, buffer, dist_reduce_start(*group_, buffer, owner)});
  while (reducing_.size() > 1 &&
         (reducing_bytes_ > kReduceBytes || reducing_.size() > kReduceParts)) {
    finish_reduce();
  }
}

void FsdpParams::finish_reduce() {
  Reducing r = std::move(reducing_.front());
  reducing_.pop_front();
  reducing_bytes_ -= static_cast<int64_t>(r.buffer.nbytes());
  dist_wait(*r.pending);
  const Param& p = params_[r.part.first];
  int64_t row = r.part.second;
  int owner = row < 0 ? p.owners[0] : p.owners[static_cast<size_t>(row)];
  if (owner != rank_) return;
  at::NoGradGuard no_grad;
  // Narrow: the bfloat16 sum becomes float32 here, before the division and the float32
  // accumulation below (over accum_steps passes and a part's several reads).
  at::Tensor sum = narrow(p) ? r.buffer.to(at::kFloat) : r.buffer;
  at::Tensor g = sum.div_(static_cast<double>(world_));
  at::Tensor& total = grads_[r.part.first];
  if (row < 0) {
    total = total.defined() ? total.add_(g) : g;
  } else {
    if (!total.defined()) total = at::zeros_like(p.owned);
    total[p.owned_row[static_cast<size_t>(row)]].add_(g);
  }
}

void FsdpParams::finish_reduces() {
  while (!reducing_.empty()) finish_reduce();
}

at::Tensor FsdpParams::fetch(Param& p, int64_t row) {
  int owner = row < 0 ? p.owners[0] : p.owners[static_cast<size_t>(row)];
  at::Tensor input = dummy_;
  if (owner == rank_) input = row < 0 ? p.owned : p.owned[p.owned_row[static_cast<size_t>(row)]];
  size_t index = static_cast<size_t>(&p - params_.data());
  Part part{index, row};
  auto kept = kept_.find(part);
  if (kept != kept_.end()) {
    // Kept by remat's forward: no broadcast, and not a read of the prefetch script. Another
    // gradient-free read (a whole stack read by each layer) leaves it kept; the recomputation's
    // read takes it, with the gradient path to the owner.
    if (!at::GradMode::is_enabled()) {
      return kept->second.defined() ? kept->second : own_value(p, row);
    }
    return Fetch::apply(input, this, static_cast<int64_t>(index), row, int64_t{1});
  }
  size_t pos = reads_.size();
  reads_.push_back(part);
  on_script_ = on_script_ && pos < last_reads_.size() && last_reads_[pos] == part;
  at::Tensor value = Fetch::apply(input, this, static_cast<int64_t>(index), row, int64_t{0});
  if (!reshard_after_forward_ && !at::GradMode::is_enabled() && models::remat_forward_running()) {
    // A copy of the tensor object, so that the recomputation's Fetch marking it as its output
    // does not touch what the forward holds.
    at::Tensor keep = owner == rank_ ? at::Tensor() : value.detach();
    if (keep.defined()) kept_bytes_ += static_cast<int64_t>(keep.nbytes());
    kept_peak_bytes_ = std::max(kept_peak_bytes_, kept_bytes_);
    kept_[part] = keep;
  }
  if (on_script_) prefetch_after(pos);  // after this read's own broadcast, not before it
  return value;
}

// The owner's value of a part, as a new contiguous tensor (broadcast in place; the others
// receive into contiguous ones).
at::Tensor FsdpParams::owner_value(const Param& p, int64_t row) const {
  const at::Tensor& part = row < 0 ? p.owned : p.owned[p.owned_row[static_cast<size_t>(row)]];
  return part.detach().clone(at::MemoryFormat::Contiguous);
}

bool FsdpParams::narrow(const Param& p) const {
  return wire_bfloat16_ && p.options.dtype() == at::kFloat;
}

at::Tensor FsdpParams::send_buffer(const Param& p, int64_t row) const {
  int owner = row < 0 ? p.owners[0] : p.owners[static_cast<size_t>(row)];
  if (rank_ == owner) {
    if (!narrow(p)) return owner_value(p, row);
    const at::Tensor& part = row < 0 ? p.owned : p.owned[p.owned_row[static_cast<size_t>(row)]];
    return part.detach().to(p.options.dtype(at::kBFloat16), false, true,
                            at::MemoryFormat::Contiguous);  // round to nearest even
  }
  return at::empty(std::vector<int64_t>(p.shape.begin() + (row < 0 ? 0 : 1), p.shape.end()),
                   narrow(p) ? p.options.dtype(at::kBFloat16) : p.options);
}

at::Tensor FsdpParams::from_wire(const Param& p, const at::Tensor& buffer) const {
  return narrow(p) ? buffer.to(p.options.dtype()) : buffer;
}

at::Tensor FsdpParams::own_value(const Param& p, int64_t row) const {
  return narrow(p) ? from_wire(p, send_buffer(p, row)) : owner_value(p, row);
}

std::shared_ptr<PendingCollective> FsdpParams::broadcast(const Param& p, const at::Tensor& buffer,
                                                         int owner, bool start) {
  ++broadcasts_;
  broadcast_bytes_ += static_cast<int64_t>(buffer.nbytes());
  // A broadcast copies bits: a bfloat16 buffer goes as the float16 view of its bytes, 2 bytes a
  // value on every backend (bv.dist now keeps bfloat16 as it is too; the view is harmless).
  at::Tensor wire = narrow(p) ? buffer.view(at::kHalf) : buffer;
  if (start) return dist_broadcast_start(*group_, wire, owner);
  std::vector<at::Tensor> bufs{wire};
  dist_broadcast(*group_, bufs, owner);
  return nullptr;
}

at::Tensor FsdpParams::receive(const Part& part, const at::Tensor& /*input*/, bool kept) {
  if (kept) {
    auto k = kept_.find(part);
    BV_CHECK(k != kept_.end(), "fsdp: part ", part.second, " of '", params_[part.first].name,
             "' was not kept");
    at::Tensor value = std::move(k->second);
    kept_.erase(k);
    if (!value.defined()) return own_value(params_[part.first], part.second);  // the owner's
    kept_bytes_ -= static_cast<int64_t>(value.nbytes());
    return value;
  }
  auto it = ahead_.find(part);
  if (it != ahead_.end()) {
    Ahead a = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) ahead_.erase(it);
    dist_wait(*a.pending);
    ahead_bytes_ -= static_cast<int64_t>(a.value.nbytes());
    ++prefetched_;
    return from_wire(params_[part.first], a.value);
  }
  const Param& p = params_[part.first];
  int owner = part.second < 0 ? p.owners[0] : p.owners[static_cast<size_t>(part.second)];
  // The owner sends a copy of its part (the broadcast writes in place).
  at::Tensor out = send_buffer(p, part.second);
  broadcast(p, out, owner, false);
  return from_wire(p, out);
}

// How far ahead reads are prefetched: a few tensors, so that the next ones travel while this
// one computes and the buffers stay small (measured: see kReduceParts); capped in bytes.
constexpr int64_t kPrefetchBytes = 256 << 20;
constexpr size_t kPrefetchReads = 4;

void FsdpParams::prefetch_after(size_t pos) {
  size_t j = std::max(started_up_to_, pos + 1);
  for (; j < last_reads_.size() && j <= pos + kPrefetchReads; ++j) {
    if (!ahead_.empty() && ahead_bytes_ >= kPrefetchBytes) break;
    const Part& part = last_reads_[j];
    if (part.second < 0 && cache_.count(part.first)) continue;  // whole, already here
    const Param& p = params_[part.first];
    int owner = part.second < 0 ? p.owners[0] : p.owners[static_cast<size_t>(part.second)];
    at::NoGradGuard no_grad;
    at::Tensor buffer = send_buffer(p, part.second);
    Ahead a{buffer, broadcast(p, buffer, owner, true)};
    ahead_bytes_ += static_cast<int64_t>(buffer.nbytes());
    ahead_[part].push_back(std::move(a));
  }
  started_up_to_ = std::max(started_up_to_, j);
}

void FsdpParams::clear_cache() {
  finish_reduces();  // the backward is over: nothing is left to overlap them with
  cache_.clear();
  kept_.clear();  // kept for a recomputation that did not come (no backward through the layer)
  kept_bytes_ = 0;
  for (auto& [part, queue] : ahead_) {
    for (Ahead& a : queue) dist_wait(*a.pending);  // started everywhere: finished alike
  }
  ahead_.clear();
  ahead_bytes_ = 0;
  if (!reads_.empty()) last_reads_ = std::move(reads_);  // a second call keeps the script
  reads_.clear();
  on_script_ = true;
  started_up_to_ = 0;
}

at::Tensor FsdpParams::whole(const at::Tensor& held) {
  auto it = by_placeholder_.find(held.unsafeGetTensorImpl());
  if (it == by_placeholder_.end()) return at::Tensor();
  auto cached = cache_.find(it->second);
  if (cached != cache_.end()) return cached->second;
  Param& p = params_[it->second];
  at::Tensor value;
  if (p.owners.size() == 1) {
    value = fetch(p, -1);
  } else {
    std::vector<at::Tensor> rows;
    for (int64_t r = 0; r < p.shape[0]; ++r) rows.push_back(fetch(p, r));
    value = at::stack(rows);
  }
  // Only a value with a gradient path is kept for later reads: one fetched without gradients
  // (remat's first forward of a layer) would give the backward's recompute no way back to the
  // owner, and the parameter would get no gradient.
  if (at::GradMode::is_enabled()) cache_[it->second] = value;
  return value;
}

at::Tensor FsdpParams::layer(const at::Tensor& held, int64_t i) {
  auto it = by_placeholder_.find(held.unsafeGetTensorImpl());
  if (it == by_placeholder_.end()) return at::Tensor();
  Param& p = params_[it->second];
  if (p.owners.size() == 1) return whole(held)[i];
  return fetch(p, i);
}

at::Tensor FsdpParams::gather(const std::string& name) {
  at::NoGradGuard no_grad;
  Param& p = find(name);
  if (p.owners.size() == 1) {
    at::Tensor out = p.owners[0] == rank_ ? p.owned.detach().clone()
                                          : at::empty(p.shape, p.options);
    std::vector<at::Tensor> bufs{out};
    dist_broadcast(*group_, bufs, p.owners[0]);
    return out;
  }
  at::Tensor out = at::empty(p.shape, p.options);
  for (int r = 0; r < world_; ++r) {
    std::vector<int64_t> rows_r = rows(name, r);
    if (rows_r.empty()) continue;
    std::vector<int64_t> block_shape = p.shape;
    block_shape[0] = static_cast<int64_t>(rows_r.size());
    at::Tensor block = r == rank_ ? p.owned.detach().clone() : at::empty(block_shape, p.options);
    std::vector<at::Tensor> bufs{block};
    dist_broadcast(*group_, bufs, r);
    out.index_copy_(0, at::tensor(rows_r, at::kLong).to(out.device()), block);
  }
  return out;
}

}  // namespace bv
