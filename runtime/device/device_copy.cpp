#include "device/device_copy.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <optional>

#include "core/error.h"

namespace bv {

struct DeviceCopy::Pending {
  std::vector<at::Tensor> host, device;
  std::optional<c10::Event> copied;  // recorded on the side stream after the copies
  bool taken = false;
};

DeviceCopy::DeviceCopy(std::vector<at::Tensor> host, c10::Device device)
    : pending_(std::make_unique<Pending>()) {
  Pending& p = *pending_;
  p.host = std::move(host);
  if (device.is_cpu()) {
    p.device = p.host;
    return;
  }
  for (const at::Tensor& t : p.host) {
    BV_CHECK(t.defined(), "DeviceCopy: an undefined tensor");
    p.device.push_back(t.device() == device ? t : at::empty_like(t, t.options().device(device)));
  }
  c10::impl::VirtualGuardImpl impl(device.type());
  c10::Stream side = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  // The side stream starts after what the current stream has queued so far, so that it never
  // writes memory the allocator handed over from a tensor the current stream still reads.
  c10::Event queued(device.type());
  queued.record(impl.getStream(device));
  queued.block(side);
  {
    c10::StreamGuard on_side(side);
    for (size_t i = 0; i < p.host.size(); ++i) {
      if (!p.device[i].is_same(p.host[i])) p.device[i].copy_(p.host[i], /*non_blocking=*/true);
    }
  }
  p.copied.emplace(device.type());
  p.copied->record(side);
}

DeviceCopy::~DeviceCopy() {
  // Dropped without wait(): the copy may still read the host tensors and write the device
  // ones; let it finish before they are freed.
  if (pending_ && pending_->copied && !pending_->taken) pending_->copied->synchronize();
}

std::vector<at::Tensor> DeviceCopy::wait() {
  Pending& p = *pending_;
  BV_CHECK(!p.taken, "DeviceCopy: wait() was already called");
  p.taken = true;
  if (p.copied) {
    c10::impl::VirtualGuardImpl impl(p.copied->device_type());
    p.copied->block(impl.getStream(p.copied->device()));
  }
  p.host.clear();  // the copy is ordered before anything the current stream does from now on
  return std::move(p.device);
}

}  // namespace bv
