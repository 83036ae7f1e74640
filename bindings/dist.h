// The bv.DistGroup userdata, for other bindings that take a group (bv.dist.fsdp, the optimizer).
#pragma once

#include <lua.hpp>

#include <memory>

namespace bv {
struct DistGroup;
}

namespace bv::lua {

// The group at `arg` (a bv.DistGroup from bv.dist.init), or a Lua error.
std::shared_ptr<DistGroup> check_dist_group(lua_State* L, int arg);

}  // namespace bv::lua
