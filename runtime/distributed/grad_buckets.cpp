#include "distributed/grad_buckets.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/error.h"
#include "distributed/dist.h"

namespace bv {

namespace {

enum class Mode { kIdle, kRecord, kOverlap };

struct Slot {
  std::string name;
  at::Tensor param;   // this step's tensor (held from before_last_backward to after_backward)
  bool seen = false;  // its hook fired in this step's backward
  int64_t bucket = -1, offset = 0, numel = 0;  // where the layout puts it (-1: nowhere)
  // The tensor that carries our hook. A weak reference keeps its address from being reused by
  // a new tensor (a resumed run's parameters) that would then look hooked.
  using ImplPtr = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> hooked{ImplPtr()};
};

struct Bucket {
  std::vector<size_t> slots;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  int64_t numel = 0;
  at::Tensor flat;  // this step's buffer
  at::Tensor wire;  // under wire_bfloat16, flat's bfloat16 copy that the all-reduce sums
  int64_t missing = 0;
  std::shared_ptr<PendingCollective> pending;
};

void ensure_buffer(Bucket& b) {
  if (!b.flat.defined()) {
    b.flat = at::empty({b.numel}, at::TensorOptions().dtype(b.dtype).device(b.device));
  }
}

}  // namespace

struct GradBuckets::State {
  std::shared_ptr<DistGroup> group;
  int64_t bucket_bytes = 0;
  bool wire_bfloat16 = false;
  std::vector<Slot> slots;  // by name
  std::map<std::string, size_t> index;
  Mode mode = Mode::kIdle;
  std::vector<size_t> order;  // kRecord: slots in the order their gradients came
  bool have_layout = false;
  std::vector<Bucket> buckets;
  size_t next_start = 0;  // buckets below this have started
  at::Tensor loss;
  std::shared_ptr<PendingCollective> loss_pending;
  GradBucketStats stats;
  mutable std::mutex mu;

  at::Tensor on_grad(size_t i, const void* impl, const at::Tensor& grad);
  at::Tensor pack(Slot& slot, const at::Tensor& grad, bool add_accumulated);
  void start_ready(bool in_backward);
  bool narrow(at::ScalarType dtype) const { return wire_bfloat16 && dtype == at::kFloat; }
  void finish(Bucket& b);
  void make_layout();
  void allocate();
  void reset() noexcept;
};

namespace {

// The hook on one parameter's TensorImpl: `impl` tells a hook left on a tensor that was since
// replaced (a resumed run's new parameters) from the current one.
void register_hook(const std::shared_ptr<GradBuckets::State>& s, size_t i, const at::Tensor& p) {
  std::weak_ptr<GradBuckets::State> weak = s;
  const void* impl = p.unsafeGetTensorImpl();
  p.register_hook([weak, i, impl](const at::Tensor& grad) -> at::Tensor {
    if (auto state = weak.lock()) return state->on_grad(i, impl, grad);
    return at::Tensor();  // undefined: the gradient as it is
  });
}

}  // namespace

// Called by autograd (on its thread) with slot i's gradient of the last micro-batch, before it is
// added to .grad (which holds the earlier micro-batches' sum). Returns what autograd stores
// instead (undefined: the gradient as it is).
at::Tensor GradBuckets::State::on_grad(size_t i, const void* impl, const at::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mu);
  if (mode == Mode::kIdle || i >= slots.size()) return at::Tensor();
  Slot& slot = slots[i];
  if (!slot.param.defined() || slot.param.unsafeGetTensorImpl() != impl || slot.seen) {
    return at::Tensor();
  }
  slot.seen = true;
  if (mode == Mode::kRecord) {
    order.push_back(i);
    return at::Tensor();
  }
  if (slot.bucket < 0) return at::Tensor();  // not in the layout: after_backward reduces it
  bool first = !slot.param.grad().defined();
  at::Tensor packed = pack(slot, grad, /*add_accumulated=*/true);
  --buckets[slot.bucket].missing;
  start_ready(/*in_backward=*/true);
  // With no earlier micro-batch, autograd takes the bucket's view as .grad instead of keeping
  // the gradient it computed: one copy of the gradients in memory, not two. (accumulate reads
  // .grad only to hand it to after_backward, which replaces it with the averaged view; nothing
  // reads the bucket's values while its all-reduce runs.) After earlier micro-batches .grad is
  // added to in place, as without overlap.
  return first ? packed.view(slot.param.sizes()) : at::Tensor();
}

