// The one place where the c10d API of the libtorch versions we build against differs: Debian's
// 1.13 (CPU, Gloo only; what CI tests) and pip torch 2.x (CUDA, NCCL). Included only by
// runtime/dist/*.cpp: it pulls in the c10d and gloo headers, which dist.h must not.
//
// 1.13: ProcessGroupGloo and ProcessGroupNCCL derive from c10d::ProcessGroup.
// 2.x:  they derive from c10d::Backend (a ProcessGroup holds one Backend per device type). We use
//       the Backend directly: it has the same allreduce/broadcast/barrier virtuals, and we never
//       need the dispatcher layer that ProcessGroup adds on top.
// The 2.x branches are written from the torch 2.x headers and are untested here (no 2.x build
// on the CI machine); they use only members whose names did not change between the versions.
#pragma once

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <string>

#include "core/compat.h"  // BV_TORCH_AT_LEAST

#if !defined(USE_C10D_GLOO)
#error "runtime/dist needs -DUSE_C10D_GLOO (CMakeLists.txt sets it when libgloo-dev is installed)"
#endif

namespace bv::c10d_compat {

// The object that runs collectives.
#if BV_TORCH_AT_LEAST(2, 0)
using Comm = ::c10d::Backend;  // untested here
#else
using Comm = ::c10d::ProcessGroup;
#endif

constexpr bool kHasNccl =
#if defined(USE_C10D_NCCL)
    true;
#else
    false;
#endif

// A TCPStore: the server (on rank 0) or a client of host:port. Multi-tenant, as torch's own
// rendezvous makes it, so a second group in the same process can share the server.
inline c10::intrusive_ptr<::c10d::Store> make_tcp_store(const std::string& host, int port,
                                                        bool is_server,
                                                        std::chrono::milliseconds timeout) {
  ::c10d::TCPStoreOptions opts;  // same field names in 1.13 and 2.x
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = is_server;
  opts.waitWorkers = false;  // the process group's own rendezvous waits for everyone
  opts.timeout = timeout;
  opts.multiTenant = true;
  return c10::make_intrusive<::c10d::TCPStore>(host, opts);
}

inline c10::intrusive_ptr<::c10d::Store> make_prefix_store(const std::string& prefix,
                                                           c10::intrusive_ptr<::c10d::Store> s) {
  return c10::make_intrusive<::c10d::PrefixStore>(prefix, std::move(s));
}

inline c10::intrusive_ptr<::c10d::Store> make_hash_store() {
  return c10::make_intrusive<::c10d::HashStore>();
}

// The Gloo transport device: an interface named by GLOO_SOCKET_IFNAME (as torch does), the
// loopback address when the master is local (a hostname that resolves to an unreachable address
// must not break single-machine runs), else the address this host's name resolves to.
inline std::shared_ptr<::gloo::transport::Device> make_gloo_device(const std::string& ifname,
                                                                   bool loopback) {
  // 2.x added a `lazyInit = false` parameter to these three; the defaults keep the calls equal.
  if (!ifname.empty()) return ::c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (loopback) return ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return ::c10d::ProcessGroupGloo::createDefaultDevice();
}

// A Gloo group. `timeout` bounds the rendezvous and every collective.
inline c10::intrusive_ptr<Comm> make_gloo(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                          int size, std::chrono::milliseconds timeout,
                                          std::shared_ptr<::gloo::transport::Device> device) {
  auto opts = ::c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(std::move(device));
  return c10::make_intrusive<::c10d::ProcessGroupGloo>(store, rank, size, opts);
}

// An NCCL group on CUDA device `device_index` (made current first: NCCL binds its communicator
// to the current device). Untested here: Debian's libtorch has no NCCL.
inline c10::intrusive_ptr<Comm> make_nccl(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                          int size, std::chrono::milliseconds timeout,
                                          int device_index) {
#if defined(USE_C10D_NCCL)
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));
  auto opts = ::c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;  // a member of ProcessGroup::Options (1.13) / Backend::Options (2.x)
  return c10::make_intrusive<::c10d::ProcessGroupNCCL>(store, rank, size, opts);
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)device_index;
  return {};  // not reached: dist.cpp checks kHasNccl before calling
#endif
}

}  // namespace bv::c10d_compat
