// big_vision's optimizer (big_vision/optax.py `make`): per-parameter schedules matched by regex
// (a null schedule freezes), gradient clipping over the non-frozen parameters, the optimizer
// named by `optax_name`, lr and lr_mults, decoupled weight decay, and the schedule multiplier:
//   Δθ = -sched(k) * (lr * Π lr_mult * opt(clip(g)) + wd * wd_mult * θ)
// (sched(k) times lr_multiplier(), which a running job may change; 1 by default).
// Parameters are updated in place. Knows nothing of models or Lua.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bv::optim {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What the train step logs (big_vision's names).
struct UpdateMetrics {
  double l2_grads = 0;    // global norm of the raw gradients, frozen ones zeroed, before clipping
  double l2_updates = 0;  // global norm of the applied updates
  double l2_params = 0;   // global norm of the parameters after the update
  std::vector<double> global_schedule;  // each non-frozen schedule's multiplier at this update
};

// The durations schedules need ("warmup_steps", "warmup_percent", ...).
struct ScheduleContext {
  int64_t total_steps = 0;
  int64_t batch_size = 0;
  int64_t data_size = 0;
  // Where the state is made: the parameters' device (a state loaded from a checkpoint moves
  // there at its first update).
  c10::Device device = c10::Device(c10::kCPU);
  // Sharded optimizer state (lib/bv/sharding.lua): when set, only these parameters keep state
  // and are updated by this process; the others belong to another process, which broadcasts
  // their new values. Their gradients still count in l2_grads and clipping.
  std::optional<std::set<std::string>> owned;
  // fsdp (lib/bv/sharding.lua): this process's optimizer holds only the parameters it updates,
  // some of them as row blocks of a larger tensor; the others' gradients are not here. The
  // global norms (l2_grads, which clipping uses, l2_updates and l2_params) are then sums over
  // processes: `sum_over_processes` adds a one-element float64 tensor on the parameters' device
  // over them in place. The `replicated` parameters are the same on every process and count
  // once, where `count_replicated` is set (one process).
  std::function<void(at::Tensor&)> sum_over_processes;
  std::set<std::string> replicated;
  bool count_replicated = true;
};

// One tensor of the optimizer state, owned here or not (see ScheduleContext::owned).
struct StateSpec {
  std::string name;  // "<param>/<field>"
  std::string param;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  bool owned;
};

class Optimizer {
 public:
  // `config`: the whole run config (optax_name, optax, lr, wd, wd_mults, lr_mults, schedule,
  // grad_clip_norm). `params`: every parameter's name and shape. Throws bv::Error naming the key
  // or parameter for bad configs (e.g. a parameter no schedule covers).
  Optimizer(const nlohmann::json& config,
            const std::vector<std::pair<std::string, std::vector<int64_t>>>& params,
            const ScheduleContext& ctx);
  ~Optimizer();

  // One update: params (name -> tensor, changed in place) from grads (name -> tensor; frozen
  // parameters may be missing; never changed). Increments count(). Multi-tensor ops
  // (at::_foreach_*) over chunks of parameters, the same arithmetic as config._reference_update's
  // plain per-parameter ops, element for element (the same bits on the CPU). The norms only with
  // `all_norms` (else NaN): reading them is a host sync, each is a pass over every parameter, and a
  // trainer needs them at log steps only (clipping computes l2_grads on the device at every step).
  // With sharded state, parameters owned elsewhere are left as they are and l2_updates covers the
  // owned ones.
  UpdateMetrics update(std::map<std::string, at::Tensor>& params,
                       const std::map<std::string, at::Tensor>& grads, bool all_norms = true);

  int64_t count() const;  // updates done so far (big_vision's get_count)
  bool frozen(const std::string& name) const;
  // Whether `name`'s update treats its rows (dim 0) independently (fsdp may then split it).
  bool rows_independent(const std::string& name) const;
  int num_schedules() const;  // non-frozen schedule entries
  // Schedule `index`'s value at optimizer count `count`, without lr_multiplier().
  double schedule(int index, int64_t count) const;

  // A factor on every schedule's value from the next update on (1 by default), for changing the
  // learning rate of a running job (`bvlua attach`): Δθ = -sched(k) * mult * (lr * opt(g) + wd *
  // θ), and UpdateMetrics::global_schedule reports sched(k) * mult. The optimizer's state
  // (moments, count) does not depend on it. 0 freezes the parameters while the state and count
  // still advance. With 1 the update is bit for bit the one without a multiplier. It is not part
  // of state(): a resumed run starts at 1. Throws bv::Error for a negative or non-finite `m`.
  void set_lr_multiplier(double m);
  double lr_multiplier() const;

  // Optimizer state for checkpoints ("count" plus per-parameter tensors such as
  // "<param>/mu"), and back. load_state checks names and shapes and names what differs. With
  // sharded state, state() holds the owned tensors and load_state takes a full state (or any
  // superset of the owned part) and keeps what it owns. Updates change the state in place, but
  // never a tensor state() handed out that is still held (or a view of it): that one is copied
  // first, so what state() returned stays as it was.
  NamedTensors state() const;
  void load_state(const NamedTensors& state);
  // One tensor of such a state, copied in place into this process's (on its device, in its
  // dtype), so that a resume reads and holds one tensor at a time: "count", or
  // "<param>/<field>" of a parameter owned here (another process's is an error, as are an
  // unknown name and a wrong shape, each named).
  void load_state_tensor(const std::string& name, const at::Tensor& t);
  // Every state tensor's name, shape and dtype, owned here or not (sorted by name).
  std::vector<StateSpec> state_spec() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// big_vision's utils.steps: the duration `prefix` (`<prefix>_steps|_examples|_epochs|_percent`)
// in steps; `fallback` is returned when none is given (-1: an error naming the prefix).
int64_t steps(const std::string& prefix, const nlohmann::json& config, int64_t data_size,
              int64_t batch_size, int64_t total_steps, int64_t fallback = -1);

// big_vision's utils.itstime (process 0's view).
bool itstime(int64_t step, int64_t every, int64_t total, bool last = true, bool first = true,
             double drop_close_to_last = 0.25);

}  // namespace bv::optim