at::Tensor GradBuckets::State::pack(Slot& slot, const at::Tensor& grad, bool add_accumulated) {
  at::NoGradGuard no_grad;
  Bucket& b = buckets[slot.bucket];
  ensure_buffer(b);
  at::Tensor dst = b.flat.narrow(0, slot.offset, slot.numel);
  BV_CHECK(grad.numel() == dst.numel(), "grad_buckets: the gradient of '", slot.name, "' has ",
           grad.numel(), " elements, its parameter ", dst.numel());
  dst.copy_(grad.reshape({-1}));
  if (add_accumulated) {
    const at::Tensor& earlier = slot.param.grad();  // the earlier micro-batches' sum
    if (earlier.defined()) dst.add_(earlier.reshape({-1}));
  }
  return dst;
}

// Starts the buckets that are complete, in order, up to the first that is not: every rank starts
// the same collectives in the same order whatever order its hooks fire in.
void GradBuckets::State::start_ready(bool in_backward) {
  while (next_start < buckets.size() && buckets[next_start].missing == 0) {
    Bucket& b = buckets[next_start++];
    if (narrow(b.dtype)) {
      at::NoGradGuard no_grad;
      b.wire = b.flat.to(at::kBFloat16);  // round to nearest even
      b.pending = dist_all_reduce_start(*group, b.wire, /*mean=*/false);
    } else {
      b.pending = dist_all_reduce_start(*group, b.flat, /*mean=*/true);
    }
    ++stats.buckets;
    if (in_backward) ++stats.started_in_backward;
  }
}

// Waits for bucket b's all-reduce; a bfloat16 sum goes back into the float32 bucket (exactly)
// and is divided there by the number of processes.
void GradBuckets::State::finish(Bucket& b) {
  dist_wait(*b.pending);
  if (!b.wire.defined()) return;
  b.flat.copy_(b.wire).div_(dist_world_size(*group));
  b.wire = at::Tensor();
}

// Rank 0's arrival order, broadcast, cut into buckets of one dtype and device and at most
// bucket_bytes (a larger gradient is a bucket of its own).
void GradBuckets::State::make_layout() {
  at::Tensor order_t = at::full({static_cast<int64_t>(slots.size())}, -1, at::kLong);
  auto* mine = order_t.data_ptr<int64_t>();
  for (size_t k = 0; k < order.size(); ++k) mine[k] = static_cast<int64_t>(order[k]);
  std::vector<at::Tensor> ts{order_t};
  dist_broadcast(*group, ts, 0);
  std::vector<Bucket> layout;
  int64_t bytes = 0;
  auto* agreed = order_t.data_ptr<int64_t>();
  for (int64_t k = 0; k < order_t.numel() && agreed[k] >= 0; ++k) {
    size_t i = static_cast<size_t>(agreed[k]);
    BV_CHECK(i < slots.size(), "grad_buckets: rank 0's layout names slot ", i, " of ", slots.size(),
             " (the ranks' parameters differ)");
    Slot& slot = slots[i];
    // The parameters' dtype and device: the same on every rank (the same model).
    BV_CHECK(slot.param.defined(), "grad_buckets: rank 0 got a gradient for '", slot.name,
             "', which this rank's step does not have");
    int64_t n = slot.param.numel(), nb = n * static_cast<int64_t>(slot.param.element_size());
    bool fresh = layout.empty() || layout.back().dtype != slot.param.scalar_type() ||
                 layout.back().device != slot.param.device() ||
                 (bytes + nb > bucket_bytes && !layout.back().slots.empty());
    if (fresh) {
      layout.emplace_back();
      layout.back().dtype = slot.param.scalar_type();
      layout.back().device = slot.param.device();
      bytes = 0;
    }
    Bucket& b = layout.back();
    slot.bucket = static_cast<int64_t>(layout.size() - 1);
    slot.offset = b.numel;
    slot.numel = n;
    b.slots.push_back(i);
    b.numel += n;
    bytes += nb;
  }
  buckets = std::move(layout);
  have_layout = true;
  stats.layout_buckets = static_cast<int64_t>(buckets.size());
}

// Resets the buckets for a step. Their buffers are made when their first member arrives, so that
// they do not all exist before the backward has freed any activation.
void GradBuckets::State::allocate() {
  for (Bucket& b : buckets) {
    b.flat = at::Tensor();
    b.wire = at::Tensor();
    b.missing = static_cast<int64_t>(b.slots.size());
    b.pending.reset();
  }
  next_start = 0;
}

void GradBuckets::State::reset() noexcept {
  mode = Mode::kIdle;
  for (Slot& s : slots) {
    s.param = at::Tensor();
    s.seen = false;
  }
  for (Bucket& b : buckets) {
    b.flat = at::Tensor();
    b.wire = at::Tensor();
    b.pending.reset();
  }
  order.clear();
  loss = at::Tensor();
  loss_pending.reset();
}

