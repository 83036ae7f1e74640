// The memory behind big_vision's choice_no_replacement: for each (op, example id), the items of
// the current round not chosen yet. One pool per process, shared by every data worker thread
// (each has its own Lua state), so that an example's visits cycle through all of its items
// before any repeats, whichever worker handles a visit. Like big_vision's counter it lives in
// host memory and starts over with the process (it is not saved in checkpoints).
#pragma once

#include <cstdint>
#include <string>

#include "core/rng.h"

namespace bv::pp {

// Draws one of 0..n-1 (with `rng`) among those that this (scope, id) has not drawn in its
// current round, and marks it drawn; a round ends when all n were drawn, and a new one (a new
// random order) starts. A different n than last time also starts a new round. n must be > 0.
int64_t take_unseen(const std::string& scope, const std::string& id, int64_t n, Rng& rng);

// Forgets every scope whose name starts with `prefix` ("" forgets all); returns how many
// (scope, id) entries were dropped. For tests and for a process that rebuilds its pipelines.
int64_t forget_unseen(const std::string& prefix);

}  // namespace bv::pp
