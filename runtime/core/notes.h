// Notes from C++ for bv's log: code with no Lua state (a model's forward, maybe on autograd's
// thread) posts a line here, and the Lua side prints it as a NOTE (lib/bv/models.lua, after
// each call into a model). For things worth saying once, such as which attention kernel a GPU
// picked; not for errors, which are exceptions.
#pragma once

#include <string>
#include <vector>

namespace bv {

// Queues a line (thread-safe).
void post_note(std::string line);

// The lines queued since the last call, oldest first, and empties the queue. Cheap when there
// are none (one atomic load).
std::vector<std::string> take_notes();

}  // namespace bv
