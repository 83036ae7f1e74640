// Multi-process training on libtorch's c10d: torchrun's environment, a process group (Gloo on
// CPU, NCCL on CUDA builds) with its TCPStore, and the few collectives a data-parallel trainer
// needs. Every collective is bounded by the group's timeout, and a failure names the collective,
// our rank and, when it can be found out, the rank that was lost.
//
// The c10d headers stay in dist.cpp: this header is cheap to include.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace bv {

// What torchrun (or bvlua's own launcher) tells a worker through the environment.
struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: the agent hosts the store
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE and
// TORCHELASTIC_RESTART_COUNT. Unset means a single process (rank 0 of 1). Fails naming the
// variable when one does not parse, when RANK is not below WORLD_SIZE, or when MASTER_ADDR or
// MASTER_PORT is missing for more than one process.
DistEnv dist_env_from_environ();

// The backend `backend` ("gloo", "nccl" or "auto") means on this machine: "auto" is nccl when this
// build has it and a GPU is available, else gloo. Fails at once, saying what to do, for an unknown
// name and for nccl on a build without NCCL or a machine without a GPU.
std::string dist_resolve_backend(const std::string& backend);

// A process group: the store, the c10d backend and what we know about the peers.
struct DistGroup;

// Joins the group described by `env`. backend: "gloo", "nccl", or "auto" (nccl when this build
// has it and CUDA is available, else gloo). timeout_s bounds the rendezvous, every collective
// and every store read. With world_size 1 no network is used: collectives are identities and the
// store is in-process.
std::shared_ptr<DistGroup> dist_init(const DistEnv& env, const std::string& backend,
                                     double timeout_s);

int dist_rank(const DistGroup& g);
int dist_world_size(const DistGroup& g);
std::string dist_backend(const DistGroup& g);  // "gloo" or "nccl"

// Splits `g`: `groups` lists disjoint lists of g's ranks (a rank's place in its list is its rank
// in the new group), and the result is the new group holding this rank, or null for a rank in
// none. Every rank of g must call it with the same lists, in the same order as its other
// splits (each split's groups rendezvous under their own prefix of g's store, as c10d's
// new_group does). The new group has g's backend, timeout and, for NCCL, a Gloo group for host
// tensors beside it; every collective above, the store and bv.dist.fsdp take it. A group of one
// rank runs no collectives (they are identities). big_vision's mesh {replica R, data D} is two
// splits: the data groups {0..D-1}, {D..2D-1}, ... (the last mesh axis varies fastest, as
// jax's devices.flatten()) and the replica groups {d, D + d, ...}.
std::shared_ptr<DistGroup> dist_new_subgroups(DistGroup& g,
                                              const std::vector<std::vector<int>>& groups);

// Bytes this rank has handed to collectives on `g` as a sender since the group was made: an
// all-reduce's whole buffer, a broadcast's on its root, a reduce's on every rank but the root,
// each as it travels (2 bytes a value for bfloat16, on Gloo as on NCCL). What an
// algorithm puts on the wire differs by a constant factor (a ring all-reduce sends
// 2 (n - 1) / n of it); this is the payload the planner can predict.
uint64_t dist_sent_bytes(const DistGroup& g);

// All-reduces (sum) `tensors` in place across the group; mean = true divides by the world size
// (floating-point tensors only). The tensors must share a dtype and a device; they travel in
// flat buffers of up to 32 MiB (buckets), so N small tensors cost one collective. NCCL takes CUDA
// tensors where they are (host tensors, such as a stop flag or an evaluator's counts, go through
// a Gloo group made beside NCCL's, so they never stall the GPU); Gloo takes host ones (another
// device's go through a host copy).
void dist_all_reduce(DistGroup& g, std::vector<at::Tensor>& tensors, bool mean);

// Copies rank `root`'s values of `tensors` into everyone's, in place (same rules as above).
void dist_broadcast(DistGroup& g, std::vector<at::Tensor>& tensors, int root);

// A collective started and not yet waited for (dist_broadcast_start, dist_reduce_start,
// dist_all_reduce_start).
struct PendingCollective;

// Starts copying rank `root`'s value of `tensor` into everyone's and returns at once; the
// collective runs while the caller computes (fsdp prefetches the next parameters this way).
// dist_wait finishes it: then `tensor` holds root's value. With NCCL the wait only orders the
// current CUDA stream after the broadcast (the host does not wait); Gloo's runs on its own
// threads, and a device tensor that went through the host is copied back in dist_wait.
// Collectives started this way count in the group's order like any other: every rank must start
// the same ones in the same order.
std::shared_ptr<PendingCollective> dist_broadcast_start(DistGroup& g, const at::Tensor& tensor,
                                                        int root);
// The same for a reduce: sums `tensor` over the group into rank `root`'s (the others' are left
// unspecified), finished by dist_wait.
std::shared_ptr<PendingCollective> dist_reduce_start(DistGroup& g, const at::Tensor& tensor,
                                                     int root);
// The same for an all-reduce (sum; mean = true divides by the world size in dist_wait, floating
// point only): every rank's `tensor` holds the result after dist_wait. The replicated gradients'
// buckets start this way during the backward (grad_buckets.h).
std::shared_ptr<PendingCollective> dist_all_reduce_start(DistGroup& g, const at::Tensor& tensor,
                                                         bool mean);
void dist_wait(PendingCollective& pending);

// Sums `tensors` over the group into rank `root`'s, in place there; the other ranks' tensors
// are left unspecified (same rules as above).
void dist_reduce(DistGroup& g, std::vector<at::Tensor>& tensors, int root);

void dist_barrier(DistGroup& g);

// The group's key-value store, for small things (a stop flag, host names). get waits for the
// key up to the group timeout. Keys live under "user/" so they cannot clash with ours.
void dist_store_set(DistGroup& g, const std::string& key, const std::string& value);
std::string dist_store_get(DistGroup& g, const std::string& key);
// Whether `key` is in the store now, without waiting (c10d's Store::check): a poll, for a key
// another process may or may not have set (a request to a running job).
bool dist_store_check(DistGroup& g, const std::string& key);
// get with its own timeout, for a wait longer than a collective's (the ranks waiting while rank
// 0 writes a large checkpoint): a lost local peer still fails it at once, naming the rank.
std::string dist_store_wait(DistGroup& g, const std::string& key, double timeout_s);

}  // namespace bv
