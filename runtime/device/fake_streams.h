// The fake device's streams and events (device/fake_device.h), asynchronous as CUDA's are.
//
// The model, in CUDA's terms:
// - Kernels on the fake device are the CPU's and run when they are called, on the calling
//   thread: as if the current stream had run them at once. Before one runs, the current stream's
//   queued copies finish (a stream runs its work in order).
// - A copy is queued instead, and done later by a worker thread after a delay
//   (BV_FAKE_STREAM_DELAY_MS, default 2), when it runs on a side stream (any copy), or when it is
//   non_blocking with pinned host memory on either side (on any stream). Host memory that a queued
//   copy reads or writes is read or written only then: a host that reuses a pinned buffer before
//   the copy ran, or reads a non_blocking device-to-host result without waiting, sees the wrong
//   numbers, as on a GPU.
// - A device tensor that a queued copy of stream S writes may be used by another stream C only
//   once C is ordered after that copy: an event recorded on S after the copy and blocked on by
//   C, or a host synchronisation (an event's, S's or the device's). Any other use is an error
//   naming the op, the tensor's shape and both streams: the missing wait that CUDA would have
//   turned into a silent race.
// - Events: record() notes how much of its stream's work was queued; query() says whether that
//   is done; block(stream) and synchronize() wait for it on the host (the order is what counts).
//
// Stream ids: 0 is each device's default stream; side streams are 1 to 4, shared by both fake
// devices (nothing here depends on which device a stream belongs to).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace bv::fake {

using StreamId = int64_t;

// The current stream of this thread (0 unless exchanged).
StreamId current_stream();
StreamId exchange_stream(StreamId s);
// A side stream from the pool of four, round robin.
StreamId pool_stream();

// How far `s`'s queued work goes: the number of copies ever queued on it.
uint64_t queued(StreamId s);

// Queues `copy` on stream `s`, to run after the delay, after what `s` has queued before; `writes`
// (a device storage's address, or null) is what it writes, for check_use. Returns its sequence
// number on `s`.
uint64_t enqueue(StreamId s, const void* writes, std::function<void()> copy);

// Host waits (the model above). wait_until: `s`'s first `seq` copies are done. host_sync: also
// makes their writes visible to every stream. order: stream `c` is ordered after `s`'s first
// `seq` copies (an event blocked on): waits, and makes their writes visible to `c`.
void wait_until(StreamId s, uint64_t seq);
void host_sync(StreamId s, uint64_t seq);
void host_sync_all();
void order(StreamId c, StreamId s, uint64_t seq);
bool done(StreamId s, uint64_t seq);

// Before an op on the current stream uses the device storage at `storage`: waits for the current
// stream's own queued copies, and fails (naming `op` and `what`) when another stream's copy into
// it is queued or done but not ordered before the current stream.
void check_use(const void* storage, const std::string& op, const std::string& what);

// The delay of copies queued from now on (tests that show a host read racing a copy make it
// long, so that the race is certain).
void set_delay(std::chrono::milliseconds delay);

// The storage at `storage` is being freed: waits for copies still writing it and forgets it.
void forget(const void* storage);

}  // namespace bv::fake
