// bv.to_device_async(batch, device) -> a pending copy; copy:wait() -> the batch on the device.
// The batch is a table of name -> value; its tensors travel to the device on a side stream
// while the caller goes on (device/device_copy.h), its other values (strings, lists) are carried
// over as they are. The trainers start the next batch's copy before running the current step.
#include <lua.hpp>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "device/device_copy.h"
#include "lua_util.h"
#include "tensor.h"

namespace bv::lua {

namespace {

constexpr const char* kCopyMeta = "bv.DeviceCopy";

struct PendingBatch {
  std::unique_ptr<DeviceCopy> copy;
  std::vector<std::string> keys;  // the tensors' keys, in the copy's order
};

PendingBatch& check_pending(lua_State* L) {
  return *static_cast<PendingBatch*>(luaL_checkudata(L, 1, kCopyMeta));
}

int to_device_async(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  std::string device_name = luaL_checkstring(L, 2);
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(device_name);
  } catch (const c10::Error&) {
    raise(L, str("to_device_async: '", device_name, "' is not a device (cpu, cuda:0)"));
  }
  auto* p = new (lua_newuserdatauv(L, sizeof(PendingBatch), 1)) PendingBatch();
  luaL_setmetatable(L, kCopyMeta);
  // The uservalue: the batch's other values now, its device tensors after wait().
  lua_newtable(L);
  std::vector<at::Tensor> host;
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING) raise(L, "to_device_async: batch keys must be strings");
    if (at::Tensor* t = test_tensor(L, -1)) {
      p->keys.emplace_back(lua_tostring(L, -2));
      host.push_back(*t);
      lua_pop(L, 1);
    } else {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);
    }
  }
  lua_setiuservalue(L, -2, 1);
  p->copy = std::make_unique<DeviceCopy>(std::move(host), device);
  return 1;
}

int copy_wait(lua_State* L) {
  PendingBatch& p = check_pending(L);
  if (!p.copy) raise(L, "to_device_async: wait() was already called on this copy");
  std::vector<at::Tensor> tensors = p.copy->wait();
  p.copy.reset();
  lua_getiuservalue(L, 1, 1);
  for (size_t i = 0; i < tensors.size(); ++i) {
    push_tensor(L, tensors[i]);
    lua_setfield(L, -2, p.keys[i].c_str());
  }
  return 1;
}

int copy_gc(lua_State* L) {
  static_cast<PendingBatch*>(luaL_checkudata(L, 1, kCopyMeta))->~PendingBatch();
  return 0;
}

}  // namespace

void open_device_copy(lua_State* L) {
  static const luaL_Reg methods[] = {BV_FN("wait", copy_wait), {nullptr, nullptr}};
  luaL_newmetatable(L, kCopyMeta);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, copy_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  static const luaL_Reg functions[] = {BV_FN("to_device_async", to_device_async),
                                       {nullptr, nullptr}};
  luaL_setfuncs(L, functions, 0);
}

}  // namespace bv::lua
