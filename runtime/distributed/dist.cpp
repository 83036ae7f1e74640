#include "distributed/dist.h"

#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/error.h"
#include "device/fake_device.h"
#include "device/machine.h"
#include "distributed/wait.h"

#if !defined(USE_C10D_GLOO)
#error "runtime/distributed needs -DUSE_C10D_GLOO (CMakeLists.txt's bv_torch target sets it)"
#endif

namespace bv {

namespace {

using Millis = std::chrono::milliseconds;

// A decimal integer in [lo, hi], or a failure naming the variable.
int parse_env_int(const char* name, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  BV_CHECK(!text.empty() && *end == '\0' && errno == 0, "dist: ", name, "='", text,
           "' is not an integer");
  BV_CHECK(v >= lo && v <= hi, "dist: ", name, "=", v, " is out of range [", lo, ", ", hi, "]");
  return static_cast<int>(v);
}

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The object that runs collectives: c10d's Backend (a ProcessGroup holds one per device type
// and adds a dispatcher layer we do not need; the Backend has the same collectives).
using Comm = ::c10d::Backend;

#if defined(USE_C10D_NCCL)
constexpr bool kHasNccl = true;
#else
constexpr bool kHasNccl = false;
#endif

// A TCPStore: the server (on rank 0) or a client of host:port. Multi-tenant, as torch's own
// rendezvous makes it, so a second group in the same process can share the server.
c10::intrusive_ptr<::c10d::Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                                 Millis timeout) {
  ::c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = is_server;
  opts.waitWorkers = false;  // the process group's own rendezvous waits for everyone
  opts.timeout = timeout;
  opts.multiTenant = true;
  return c10::make_intrusive<::c10d::TCPStore>(host, opts);
}

// The Gloo transport device: an interface named by GLOO_SOCKET_IFNAME (as torch does), the
// loopback address when the master is local (a hostname that resolves to an unreachable address
// must not break single-machine runs), else the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> make_gloo_device(const std::string& ifname,
                                                            bool loopback) {
  if (!ifname.empty()) return ::c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (loopback) return ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return ::c10d::ProcessGroupGloo::createDefaultDevice();
}

// A Gloo group. `timeout` bounds the rendezvous and every collective.
c10::intrusive_ptr<Comm> make_gloo(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                   int size, Millis timeout,
                                   std::shared_ptr<::gloo::transport::Device> device) {
  auto opts = ::c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(std::move(device));
  return c10::make_intrusive<::c10d::ProcessGroupGloo>(store, rank, size, opts);
}

// An NCCL group on CUDA device `device_index` (made current first: NCCL binds its communicator
// to the current device). Untested here: no GPU on our machines.
c10::intrusive_ptr<Comm> make_nccl(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                   int size, Millis timeout, int device_index) {
#if defined(USE_C10D_NCCL)
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
  auto opts = ::c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<::c10d::ProcessGroupNCCL>(store, rank, size, opts);
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)device_index;
  return {};  // not reached: dist_resolve_backend checks kHasNccl first
#endif
}

struct Peer {
  std::string host;
  long pid = 0;
};

std::string hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// True when `pid` has exited: gone, or a zombie its parent has not reaped yet (kill(pid, 0)
// alone would call a zombie alive, and sibling ranks of a test are exactly that).
bool process_dead(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (stat) {
    std::string line;
    std::getline(stat, line);
    size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size()) {
      char state = line[paren + 2];
      return state == 'Z' || state == 'X';
    }
    return false;
  }
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

struct DistGroup {
  DistEnv env;
  std::string backend;
  double timeout_s = 0;
  Millis timeout{0};
  c10::intrusive_ptr<::c10d::Store> store;
  c10::intrusive_ptr<Comm> comm;  // null for a single process
  // With NCCL, a Gloo group beside it for host values (a stop flag, an evaluator's counts, the
  // loss a trainer reads): summing them must not send them through the GPU and stall it. On the
  // fake device, the same split with two Gloo groups, so that a rank sending a device tensor
  // while its peer receives into a host one hangs (and times out) here as it would on NCCL.
  c10::intrusive_ptr<Comm> host_comm;
  std::string host;
  std::vector<Peer> peers;  // by rank; filled at init
  // BV_CHECK_COLLECTIVES=1: before each collective every rank compares what it is about to
  // issue with its peers' (check_same_collective); `issued` numbers the collectives.
  bool check_collectives = false;
  uint64_t issued = 0;
  // What dist_new_subgroups needs to make groups of some of our ranks: the Gloo transport
  // device, the CUDA device NCCL binds to, how many splits this group has made (each split's
  // groups live under their own store prefix), and, for a subgroup, its ranks in the group it
  // was split from (error messages name both).
  std::shared_ptr<::gloo::transport::Device> gloo_device;
  int cuda_device = 0;
  uint64_t splits = 0;
  std::vector<int> parent_ranks;
  // Bytes this rank handed to collectives as a sender (dist_sent_bytes).
  uint64_t sent_bytes = 0;