GradBuckets::GradBuckets(std::shared_ptr<DistGroup> group, std::vector<std::string> names,
                         int64_t bucket_bytes, bool wire_bfloat16)
    : state_(std::make_shared<State>()) {
  BV_CHECK(group, "grad_buckets: no process group");
  BV_CHECK(bucket_bytes > 0, "grad_buckets: bucket_bytes must be positive, got ", bucket_bytes);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  state_->group = std::move(group);
  state_->bucket_bytes = bucket_bytes;
  state_->wire_bfloat16 = wire_bfloat16;
  for (std::string& name : names) {
    state_->index[name] = state_->slots.size();
    state_->slots.emplace_back();
    state_->slots.back().name = std::move(name);
  }
}

GradBuckets::~GradBuckets() = default;  // hooks left on tensors hold only a weak_ptr

void GradBuckets::before_last_backward(const models::Params& params, const at::Tensor& loss) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.reset();
  for (auto& [name, i] : s.index) {
    auto it = params.find(name);
    if (it == params.end() || !it->second.defined()) continue;
    const at::Tensor& p = it->second;
    Slot& slot = s.slots[i];
    slot.param = p;
    bool hooked = slot.hooked._unsafe_get_target() == p.unsafeGetTensorImpl();
    if (p.requires_grad() && p.is_leaf() && !hooked) {
      register_hook(state_, i, p);
      slot.hooked =
          c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(p.getIntrusivePtr());
    }
  }
  s.mode = s.have_layout ? Mode::kOverlap : Mode::kRecord;
  if (s.mode == Mode::kOverlap) {
    s.allocate();
    at::NoGradGuard no_grad;
    s.loss = loss.detach().reshape({1}).clone();
    s.loss_pending = dist_all_reduce_start(*s.group, s.loss, /*mean=*/true);
  }
}

void GradBuckets::after_backward(train::Gradients& out) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  struct Reset {  // however this ends
    State& s;
    ~Reset() { s.reset(); }
  } reset{s};
  at::NoGradGuard no_grad;
  if (s.mode == Mode::kIdle) return;
  if (s.mode == Mode::kRecord) {
    s.make_layout();
    s.allocate();
    s.loss = out.loss.detach().reshape({1}).clone();
    s.loss_pending = dist_all_reduce_start(*s.group, s.loss, /*mean=*/true);
    for (Slot& slot : s.slots) slot.seen = false;  // packed below, from out.grads
  }
  // What the hooks did not pack: a whole first step, a gradient without a hook call, and the
  // layout's members that got no gradient this step (zeros: the same collectives on every rank).
  std::vector<at::Tensor> leftovers;
  std::vector<std::string> leftover_names;
  for (size_t i = 0; i < s.slots.size(); ++i) {
    Slot& slot = s.slots[i];
    auto it = out.grads.find(slot.name);
    bool has = it != out.grads.end() && it->second.defined();
    if (slot.bucket < 0) {
      if (has) {
        leftovers.push_back(it->second);
        leftover_names.push_back(slot.name);
      }
      continue;
    }
    if (slot.seen) continue;
    Bucket& b = s.buckets[slot.bucket];
    if (has && slot.param.defined()) {
      s.pack(slot, it->second, /*add_accumulated=*/false);  // .grad already holds every micro-batch
    } else {
      ensure_buffer(b);
      b.flat.narrow(0, slot.offset, slot.numel).zero_();
    }
    --b.missing;
  }
  s.start_ready(/*in_backward=*/false);
  BV_CHECK(s.next_start == s.buckets.size(), "grad_buckets: a bucket was left incomplete");
  dist_wait(*s.loss_pending);
  for (Bucket& b : s.buckets) s.finish(b);
  for (size_t i = 0; i < s.slots.size(); ++i) {
    Slot& slot = s.slots[i];
    auto it = out.grads.find(slot.name);
    if (slot.bucket < 0 || !slot.param.defined() || it == out.grads.end()) continue;
    at::Tensor flat = s.buckets[slot.bucket].flat;
    it->second = flat.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
  }
  // Gradients outside the layout (none when every step's backward reaches the same parameters),
  // in name order on every rank.
  for (size_t k = 0; k < leftovers.size(); ++k) {
    const at::Tensor& g = leftovers[k];
    if (s.narrow(g.scalar_type())) {
      std::vector<at::Tensor> one{g.to(at::kBFloat16)};
      dist_all_reduce(*s.group, one, /*mean=*/false);
      out.grads[leftover_names[k]] = one[0].to(at::kFloat).div_(dist_world_size(*s.group));
    } else {
      std::vector<at::Tensor> one{g.clone()};
      dist_all_reduce(*s.group, one, /*mean=*/true);
      out.grads[leftover_names[k]] = one[0];
    }
  }
  out.loss = s.loss.reshape({});
  ++s.stats.steps;
}

void GradBuckets::abandon() noexcept {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->reset();
}

GradBucketStats GradBuckets::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

}  // namespace bv