  ~DistGroup();
};

DistGroup::~DistGroup() {
#if defined(USE_C10D_NCCL)
  // ProcessGroupNCCL's destructor without shutdown() warns and may hang on a communicator with
  // work in flight; shutdown() lets NCCL tear its communicators down in order.
  if (backend == "nccl" && comm) {
    try {
      static_cast<::c10d::ProcessGroupNCCL&>(*comm).shutdown();
    } catch (const std::exception&) {  // at exit: nothing left to tell
    }
  }
#endif
}

namespace {

std::string store_get(::c10d::Store& store, const std::string& key) {
  std::vector<uint8_t> v = store.get(key);
  return std::string(v.begin(), v.end());
}

void store_set(::c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

// The ranks on this host whose processes are gone, as "rank 1 (pid 1234)". A peer's sockets
// close a moment before its process turns into a zombie, so look up to `attempts` times, 0.1 s
// apart.
std::vector<std::string> lost_local_ranks(const DistGroup& g, int attempts) {
  std::vector<std::string> lost;
  bool local_peers = false;
  for (int r = 0; r < static_cast<int>(g.peers.size()); ++r) {
    local_peers = local_peers || (r != g.env.rank && g.peers[r].host == g.host);
  }
  for (int attempt = 0; local_peers && attempt < attempts && lost.empty(); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(Millis(100));
    for (int r = 0; r < static_cast<int>(g.peers.size()); ++r) {
      const Peer& p = g.peers[r];
      if (r == g.env.rank || p.pid <= 0 || p.host != g.host) continue;
      if (process_dead(p.pid)) lost.push_back(str("rank ", r, " (pid ", p.pid, ")"));
    }
  }
  return lost;
}

bool any_remote_peer(const DistGroup& g) {
  for (const Peer& p : g.peers) {
    if (p.host != g.host) return true;
  }
  return false;
}

std::string first_line(const std::string& s) {
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// The error a user reads when a collective or a store access fails: which one, our rank, which
// peer was lost (when it ran on this host), and c10d's own first line for the details.
// `rejected`: c10d refused to start the call (a dtype the backend lacks, say), so unless a
// peer is gone, the cause is the call itself.
[[noreturn]] void fail_collective(const DistGroup& g, const std::string& what,
                                  const std::string& cause, bool rejected = false) {
  std::string who;
  // After a timeout the peers have had all that time to die: one look is enough.
  std::string lower = cause;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool timed_out = lower.find("timed out") != std::string::npos ||
                   lower.find("timeout") != std::string::npos;
  std::vector<std::string> lost = lost_local_ranks(g, timed_out || rejected ? 1 : 20);
  if (!lost.empty()) {
    who = "lost ";
    for (size_t i = 0; i < lost.size(); ++i) who += (i ? ", " : "") + lost[i];
  } else if (rejected) {
    who = "the call was rejected";
  } else if (timed_out && what.rfind("get(", 0) == 0) {
    who = str("no rank set the key within the group timeout (", g.timeout_s, " s)");
  } else if (timed_out) {
    who = str("no answer within the group timeout (", g.timeout_s, " s); a peer is stuck or lost");
  } else if (any_remote_peer(g)) {
    who = "a peer was lost or failed (ranks on other hosts cannot be checked from here)";
  } else {
    who = "every rank is still running";
  }
  std::string in_parent;
  if (!g.parent_ranks.empty()) {
    in_parent = str(" of a subgroup (rank ", g.parent_ranks[static_cast<size_t>(g.env.rank)],
                    " of the group it was split from)");
  }
  fail("dist.", what, " failed on rank ", g.env.rank, " of ", g.env.world_size, in_parent, " (",
       g.backend, "): ", who, ": ", first_line(cause));
}

// Runs one c10d collective on `comm` and waits for it (dist/wait.h: on NCCL the current stream
// waits, not the host; Gloo's at most the group timeout).
template <typename Start>
void run_collective(DistGroup& g, Comm& comm, const std::string& what, Start&& start) {
  c10::intrusive_ptr<::c10d::Work> work;
  try {
    work = start();
  } catch (const std::exception& e) {
    fail_collective(g, what, e.what(), true);
  }
  try {
    wait_for_work(*work, waits_on_stream(comm), g.timeout);
  } catch (const std::exception& e) {
    fail_collective(g, what, e.what());
  }
}

// The tensors as one contiguous buffer (the tensor itself when there is just one contiguous
// one). All must share a dtype and a device.
at::Tensor flatten(const std::vector<at::Tensor>& ts, const char* op) {
  for (size_t i = 0; i < ts.size(); ++i) {
    BV_CHECK(ts[i].defined(), "dist.", op, ": tensor ", i + 1, " is undefined");
    BV_CHECK(ts[i].scalar_type() == ts[0].scalar_type(), "dist.", op, ": tensor ", i + 1, " is ",
             ts[i].scalar_type(), " but tensor 1 is ", ts[0].scalar_type(),
             "; all tensors of one call must share a dtype");
    BV_CHECK(ts[i].device() == ts[0].device(), "dist.", op, ": tensor ", i + 1, " is on ",
             ts[i].device(), " but tensor 1 is on ", ts[0].device());
  }
  if (ts.size() == 1 && ts[0].is_contiguous()) return ts[0];
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& ts) {
  if (ts.size() == 1 && flat.is_same(ts[0])) return;
  int64_t offset = 0;
  for (at::Tensor& t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// The group that moves `flat`: the device's (NCCL's, or the fake device's Gloo group) for
// device tensors, the host group (if any) for host ones.
Comm& comm_for(DistGroup& g, const at::Tensor& flat) {
  return g.host_comm && flat.is_cpu() ? *g.host_comm : *g.comm;
}

// "broadcast of 12 float32 on fake from rank 1": what a rank is about to issue.
std::string describe_collective(const char* op, const at::Tensor& flat, int root) {
  if (!flat.defined()) return op;
  std::string s = bv::str(op, " of ", flat.numel(), " ", flat.scalar_type(), " on ",
                          c10::DeviceTypeName(flat.device().type(), /*lower_case=*/true));
  if (root >= 0) s += bv::str(" from rank ", root);
  return s;
}

// A peer's entry of check_same_collective, waited for in slices: the store does not notice a
// peer that died (a collective does), so between slices we look whether a local peer is gone.
// Waiting for a peer's entry is waiting for the peer: a failure reads as the collective's.
std::string wait_for_entry(DistGroup& g, const std::string& key, const std::string& op,
                           Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    try {
      g.store->wait({key}, Millis(200));
      return store_get(*g.store, key);
    } catch (const std::exception& e) {
      if (std::chrono::steady_clock::now() > deadline || !lost_local_ranks(g, 1).empty()) {
        fail_collective(g, op, e.what());
      }
    }
  }
}

// BV_CHECK_COLLECTIVES=1 (on in the tests): every rank publishes its next collective in the
// store and compares it with every peer's, so that ranks that disagree (a different op, dtype,
// size, device type or root) fail at once, naming both, instead of hanging until the timeout.
// c10d's C++ API has no ProcessGroupWrapper, which does this in Python. Costs a store round
// trip per peer per collective: for tests and for hunting a hang, not for speed.
void check_same_collective(DistGroup& g, const char* op, const at::Tensor& flat, int root = -1) {
  if (!g.check_collectives || !g.comm) return;
  uint64_t n = ++g.issued;
  std::string mine = describe_collective(op, flat, root);
  std::string prefix = bv::str("bv/collective/", n, "/");
  try {
    store_set(*g.store, prefix + std::to_string(g.env.rank), mine);
  } catch (const std::exception& e) {
    fail_collective(g, op, e.what());
  }
  for (int r = 0; r < g.env.world_size; ++r) {
    if (r == g.env.rank) continue;
    std::string theirs = wait_for_entry(g, prefix + std::to_string(r), op, g.timeout);
    BV_CHECK(theirs == mine, "dist: collective #", n, " differs across ranks: rank ", g.env.rank,
             " issued ", mine, ", rank ", r, " issued ", theirs,
             " (every rank must issue the same collectives, in the same order, on the same kind "
             "of device; on NCCL this would hang)");
  }
}

// The buffer the backend works on: NCCL takes CUDA tensors (host ones go to the Gloo side group,
// or without one to this rank's current device and back). Gloo gets host
// tensors (a CUDA libtorch without NCCL still trains, just slower) of the dtypes it has.
// bfloat16 travels as bfloat16, 2 bytes a value, as on NCCL (this libtorch's Gloo reduces it: each
// hop adds two bfloat16 values in float32 and rounds the sum to bfloat16); a caller that wants
// a float32 sum sends float32.
at::Tensor wire_buffer(const DistGroup& g, const at::Tensor& flat, const char* op) {
  if (g.backend == "nccl" && (flat.is_cuda() || !g.host_comm)) {
    return flat.is_cuda() ? flat : flat.to(at::kCUDA);
  }
  at::ScalarType t = flat.scalar_type();
  BV_CHECK(t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16 ||
               t == at::kChar || t == at::kByte || t == at::kInt || t == at::kLong,
           "dist.", op, ": the gloo backend cannot reduce or send ", t, " tensors");
  // Gloo has no device transport: another device's tensors go through the host and back (NCCL
  // is the backend for CUDA; this keeps CPU-only collectives usable on any device).
  return flat.is_cpu() ? flat : flat.cpu();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

c10::intrusive_ptr<::c10d::Store> connect_store(const DistEnv& env, Millis timeout) {
  if (env.agent_store) {
    // torchrun's agent hosts the store; its workers share one prefix per restart attempt.
    auto store = make_tcp_store(env.master_addr, env.master_port, false, timeout);
    return c10::make_intrusive<::c10d::PrefixStore>(
        "/worker/attempt_" + std::to_string(env.restart_count), store);
  }
  return make_tcp_store(env.master_addr, env.master_port, env.rank == 0, timeout);
}

// The group's backends over `store` (g.env's rank and size): NCCL and a Gloo group for host
// tensors beside it; on the test device two Gloo groups, as on NCCL (its tensors and host
// tensors go through different groups); else one Gloo group.
void make_comms(DistGroup& g, const c10::intrusive_ptr<::c10d::Store>& store) {
  const DistEnv& env = g.env;
  if (g.backend == "nccl") {
    g.comm = make_nccl(store, env.rank, env.world_size, g.timeout, g.cuda_device);
    g.host_comm = make_gloo(c10::make_intrusive<::c10d::PrefixStore>("host_group", store), env.rank,
                            env.world_size, g.timeout, g.gloo_device);
  } else if (fake_device_enabled()) {
    g.comm = make_gloo(c10::make_intrusive<::c10d::PrefixStore>("device_group", store), env.rank,
                       env.world_size, g.timeout, g.gloo_device);
    g.host_comm = make_gloo(c10::make_intrusive<::c10d::PrefixStore>("host_group", store), env.rank,
                            env.world_size, g.timeout, g.gloo_device);
  } else {
    g.comm = make_gloo(store, env.rank, env.world_size, g.timeout, g.gloo_device);
  }
}

// Every rank publishes "<host> <pid>" and reads everyone else's, so a later failure can tell
// which local peer died.
void exchange_peers(DistGroup& g) {
  g.peers.assign(static_cast<size_t>(g.env.world_size), Peer{});
  store_set(*g.store, "bv/pid/" + std::to_string(g.env.rank),
            g.host + " " + std::to_string(::getpid()));
  for (int r = 0; r < g.env.world_size; ++r) {
    std::istringstream in(store_get(*g.store, "bv/pid/" + std::to_string(r)));
    in >> g.peers[r].host >> g.peers[r].pid;
  }
}

}  // namespace

std::string dist_resolve_backend(const std::string& backend) {
  BV_CHECK(backend == "gloo" || backend == "nccl" || backend == "auto", "dist: backend '", backend,
           "' is not one of 'gloo', 'nccl', 'auto'");
  if (backend == "auto") return kHasNccl && cuda_available() ? "nccl" : "gloo";
  if (backend == "nccl") {
    BV_CHECK(kHasNccl, "dist: backend 'nccl' is not compiled into this bvlua (a CPU-only build: "
                       "-DBV_CUDA=OFF or a CPU wheel); use --backend gloo, or rebuild with CUDA "
                       "(scripts/setup)");
    BV_CHECK(cuda_available(),
             "dist: backend 'nccl' needs a CUDA GPU, and none is "
             "available on ",
             hostname(),
             " (libtorch sees 0 devices); use --backend gloo to train "
             "on the CPU");
  }
  return backend;
}

DistEnv dist_env_from_environ() {
  DistEnv env;
  if (const char* ws = env_or_null("WORLD_SIZE")) {
    env.world_size = parse_env_int("WORLD_SIZE", ws, 1, 1 << 20);
  }
  if (const char* r = env_or_null("RANK")) {
    env.rank = parse_env_int("RANK", r, 0, 1 << 20);
    BV_CHECK(env.rank < env.world_size, "dist: RANK=", env.rank,
             " must be below WORLD_SIZE=", env.world_size);
  }
  if (const char* lr = env_or_null("LOCAL_RANK")) {
    env.local_rank = parse_env_int("LOCAL_RANK", lr, 0, 1 << 20);
  }
  if (const char* a = env_or_null("MASTER_ADDR")) env.master_addr = a;
  if (const char* p = env_or_null("MASTER_PORT")) {
    env.master_port = parse_env_int("MASTER_PORT", p, 1, 65535);
  }
  if (env.world_size > 1) {
    BV_CHECK(!env.master_addr.empty(), "dist: MASTER_ADDR is not set (WORLD_SIZE=", env.world_size,
             "); start the processes with `bvlua launch` or torchrun");
    BV_CHECK(env.master_port > 0, "dist: MASTER_PORT is not set (WORLD_SIZE=", env.world_size,
             "); start the processes with `bvlua launch` or torchrun");
  }
  if (const char* agent = env_or_null("TORCHELASTIC_USE_AGENT_STORE")) {
    env.agent_store = std::string(agent) == "True";  // torchrun writes Python's str(bool)
  }
  if (const char* rc = env_or_null("TORCHELASTIC_RESTART_COUNT")) {
    env.restart_count = parse_env_int("TORCHELASTIC_RESTART_COUNT", rc, 0, 1 << 30);
  }
  return env;
}

std::shared_ptr<DistGroup> dist_init(const DistEnv& env, const std::string& backend,
                                     double timeout_s) {
  BV_CHECK(timeout_s > 0 && timeout_s < 1e7,
           "dist.init: timeout must be a positive number of "
           "seconds, got ",
           timeout_s);
  BV_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "dist.init: rank ",
           env.rank, " is not in [0, ", env.world_size, ")");
  auto g = std::make_shared<DistGroup>();
  g->env = env;
  g->backend = dist_resolve_backend(backend);
  g->timeout_s = timeout_s;
  g->timeout = Millis(static_cast<int64_t>(timeout_s * 1000));
  g->host = hostname();
  const char* check = env_or_null("BV_CHECK_COLLECTIVES");
  g->check_collectives = check && std::string(check) == "1";
  if (env.world_size == 1) {
    g->store = c10::make_intrusive<::c10d::HashStore>();
    g->store->setTimeout(g->timeout);
    g->peers = {Peer{g->host, static_cast<long>(::getpid())}};
    return g;
  }
  BV_CHECK(!env.master_addr.empty() && env.master_port > 0, "dist.init: ", env.world_size,
           " processes need MASTER_ADDR and MASTER_PORT");
  std::string where = str(env.master_addr, ":", env.master_port);
  try {
    g->store = connect_store(env, g->timeout);
  } catch (const std::exception& e) {
    fail("dist.init: rank ", env.rank, " cannot ",
         env.rank == 0 && !env.agent_store ? "host" : "reach", " the store at ", where, ": ",
         first_line(e.what()));
  }
  try {
    const char* ifname = env_or_null("GLOO_SOCKET_IFNAME");
    g->gloo_device = make_gloo_device(ifname ? ifname : "", is_loopback(env.master_addr));
    int devices = g->backend == "nccl" ? cuda_device_count() : 0;
    g->cuda_device = devices > 0 ? env.local_rank % devices : 0;
    make_comms(*g, g->store);
    exchange_peers(*g);
  } catch (const std::exception& e) {
    fail("dist.init: rank ", env.rank, " of ", env.world_size, " could not join the ", g->backend,
         " group at ", where, " within ", timeout_s, " s: ", first_line(e.what()));
  }
  return g;
}

int dist_rank(const DistGroup& g) { return g.env.rank; }
int dist_world_size(const DistGroup& g) { return g.env.world_size; }
std::string dist_backend(const DistGroup& g) { return g.backend; }
uint64_t dist_sent_bytes(const DistGroup& g) { return g.sent_bytes; }

std::shared_ptr<DistGroup> dist_new_subgroups(DistGroup& parent,
                                              const std::vector<std::vector<int>>& groups) {
  uint64_t split = ++parent.splits;  // counted on every rank, in or out of a group
  std::vector<int> seen(static_cast<size_t>(parent.env.world_size), -1);
  int mine = -1;
  for (size_t i = 0; i < groups.size(); ++i) {
    BV_CHECK(!groups[i].empty(), "dist.new_subgroups: group ", i + 1, " has no ranks");
    for (int r : groups[i]) {
      BV_CHECK(r >= 0 && r < parent.env.world_size, "dist.new_subgroups: rank ", r, " of group ",
               i + 1, " is not a rank of this group (0 to ", parent.env.world_size - 1, ")");
      BV_CHECK(seen[static_cast<size_t>(r)] < 0, "dist.new_subgroups: rank ", r, " is in group ",
               seen[static_cast<size_t>(r)] + 1, " and in group ", i + 1);
      seen[static_cast<size_t>(r)] = static_cast<int>(i);
      if (r == parent.env.rank) mine = static_cast<int>(i);
    }
  }
  if (mine < 0) return nullptr;
  const std::vector<int>& ranks = groups[static_cast<size_t>(mine)];
  auto g = std::make_shared<DistGroup>();
  g->env = parent.env;
  g->env.world_size = static_cast<int>(ranks.size());
  g->env.rank =
      static_cast<int>(std::find(ranks.begin(), ranks.end(), parent.env.rank) - ranks.begin());
  g->backend = parent.backend;
  g->timeout_s = parent.timeout_s;
  g->timeout = parent.timeout;
  g->host = parent.host;
  g->check_collectives = parent.check_collectives;
  g->gloo_device = parent.gloo_device;
  g->cuda_device = parent.cuda_device;
  for (int r : ranks) {
    g->peers.push_back(parent.peers[static_cast<size_t>(r)]);
    g->parent_ranks.push_back(
        parent.parent_ranks.empty() ? r : parent.parent_ranks[static_cast<size_t>(r)]);
  }
  // Each group of each split under its own prefix of the parent's store (c10d's new_group does
  // the same): the members' rendezvous and the collective checks stay apart.
  g->store =
      c10::make_intrusive<::c10d::PrefixStore>(str("bv/subgroup/", split, "/", mine), parent.store);
  if (ranks.size() == 1 || !parent.comm) return g;  // one rank: collectives are identities
  try {
    make_comms(*g, g->store);
  } catch (const std::exception& e) {
    fail("dist.new_subgroups: rank ", parent.env.rank, " could not join its ", g->backend,
         " subgroup of ", ranks.size(), " ranks within ", g->timeout_s,
         " s: ", first_line(e.what()));
  }
  return g;
}

namespace {

// Collectives take their tensors in buckets of at most this many bytes, in order (a larger tensor
// is a bucket of its own): one collective per bucket rather than per tensor, while the flat copy
// a bucket needs stays small next to the gradients (PyTorch's DDP buckets by 25 MiB).
constexpr int64_t kBucketBytes = 32 << 20;

template <typename Fn>
void for_each_bucket(std::vector<at::Tensor>& tensors, const Fn& fn) {
  std::vector<at::Tensor> bucket;
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    int64_t n = t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
    if (!bucket.empty() && bytes + n > kBucketBytes) {
      fn(bucket);
      bucket.clear();
      bytes = 0;
    }
    bucket.push_back(t);
    bytes += n;
  }
  if (!bucket.empty()) fn(bucket);
}

void all_reduce_bucket(DistGroup& g, std::vector<at::Tensor>& tensors, bool mean) {
  at::Tensor flat = flatten(tensors, "all_reduce");
  BV_CHECK(!mean || at::isFloatingType(flat.scalar_type()),
           "dist.all_reduce: mean needs floating-point tensors, got ", flat.scalar_type());
  if (g.comm) {
    std::vector<at::Tensor> bufs{wire_buffer(g, flat, "all_reduce")};
    ::c10d::AllreduceOptions opts;  // reduceOp defaults to SUM
    opts.timeout = g.timeout;
    check_same_collective(g, "all_reduce", flat);
    Comm& comm = comm_for(g, flat);
    g.sent_bytes += bufs[0].nbytes();
    run_collective(g, comm, "all_reduce", [&] { return comm.allreduce(bufs, opts); });
    if (mean) bufs[0].div_(g.env.world_size);  // on the wire buffer (the tensors' dtype)
    if (!bufs[0].is_same(flat)) flat.copy_(bufs[0]);
  }
  unflatten(flat, tensors);
}

void broadcast_bucket(DistGroup& g, std::vector<at::Tensor>& tensors, int root) {
  at::Tensor flat = flatten(tensors, "broadcast");
  if (g.comm) {
    std::vector<at::Tensor> bufs{wire_buffer(g, flat, "broadcast")};
    ::c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = g.timeout;
    check_same_collective(g, "broadcast", flat, root);
    Comm& comm = comm_for(g, flat);
    if (g.env.rank == root) g.sent_bytes += bufs[0].nbytes();
    run_collective(g, comm, "broadcast", [&] { return comm.broadcast(bufs, opts); });
    if (!bufs[0].is_same(flat)) flat.copy_(bufs[0]);
  }
  if (g.env.rank != root) unflatten(flat, tensors);
}

void reduce_bucket(DistGroup& g, std::vector<at::Tensor>& tensors, int root) {
  at::Tensor flat = flatten(tensors, "reduce");
  if (g.comm) {
    std::vector<at::Tensor> bufs{wire_buffer(g, flat, "reduce")};
    ::c10d::ReduceOptions opts;  // SUM
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = g.timeout;
    check_same_collective(g, "reduce", flat, root);
    Comm& comm = comm_for(g, flat);
    if (g.env.rank != root) g.sent_bytes += bufs[0].nbytes();
    run_collective(g, comm, "reduce", [&] { return comm.reduce(bufs, opts); });
    if (g.env.rank == root && !bufs[0].is_same(flat)) flat.copy_(bufs[0]);
  }
  if (g.env.rank == root) unflatten(flat, tensors);
}

void check_root(const DistGroup& g, int root, const char* op) {
  BV_CHECK(root >= 0 && root < g.env.world_size, "dist.", op, ": root ", root,
           " is not a rank of this group (0 to ", g.env.world_size - 1, ")");
}

}  // namespace

void dist_all_reduce(DistGroup& g, std::vector<at::Tensor>& tensors, bool mean) {
  at::NoGradGuard no_grad;
  for_each_bucket(tensors, [&](std::vector<at::Tensor>& b) { all_reduce_bucket(g, b, mean); });
}

void dist_broadcast(DistGroup& g, std::vector<at::Tensor>& tensors, int root) {
  check_root(g, root, "broadcast");
  at::NoGradGuard no_grad;
  for_each_bucket(tensors, [&](std::vector<at::Tensor>& b) { broadcast_bucket(g, b, root); });
}

void dist_reduce(DistGroup& g, std::vector<at::Tensor>& tensors, int root) {
  check_root(g, root, "reduce");
  at::NoGradGuard no_grad;
  for_each_bucket(tensors, [&](std::vector<at::Tensor>& b) { reduce_bucket(g, b, root); });
}

struct PendingCollective {
  DistGroup* group = nullptr;
  const char* what = "broadcast";
  c10::intrusive_ptr<::c10d::Work> work;  // null: nothing to wait for (one process)
  at::Tensor target, wire;                // wire: what the backend writes (target, or a copy)
  bool copy_back = true;                  // whether this rank's target gets the result
  bool stream_wait = false;               // NCCL's: dist_wait orders the stream, not the host
  bool mean = false;                      // all-reduce: divide by the world size when done
  bool done = false;
};

std::shared_ptr<PendingCollective> dist_broadcast_start(DistGroup& g, const at::Tensor& tensor,
                                                        int root) {
  check_root(g, root, "broadcast");
  BV_CHECK(tensor.defined() && tensor.is_contiguous(),
           "dist.broadcast: an asynchronous broadcast needs a contiguous tensor");
  auto p = std::make_shared<PendingCollective>();
  p->group = &g;
  p->target = tensor;
  if (!g.comm) return p;
  at::NoGradGuard no_grad;
  p->wire = wire_buffer(g, tensor.reshape({-1}), "broadcast");
  std::vector<at::Tensor> bufs{p->wire};
  ::c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.rootTensor = 0;
  opts.timeout = g.timeout;
  check_same_collective(g, "broadcast", tensor, root);
  Comm& comm = comm_for(g, tensor);
  if (g.env.rank == root) g.sent_bytes += p->wire.nbytes();
  p->stream_wait = waits_on_stream(comm);
  try {
    p->work = comm.broadcast(bufs, opts);
  } catch (const std::exception& e) {
    fail_collective(g, "broadcast", e.what(), true);
  }
  return p;
}

std::shared_ptr<PendingCollective> dist_reduce_start(DistGroup& g, const at::Tensor& tensor,
                                                     int root) {
  check_root(g, root, "reduce");
  BV_CHECK(tensor.defined() && tensor.is_contiguous(),
           "dist.reduce: an asynchronous reduce needs a contiguous tensor");
  auto p = std::make_shared<PendingCollective>();
  p->group = &g;
  p->what = "reduce";
  p->target = tensor;
  p->copy_back = g.env.rank == root;
  if (!g.comm) return p;
  at::NoGradGuard no_grad;
  p->wire = wire_buffer(g, tensor.reshape({-1}), "reduce");
  std::vector<at::Tensor> bufs{p->wire};
  ::c10d::ReduceOptions opts;  // SUM
  opts.rootRank = root;
  opts.rootTensor = 0;
  opts.timeout = g.timeout;
  check_same_collective(g, "reduce", tensor, root);
  Comm& comm = comm_for(g, tensor);
  if (g.env.rank != root) g.sent_bytes += p->wire.nbytes();
  p->stream_wait = waits_on_stream(comm);
  try {
    p->work = comm.reduce(bufs, opts);
  } catch (const std::exception& e) {
    fail_collective(g, "reduce", e.what(), true);
  }
  return p;
}

std::shared_ptr<PendingCollective> dist_all_reduce_start(DistGroup& g, const at::Tensor& tensor,
                                                         bool mean) {
  BV_CHECK(tensor.defined() && tensor.is_contiguous(),
           "dist.all_reduce: an asynchronous all-reduce needs a contiguous tensor");
  BV_CHECK(!mean || at::isFloatingType(tensor.scalar_type()),
           "dist.all_reduce: mean needs floating-point tensors, got ", tensor.scalar_type());
  auto p = std::make_shared<PendingCollective>();
  p->group = &g;
  p->what = "all_reduce";
  p->target = tensor;
  p->mean = mean;
  if (!g.comm) return p;
  at::NoGradGuard no_grad;
  p->wire = wire_buffer(g, tensor.reshape({-1}), "all_reduce");
  std::vector<at::Tensor> bufs{p->wire};
  ::c10d::AllreduceOptions opts;  // SUM
  opts.timeout = g.timeout;
  check_same_collective(g, "all_reduce", tensor);
  Comm& comm = comm_for(g, tensor);
  g.sent_bytes += p->wire.nbytes();
  p->stream_wait = waits_on_stream(comm);
  try {
    p->work = comm.allreduce(bufs, opts);
  } catch (const std::exception& e) {
    fail_collective(g, "all_reduce", e.what(), true);
  }
  return p;
}

void dist_wait(PendingCollective& p) {
  if (p.done) return;
  p.done = true;
  if (!p.work) return;
  try {
    wait_for_work(*p.work, p.stream_wait, p.group->timeout);
  } catch (const std::exception& e) {
    fail_collective(*p.group, p.what, e.what());
  }
  if (!p.copy_back) return;
  at::NoGradGuard no_grad;
  // Divided where the sum is (the wire buffer has the target's dtype, as in all_reduce_bucket).
  if (p.mean) p.wire.div_(p.group->env.world_size);
  at::Tensor flat = p.target.view({-1});
  if (!p.wire.is_same(flat) && p.wire.data_ptr() != flat.data_ptr()) flat.copy_(p.wire);
}

void dist_barrier(DistGroup& g) {
  if (!g.comm) return;
  ::c10d::BarrierOptions opts;
  opts.timeout = g.timeout;
  Comm& comm = g.host_comm ? *g.host_comm : *g.comm;  // a host-side wait: no device involved
  check_same_collective(g, "barrier", at::Tensor());
  run_collective(g, comm, "barrier", [&] { return comm.barrier(opts); });
}

std::string dist_store_wait(DistGroup& g, const std::string& key, double timeout_s) {
  BV_CHECK(timeout_s > 0, "dist.wait('", key, "'): the timeout must be positive");
  return wait_for_entry(g, "user/" + key, "wait('" + key + "')",
                        Millis(static_cast<int64_t>(timeout_s * 1000)));
}

void dist_store_set(DistGroup& g, const std::string& key, const std::string& value) {
  try {
    store_set(*g.store, "user/" + key, value);
  } catch (const std::exception& e) {
    fail_collective(g, "set('" + key + "')", e.what());
  }
}

bool dist_store_check(DistGroup& g, const std::string& key) {
  try {
    return g.store->check({"user/" + key});
  } catch (const std::exception& e) {
    fail_collective(g, "check('" + key + "')", e.what());
  }
}

std::string dist_store_get(DistGroup& g, const std::string& key) {
  try {
    g.store->wait({"user/" + key}, g.timeout);
    return store_get(*g.store, "user/" + key);
  } catch (const std::exception& e) {
    fail_collective(g, "get('" + key + "')", e.what());
  }
}

}  // namespace bv
