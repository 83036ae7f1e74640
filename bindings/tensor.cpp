// bv.Tensor and the bv.* tensor functions. Conventions (see README): shapes are Lua tables such
// as {2, 3}; indices and dimension numbers are 1-based, negative ones count from the end; argmax
// and max(dim) return 1-based indices. Everything below goes through the `guarded` trampoline.
#include "tensor.h"

#include <ATen/ATen.h>

#include <new>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_util.h"
#include "lua_util.h"
#include "rng.h"

namespace bv::lua {

// ---------------------------------------------------------------------------------------------
// Userdata plumbing

void push_tensor(lua_State* L, at::Tensor t) {
  size_t bytes = t.defined() ? static_cast<size_t>(t.numel()) * t.element_size() : 0;
  void* p = lua_newuserdatauv(L, sizeof(at::Tensor), 0);
  new (p) at::Tensor(std::move(t));
  luaL_setmetatable(L, kTensorMeta);
  // Lua only sees the few bytes of the userdata; without this hint a loop making 1 MiB
  // temporaries reaches gigabytes before a collection (Torch7's best-known memory complaint).
  if (bytes >= 1024) lua_gc(L, LUA_GCSTEP, static_cast<int>(bytes / 1024));
}

at::Tensor* test_tensor(lua_State* L, int arg) {
  return static_cast<at::Tensor*>(luaL_testudata(L, arg, kTensorMeta));
}

void push_shape(lua_State* L, const std::vector<int64_t>& shape) {
  lua_createtable(L, static_cast<int>(shape.size()), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    lua_pushinteger(L, shape[d]);
    lua_rawseti(L, -2, static_cast<lua_Integer>(d + 1));
  }
}

at::Tensor& check_tensor(lua_State* L, int arg) {
  auto* t = static_cast<at::Tensor*>(luaL_checkudata(L, arg, kTensorMeta));
  if (!t->defined()) luaL_argerror(L, arg, "tensor was released (closed)");
  return *t;
}

namespace {

// A Lua number or boolean as a libtorch Scalar, keeping Lua's integer/float distinction.
at::Scalar check_scalar(lua_State* L, int arg) {
  if (lua_type(L, arg) == LUA_TBOOLEAN) return at::Scalar(static_cast<bool>(lua_toboolean(L, arg)));
  if (lua_isinteger(L, arg)) return at::Scalar(static_cast<int64_t>(lua_tointeger(L, arg)));
  return at::Scalar(static_cast<double>(luaL_checknumber(L, arg)));
}

// An operand of an arithmetic op: a tensor, or a number wrapped the way PyTorch wraps Python
// scalars, so `t * 2` keeps t's dtype (float32 * 2 is float32, uint8 + 1 is uint8).
at::Tensor check_operand(lua_State* L, int arg) {
  if (test_tensor(L, arg)) return check_tensor(L, arg);
  at::Scalar v = check_scalar(L, arg);
  at::Tensor s = at::scalar_tensor(v, at::TensorOptions().dtype(v.type()));
  s.unsafeGetTensorImpl()->set_wrapped_number(true);
  return s;
}

c10::ScalarType check_dtype(lua_State* L, int arg) {
  return dtype_from_name(luaL_checkstring(L, arg));
}

// 1-based (or negative) dimension number -> 0-based, checked against `ndim`.
int64_t check_dim(lua_State* L, int arg, int64_t ndim) {
  int64_t d = check_int(L, arg);
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dim 1 / -1, as torch accepts 0 / -1
  if (d >= 1 && d <= n) return d - 1;
  if (d <= -1 && d >= -n) return n + d;
  raise(L, str("dimension ", d, " out of range for a ", ndim,
               "-d tensor (dimensions are 1-based; -1 is the last)"));
}

// 1-based (or negative) index into a dimension of `size` -> 0-based.
int64_t normalize_index(lua_State* L, int64_t i, int64_t size, int64_t dim) {
  if (i >= 1 && i <= size) return i - 1;
  if (i <= -1 && i >= -size) return size + i;
  raise(L, str("index ", i, " out of range for dimension ", dim + 1, " of size ", size,
               " (indices are 1-based; -1 is the last)"));
}

// A shape given as a table {2, 3} or as integer arguments from `arg` on.
std::vector<int64_t> check_shape(lua_State* L, int arg) {
  std::vector<int64_t> shape;
  if (lua_istable(L, arg)) {
    lua_Integer n = luaL_len(L, arg);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_geti(L, arg, i);
      int ok = 0;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      if (!ok) raise(L, str("shape entry ", i, " is not an integer"));
      shape.push_back(v);
      lua_pop(L, 1);
    }
    return shape;
  }
  int top = lua_gettop(L);
  for (int i = arg; i <= top && lua_type(L, i) == LUA_TNUMBER; ++i)
    shape.push_back(check_int(L, i));
  if (shape.empty()) luaL_typeerror(L, arg, "shape table such as {2, 3}");
  return shape;
}

// Dimension list given as a table or as integer arguments from `arg` on, made 0-based.
std::vector<int64_t> check_dims(lua_State* L, int arg, int64_t ndim) {
  std::vector<int64_t> dims;
  if (lua_istable(L, arg)) {
    lua_Integer n = luaL_len(L, arg);
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_geti(L, arg, i);
      int idx = lua_gettop(L);
      dims.push_back(check_dim(L, idx, ndim));
      lua_pop(L, 1);
    }
    return dims;
  }
  int top = lua_gettop(L);
  for (int i = arg; i <= top; ++i) dims.push_back(check_dim(L, i, ndim));
  return dims;
}

// Optional trailing arguments of factories: a dtype name and/or an Rng, in either order.
struct FactoryArgs {
  c10::optional<c10::ScalarType> dtype;
  Rng* rng = nullptr;
};

FactoryArgs check_factory_args(lua_State* L, int first) {
  FactoryArgs out;
  for (int i = first; i <= lua_gettop(L); ++i) {
    if (lua_isnil(L, i)) continue;
    if (lua_type(L, i) == LUA_TSTRING) {
      out.dtype = check_dtype(L, i);
    } else if (Rng* r = test_rng(L, i)) {
      out.rng = r;
    } else {
      luaL_typeerror(L, i, "dtype name or bv.Rng");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// bv.tensor(nested table | number | boolean | tensor [, dtype])

struct NestedValues {
  std::vector<int64_t> shape;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  bool any_float = false, any_bool = false, any_number = false;
  int leaf_depth = -1;
};

void read_nested(lua_State* L, int idx, int depth, NestedValues& v, const std::string& path) {
  int type = lua_type(L, idx);
  if (type == LUA_TTABLE) {
    int64_t n = luaL_len(L, idx);
    if (static_cast<int>(v.shape.size()) == depth) {
      if (v.leaf_depth >= 0) raise(L, str("bv.tensor: ragged nested table at ", path));
      v.shape.push_back(n);
    } else if (static_cast<int>(v.shape.size()) < depth || v.shape[depth] != n) {
      raise(L, str("bv.tensor: ragged nested table at ", path, ": expected ",
                   depth < static_cast<int>(v.shape.size()) ? v.shape[depth] : 0, " elements, got ",
                   n));
    }
    for (int64_t i = 1; i <= n; ++i) {
      lua_geti(L, idx, i);
      read_nested(L, lua_gettop(L), depth + 1, v, path + "[" + std::to_string(i) + "]");
      lua_pop(L, 1);
    }
    return;
  }
  if (v.leaf_depth < 0) v.leaf_depth = depth;
  if (v.leaf_depth != depth || static_cast<int>(v.shape.size()) != depth) {
    raise(L, str("bv.tensor: ragged nested table at ", path));
  }
  if (type == LUA_TBOOLEAN) {
    v.any_bool = true;
    v.ints.push_back(lua_toboolean(L, idx));
    v.floats.push_back(lua_toboolean(L, idx));
  } else if (type == LUA_TNUMBER) {
    v.any_number = true;
    if (lua_isinteger(L, idx)) {
      v.ints.push_back(lua_tointeger(L, idx));
      v.floats.push_back(static_cast<double>(lua_tointeger(L, idx)));
    } else {
      v.any_float = true;
      v.ints.push_back(0);
      v.floats.push_back(lua_tonumber(L, idx));
    }
  } else {
    raise(L, str("bv.tensor: element ", path, " is a ", luaL_typename(L, idx),
                 ", expected a number or boolean"));
  }
}

int bv_tensor(lua_State* L) {
  c10::optional<c10::ScalarType> dtype;
  if (!lua_isnoneornil(L, 2)) dtype = check_dtype(L, 2);
  if (at::Tensor* t = test_tensor(L, 1)) {
    push_tensor(L, dtype ? t->to(*dtype) : t->clone());
    return 1;
  }
  luaL_argexpected(
      L, lua_istable(L, 1) || lua_type(L, 1) == LUA_TNUMBER || lua_type(L, 1) == LUA_TBOOLEAN, 1,
      "nested table, number or boolean");
  NestedValues v;
  read_nested(L, 1, 0, v, "");
  if (v.any_bool && v.any_number) raise(L, "bv.tensor: cannot mix booleans and numbers");
  at::Tensor t;
  if (v.any_float || (!v.any_bool && !v.any_number)) {  // floats, or an empty table
    t = at::tensor(v.floats, at::kDouble).to(at::kFloat);
  } else {
    t = at::tensor(v.ints, at::kLong);
    if (v.any_bool) t = t.to(at::kBool);
  }
  t = t.reshape(v.shape);
  if (dtype) {
    // Convert from the exact values we read (doubles keep 0.1 as close as float64 can).
    t = (v.any_float ? at::tensor(v.floats, at::kDouble).reshape(v.shape) : t).to(*dtype);
  }
  push_tensor(L, t);
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Factories

int bv_zeros(lua_State* L) {
  auto shape = check_shape(L, 1);
  auto args = check_factory_args(L, 2);
  push_tensor(L, at::zeros(shape, at::TensorOptions().dtype(args.dtype.value_or(at::kFloat))));
  return 1;
}

int bv_ones(lua_State* L) {
  auto shape = check_shape(L, 1);
  auto args = check_factory_args(L, 2);
  push_tensor(L, at::ones(shape, at::TensorOptions().dtype(args.dtype.value_or(at::kFloat))));
  return 1;
}

// bv.full(shape, value [, dtype]): dtype follows the value as in PyTorch 2 (integer -> int64,
// float -> float32, boolean -> bool) unless given.
int bv_full(lua_State* L) {
  auto shape = check_shape(L, 1);
  at::Scalar value = check_scalar(L, 2);
  auto args = check_factory_args(L, 3);
  c10::ScalarType fallback = value.isBoolean()         ? at::kBool
                             : value.isIntegral(false) ? at::kLong
                                                       : at::kFloat;
  push_tensor(L, at::full(shape, value, at::TensorOptions().dtype(args.dtype.value_or(fallback))));
  return 1;
}

// bv.arange(stop) | bv.arange(start, stop [, step]) [, dtype]: stop is exclusive; integer
// arguments give int64, any float gives float32.
int bv_arange(lua_State* L) {
  int nnum = 0;
  while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) ++nnum;
  luaL_argcheck(L, nnum >= 1, 1, "number expected");
  at::Scalar start = 0, stop, step = 1;
  bool all_int = true;
  for (int i = 1; i <= nnum; ++i) all_int = all_int && lua_isinteger(L, i);
  if (nnum == 1) {
    stop = check_scalar(L, 1);
  } else {
    start = check_scalar(L, 1);
    stop = check_scalar(L, 2);
    if (nnum == 3) step = check_scalar(L, 3);
  }
  auto args = check_factory_args(L, nnum + 1);
  c10::ScalarType dtype = args.dtype.value_or(all_int ? at::kLong : at::kFloat);
  push_tensor(L, at::arange(start, stop, step, at::TensorOptions().dtype(dtype)));
  return 1;
}

// bv.rand(shape [, dtype] [, rng]) / bv.randn: with an rng the numbers depend only on its seed.
int random_tensor(lua_State* L, bool normal) {
  auto shape = check_shape(L, 1);
  auto args = check_factory_args(L, 2);
  auto opts = at::TensorOptions().dtype(args.dtype.value_or(at::kFloat));
  c10::optional<at::Generator> gen;
  if (args.rng) gen = args.rng->gen;
  push_tensor(L, normal ? at::randn(shape, gen, opts) : at::rand(shape, gen, opts));
  return 1;
}

int bv_rand(lua_State* L) { return random_tensor(L, false); }
int bv_randn(lua_State* L) { return random_tensor(L, true); }

int bv_manual_seed(lua_State* L) {
  at::manual_seed(static_cast<uint64_t>(check_int(L, 1)));
  return 0;
}

int bv_is_tensor(lua_State* L) {
  lua_pushboolean(L, test_tensor(L, 1) != nullptr);
  return 1;
}

std::vector<at::Tensor> check_tensor_list(lua_State* L, int arg) {
  luaL_checktype(L, arg, LUA_TTABLE);
  std::vector<at::Tensor> list;
  lua_Integer n = luaL_len(L, arg);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, arg, i);
    at::Tensor* t = test_tensor(L, -1);
    if (!t) raise(L, str("element ", i, " of the tensor list is a ", luaL_typename(L, -1)));
    list.push_back(*t);
    lua_pop(L, 1);
  }
  if (list.empty()) raise(L, "expected a non-empty list of tensors");
  return list;
}

// bv.cat({a, b, ...} [, dim=1]) and bv.stack({a, b, ...} [, dim=1]).
int bv_cat(lua_State* L) {
  auto list = check_tensor_list(L, 1);
  int64_t dim = lua_isnoneornil(L, 2) ? 0 : check_dim(L, 2, list[0].dim());
  push_tensor(L, at::cat(list, dim));
  return 1;
}

int bv_stack(lua_State* L) {
  auto list = check_tensor_list(L, 1);
  int64_t dim = lua_isnoneornil(L, 2) ? 0 : check_dim(L, 2, list[0].dim() + 1);
  push_tensor(L, at::stack(list, dim));
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Introspection and conversion

int t_shape(lua_State* L) {
  push_shape(L, check_tensor(L, 1).sizes().vec());
  return 1;
}

// t:size() is t:shape(); t:size(d) is the size of dimension d.
int t_size(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  if (lua_isnoneornil(L, 2)) return t_shape(L);
  lua_pushinteger(L, t.size(check_dim(L, 2, t.dim())));
  return 1;
}

int t_dim(lua_State* L) {
  lua_pushinteger(L, check_tensor(L, 1).dim());
  return 1;
}

int t_numel(lua_State* L) {
  lua_pushinteger(L, check_tensor(L, 1).numel());
  return 1;
}

int t_nbytes(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  lua_pushinteger(L, t.numel() * static_cast<int64_t>(t.element_size()));
  return 1;
}

int t_dtype(lua_State* L) {
  lua_pushstring(L, dtype_name(check_tensor(L, 1).scalar_type()).c_str());
  return 1;
}

int t_device(lua_State* L) {
  lua_pushstring(L, check_tensor(L, 1).device().str().c_str());
  return 1;
}

void push_element(lua_State* L, const at::Tensor& t) {
  if (t.scalar_type() == at::kBool) {
    lua_pushboolean(L, t.item<bool>());
  } else if (at::isFloatingType(t.scalar_type())) {
    lua_pushnumber(L, t.item<double>());
  } else {
    lua_pushinteger(L, t.item<int64_t>());
  }
}

int t_item(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  if (t.numel() != 1) raise(L, str("item(): the tensor has ", t.numel(), " elements, not 1"));
  push_element(L, t);
  return 1;
}

void push_table(lua_State* L, const at::Tensor& t) {
  if (t.dim() == 0) {
    push_element(L, t);
    return;
  }
  luaL_checkstack(L, 3, "tensor too deep");
  lua_createtable(L, static_cast<int>(t.size(0)), 0);
  for (int64_t i = 0; i < t.size(0); ++i) {
    push_table(L, t[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

int t_totable(lua_State* L) {
  push_table(L, check_tensor(L, 1).to(at::kCPU));
  return 1;
}

// t:to("float32") or t:to("cuda:0") / t:to("cpu").
int t_to(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  std::string what = luaL_checkstring(L, 2);
  if (is_dtype_name(what)) {
    push_tensor(L, t.to(dtype_from_name(what)));
    return 1;
  }
  std::optional<at::Device> device;
  try {
    device = at::Device(what);
  } catch (const c10::Error&) {
    raise(L, str("to(): '", what,
                 "' is neither a dtype (float32, int64, ...) nor a device (cpu, cuda:0)"));
  }
  push_tensor(L, t.to(*device));
  return 1;
}

// t:is_pinned(): whether t is in pinned host memory (batches bound for a GPU).
int t_is_pinned(lua_State* L) {
  lua_pushboolean(L, check_tensor(L, 1).is_pinned());
  return 1;
}

// t:move_to_(device): this tensor object now holds its copy on `device` (cpu, cuda:0), and its
// old memory is freed unless another tensor shares it. Moving a model's parameters one by one so
// keeps one tensor's worth of host memory in flight, where a new table would hold both copies
// until Lua's collector (which does not see tensor memory) runs. Returns t.
int t_move_to_(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  std::string what = luaL_checkstring(L, 2);
  std::optional<at::Device> device;
  try {
    device = at::Device(what);
  } catch (const c10::Error&) {
    raise(L, str("move_to_(): '", what, "' is not a device (cpu, cuda:0)"));
  }
  if (t.device() != *device) t = t.to(*device);
  lua_settop(L, 1);
  return 1;
}

// t:release(): drops this object's tensor now, as `local t <close>` does at the end of its
// scope; the memory is freed unless another tensor shares it. Every later use is an error.
int t_release(lua_State* L) {
  check_tensor(L, 1) = at::Tensor();
  return 0;
}

int t_clone(lua_State* L) {
  push_tensor(L, check_tensor(L, 1).clone());
  return 1;
}

int t_contiguous(lua_State* L) {
  push_tensor(L, check_tensor(L, 1).contiguous());
  return 1;
}

int t_is_contiguous(lua_State* L) {
  lua_pushboolean(L, check_tensor(L, 1).is_contiguous());
  return 1;
}

int t_tostring(lua_State* L) {
  auto* t = static_cast<at::Tensor*>(luaL_checkudata(L, 1, kTensorMeta));
  lua_pushstring(L, t->defined() ? tensor_summary(*t).c_str() : "Tensor[released]");
  return 1;
}

// t:format(): every value, nested and multi-line (what print shows for small tensors).
int t_format(lua_State* L) {
  lua_pushstring(L, tensor_values(check_tensor(L, 1)).c_str());
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Arithmetic and comparison

#define BINARY(fname, expr)             \
  int fname(lua_State* L) {             \
    at::Tensor a = check_operand(L, 1); \
    at::Tensor b = check_operand(L, 2); \
    push_tensor(L, expr);               \
    return 1;                           \
  }

BINARY(t_add, at::add(a, b))
BINARY(t_sub, at::sub(a, b))
BINARY(t_mul, at::mul(a, b))
BINARY(t_div, at::div(a, b))
BINARY(t_idiv, at::div(a, b, "floor"))
BINARY(t_mod, at::remainder(a, b))
BINARY(t_pow, at::pow(a, b))
BINARY(t_eq, at::eq(a, b))
BINARY(t_ne, at::ne(a, b))
BINARY(t_lt, at::lt(a, b))
BINARY(t_le, at::le(a, b))
BINARY(t_gt, at::gt(a, b))
BINARY(t_ge, at::ge(a, b))
BINARY(t_maximum, at::maximum(a, b))
BINARY(t_minimum, at::minimum(a, b))
#undef BINARY

int t_matmul(lua_State* L) {
  push_tensor(L, at::matmul(check_tensor(L, 1), check_tensor(L, 2)));
  return 1;
}

// Lua turns the result of __eq/__lt/__le into a boolean, so these answer for the whole tensor:
// `a == b` is "same shape and values"; `a < b` is "every element is less".
int meta_eq(lua_State* L) {
  at::Tensor& a = check_tensor(L, 1);
  at::Tensor& b = check_tensor(L, 2);
  lua_pushboolean(L,
                  a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && at::equal(a, b));
  return 1;
}

int meta_lt(lua_State* L) {
  lua_pushboolean(L, at::lt(check_operand(L, 1), check_operand(L, 2)).all().item<bool>());
  return 1;
}

int meta_le(lua_State* L) {
  lua_pushboolean(L, at::le(check_operand(L, 1), check_operand(L, 2)).all().item<bool>());
  return 1;
}

int meta_unm(lua_State* L) {
  push_tensor(L, at::neg(check_tensor(L, 1)));
  return 1;
}

int meta_len(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  if (t.dim() == 0) raise(L, "# of a 0-d tensor");
  lua_pushinteger(L, t.size(0));
  return 1;
}

// t:equal(other): same shape and values (dtype may differ).
int t_equal(lua_State* L) {
  at::Tensor& a = check_tensor(L, 1);
  at::Tensor& b = check_tensor(L, 2);
  lua_pushboolean(L, a.sizes() == b.sizes() && at::equal(a, b.to(a.scalar_type())));
  return 1;
}

int t_allclose(lua_State* L) {
  at::Tensor& a = check_tensor(L, 1);
  at::Tensor& b = check_tensor(L, 2);
  double rtol = luaL_optnumber(L, 3, 1e-5), atol = luaL_optnumber(L, 4, 1e-8);
  lua_pushboolean(L, at::allclose(a, b, rtol, atol));
  return 1;
}

int t_all(lua_State* L) {
  lua_pushboolean(L, check_tensor(L, 1).all().item<bool>());
  return 1;
}

int t_any(lua_State* L) {
  lua_pushboolean(L, check_tensor(L, 1).any().item<bool>());
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Elementwise math

#define UNARY(fname, expr)              \
  int fname(lua_State* L) {             \
    at::Tensor& t = check_tensor(L, 1); \
    push_tensor(L, expr);               \
    return 1;                           \
  }

UNARY(t_exp, t.exp())
UNARY(t_log, t.log())
UNARY(t_sqrt, t.sqrt())
UNARY(t_abs, t.abs())
UNARY(t_tanh, t.tanh())
UNARY(t_sigmoid, t.sigmoid())
UNARY(t_neg, t.neg())
UNARY(t_floor, t.floor())
UNARY(t_ceil, t.ceil())
UNARY(t_round, t.round())
#undef UNARY

// t:clamp(min, max): either bound may be nil.
int t_clamp(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  c10::optional<at::Scalar> lo, hi;
  if (!lua_isnoneornil(L, 2)) lo = check_scalar(L, 2);
  if (!lua_isnoneornil(L, 3)) hi = check_scalar(L, 3);
  if (!lo && !hi) raise(L, "clamp(): give min, max or both");
  push_tensor(L, at::clamp(t, lo, hi));
  return 1;
}

int t_softmax(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  int64_t dim = lua_isnoneornil(L, 2) ? -1 : check_dim(L, 2, t.dim());
  push_tensor(L, at::softmax(t, dim));
  return 1;
}

int t_log_softmax(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  int64_t dim = lua_isnoneornil(L, 2) ? -1 : check_dim(L, 2, t.dim());
  push_tensor(L, at::log_softmax(t, dim));
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Reductions: t:sum() over everything, t:sum(dim [, keepdim]) along one dimension.

#define REDUCE(fname, all_expr, dim_expr)     \
  int fname(lua_State* L) {                   \
    at::Tensor& t = check_tensor(L, 1);       \
    if (lua_isnoneornil(L, 2)) {              \
      push_tensor(L, all_expr);               \
    } else {                                  \
      int64_t dim = check_dim(L, 2, t.dim()); \
      bool keepdim = lua_toboolean(L, 3);     \
      push_tensor(L, dim_expr);               \
    }                                         \
    return 1;                                 \
  }

REDUCE(t_sum, t.sum(), t.sum(dim, keepdim))
REDUCE(t_mean, t.mean(), t.mean(dim, keepdim))
REDUCE(t_norm, t.norm(), at::norm(t, 2, {dim}, keepdim))
#undef REDUCE

// t:max() -> 0-d tensor; t:max(dim [, keepdim]) -> values, 1-based indices.
int reduce_extreme(lua_State* L, bool is_max) {
  at::Tensor& t = check_tensor(L, 1);
  if (lua_isnoneornil(L, 2)) {
    push_tensor(L, is_max ? t.max() : t.min());
    return 1;
  }
  int64_t dim = check_dim(L, 2, t.dim());
  bool keepdim = lua_toboolean(L, 3);
  auto result = is_max ? t.max(dim, keepdim) : t.min(dim, keepdim);
  push_tensor(L, std::get<0>(result));
  push_tensor(L, std::get<1>(result) + 1);
  return 2;
}

int t_max(lua_State* L) { return reduce_extreme(L, true); }
int t_min(lua_State* L) { return reduce_extreme(L, false); }

// t:argmax() -> 1-based index into the flattened tensor; t:argmax(dim [, keepdim]).
int reduce_arg(lua_State* L, bool is_max) {
  at::Tensor& t = check_tensor(L, 1);
  c10::optional<int64_t> dim;
  if (!lua_isnoneornil(L, 2)) dim = check_dim(L, 2, t.dim());
  bool keepdim = lua_toboolean(L, 3);
  push_tensor(L, (is_max ? t.argmax(dim, keepdim) : t.argmin(dim, keepdim)) + 1);
  return 1;
}

int t_argmax(lua_State* L) { return reduce_arg(L, true); }
int t_argmin(lua_State* L) { return reduce_arg(L, false); }

// ---------------------------------------------------------------------------------------------
// Shape ops

int t_view(lua_State* L) {
  push_tensor(L, check_tensor(L, 1).view(check_shape(L, 2)));
  return 1;
}

int t_reshape(lua_State* L) {
  push_tensor(L, check_tensor(L, 1).reshape(check_shape(L, 2)));
  return 1;
}

int t_permute(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  push_tensor(L, t.permute(check_dims(L, 2, t.dim())));
  return 1;
}

int t_transpose(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  push_tensor(L, t.transpose(check_dim(L, 2, t.dim()), check_dim(L, 3, t.dim())));
  return 1;
}

int t_flip(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  push_tensor(L, t.flip(check_dims(L, 2, t.dim())));
  return 1;
}

int t_squeeze(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  push_tensor(L, lua_isnoneornil(L, 2) ? t.squeeze() : t.squeeze(check_dim(L, 2, t.dim())));
  return 1;
}

int t_unsqueeze(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  push_tensor(L, t.unsqueeze(check_dim(L, 2, t.dim() + 1)));
  return 1;
}

// t:narrow(dim, start, length) with a 1-based start.
int t_narrow(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  int64_t dim = check_dim(L, 2, t.dim());
  int64_t start = normalize_index(L, check_int(L, 3), t.size(dim), dim);
  push_tensor(L, t.narrow(dim, start, check_int(L, 4)));
  return 1;
}

int t_select(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  int64_t dim = check_dim(L, 2, t.dim());
  push_tensor(L, t.select(dim, normalize_index(L, check_int(L, 3), t.size(dim), dim)));
  return 1;
}

int t_cat(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  at::Tensor& other = check_tensor(L, 2);
  int64_t dim = lua_isnoneornil(L, 3) ? 0 : check_dim(L, 3, t.dim());
  push_tensor(L, at::cat({t, other}, dim));
  return 1;
}

// ---------------------------------------------------------------------------------------------
// In-place

int t_fill_(lua_State* L) {
  check_tensor(L, 1).fill_(check_scalar(L, 2));
  lua_settop(L, 1);
  return 1;
}

int t_zero_(lua_State* L) {
  check_tensor(L, 1).zero_();
  lua_settop(L, 1);
  return 1;
}

int t_copy_(lua_State* L) {
  check_tensor(L, 1).copy_(check_tensor(L, 2));
  lua_settop(L, 1);
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Indexing: t[i] selects along the first dimension; t[{i, {a, b}, {}}] takes, per dimension, an
// index (dimension dropped), an inclusive range {a, b} or {a, b, step}, {a} (one index, kept), or
// {} (all); t[mask] with a bool tensor selects the masked elements.

at::Tensor index_view(lua_State* L, const at::Tensor& t, int key) {
  if (lua_type(L, key) == LUA_TNUMBER) {
    if (t.dim() == 0) raise(L, "cannot index a 0-d tensor; use :item()");
    return t.select(0, normalize_index(L, check_int(L, key), t.size(0), 0));
  }
  luaL_checktype(L, key, LUA_TTABLE);
  at::Tensor r = t;
  int64_t dim = 0;
  lua_Integer n = luaL_len(L, key);
  for (lua_Integer i = 1; i <= n; ++i) {
    if (dim >= r.dim()) raise(L, str("too many indices (", n, ") for a ", t.dim(), "-d tensor"));
    lua_geti(L, key, i);
    int entry = lua_gettop(L);
    int64_t size = r.size(dim);
    if (lua_type(L, entry) == LUA_TNUMBER) {
      r = r.select(dim, normalize_index(L, check_int(L, entry), size, dim));
    } else if (lua_istable(L, entry)) {
      lua_Integer m = luaL_len(L, entry);
      if (m > 3) raise(L, str("range for dimension ", dim + 1, " has ", m, " entries (at most 3)"));
      int64_t first = 1, last = -1, step = 1;
      if (m >= 1) {
        lua_geti(L, entry, 1);
        first = check_int(L, -1);
        lua_pop(L, 1);
        last = first;
      }
      if (m >= 2) {
        lua_geti(L, entry, 2);
        last = check_int(L, -1);
        lua_pop(L, 1);
      }
      if (m == 3) {
        lua_geti(L, entry, 3);
        step = check_int(L, -1);
        lua_pop(L, 1);
        if (step < 1) raise(L, str("range step must be positive, got ", step));
      }
      if (size == 0 && m == 0) {
        // {} over an empty dimension: nothing to normalize
      } else {
        int64_t a = normalize_index(L, first, size, dim);
        int64_t b = normalize_index(L, last, size, dim);
        if (b < a) raise(L, str("empty range {", first, ", ", last, "} for dimension ", dim + 1));
        r = r.slice(dim, a, b + 1, step);
      }
      ++dim;
    } else {
      raise(L, str("index entry ", i, " is a ", luaL_typename(L, entry),
                   " (expected an integer or a range table)"));
    }
    lua_settop(L, entry - 1);
  }
  return r;
}

int meta_index(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  int type = lua_type(L, 2);
  if (type == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));  // the methods table
    return 1;
  }
  if (at::Tensor* mask = test_tensor(L, 2)) {
    push_tensor(L, t.masked_select(*mask));
    return 1;
  }
  push_tensor(L, index_view(L, t, 2));
  return 1;
}

int meta_newindex(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING)
    raise(L, str("cannot set field '", lua_tostring(L, 2), "' of a tensor"));
  if (at::Tensor* mask = test_tensor(L, 2)) {
    if (at::Tensor* v = test_tensor(L, 3)) {
      t.masked_scatter_(*mask, *v);
    } else {
      t.masked_fill_(*mask, check_scalar(L, 3));
    }
    return 0;
  }
  at::Tensor view = index_view(L, t, 2);
  if (at::Tensor* v = test_tensor(L, 3)) {
    view.copy_(*v);
  } else {
    view.fill_(check_scalar(L, 3));
  }
  return 0;
}

// __gc and __close: drop our reference. After __close the userdata holds an undefined tensor and
// every method reports it as released.
int meta_gc(lua_State* L) {
  auto* t = static_cast<at::Tensor*>(luaL_checkudata(L, 1, kTensorMeta));
  t->~Tensor();
  new (t) at::Tensor();
  return 0;
}

}  // namespace

void open_tensor(lua_State* L) {
  static const luaL_Reg methods[] = {
      BV_FN("shape", t_shape),
      BV_FN("size", t_size),
      BV_FN("dim", t_dim),
      BV_FN("numel", t_numel),
      BV_FN("nbytes", t_nbytes),
      BV_FN("dtype", t_dtype),
      BV_FN("device", t_device),
      BV_FN("item", t_item),
      BV_FN("totable", t_totable),
      BV_FN("to", t_to),
      BV_FN("clone", t_clone),
      BV_FN("contiguous", t_contiguous),
      BV_FN("is_contiguous", t_is_contiguous),
      BV_FN("is_pinned", t_is_pinned),
      BV_FN("move_to_", t_move_to_),
      BV_FN("release", t_release),
      BV_FN("format", t_format),
      BV_FN("add", t_add),
      BV_FN("sub", t_sub),
      BV_FN("mul", t_mul),
      BV_FN("div", t_div),
      BV_FN("pow", t_pow),
      BV_FN("eq", t_eq),
      BV_FN("ne", t_ne),
      BV_FN("lt", t_lt),
      BV_FN("le", t_le),
      BV_FN("gt", t_gt),
      BV_FN("ge", t_ge),
      BV_FN("maximum", t_maximum),
      BV_FN("minimum", t_minimum),
      BV_FN("matmul", t_matmul),
      BV_FN("equal", t_equal),
      BV_FN("allclose", t_allclose),
      BV_FN("all", t_all),
      BV_FN("any", t_any),
      BV_FN("exp", t_exp),
      BV_FN("log", t_log),
      BV_FN("sqrt", t_sqrt),
      BV_FN("abs", t_abs),
      BV_FN("tanh", t_tanh),
      BV_FN("sigmoid", t_sigmoid),
      BV_FN("neg", t_neg),
      BV_FN("floor", t_floor),
      BV_FN("ceil", t_ceil),
      BV_FN("round", t_round),
      BV_FN("clamp", t_clamp),
      BV_FN("softmax", t_softmax),
      BV_FN("log_softmax", t_log_softmax),
      BV_FN("sum", t_sum),
      BV_FN("mean", t_mean),
      BV_FN("norm", t_norm),
      BV_FN("max", t_max),
      BV_FN("min", t_min),
      BV_FN("argmax", t_argmax),
      BV_FN("argmin", t_argmin),
      BV_FN("view", t_view),
      BV_FN("reshape", t_reshape),
      BV_FN("permute", t_permute),
      BV_FN("transpose", t_transpose),
      BV_FN("flip", t_flip),
      BV_FN("squeeze", t_squeeze),
      BV_FN("unsqueeze", t_unsqueeze),
      BV_FN("narrow", t_narrow),
      BV_FN("select", t_select),
      BV_FN("cat", t_cat),
      BV_FN("fill_", t_fill_),
      BV_FN("zero_", t_zero_),
      BV_FN("copy_", t_copy_),
      {nullptr, nullptr},
  };
  static const luaL_Reg metamethods[] = {
      BV_FN("__add", t_add),
      BV_FN("__sub", t_sub),
      BV_FN("__mul", t_mul),
      BV_FN("__div", t_div),
      BV_FN("__idiv", t_idiv),
      BV_FN("__mod", t_mod),
      BV_FN("__pow", t_pow),
      BV_FN("__unm", meta_unm),
      BV_FN("__eq", meta_eq),
      BV_FN("__lt", meta_lt),
      BV_FN("__le", meta_le),
      BV_FN("__len", meta_len),
      BV_FN("__tostring", t_tostring),
      BV_FN("__newindex", meta_newindex),
      {"__gc", meta_gc},
      {"__close", meta_gc},
      {nullptr, nullptr},
  };
  luaL_newmetatable(L, kTensorMeta);
  luaL_setfuncs(L, metamethods, 0);
  luaL_newlib(L, methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "methods");  // reachable for completion and for Lua-side additions
  lua_pushcclosure(L, guarded<meta_index>, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);

  static const luaL_Reg functions[] = {
      BV_FN("tensor", bv_tensor),       BV_FN("zeros", bv_zeros),
      BV_FN("ones", bv_ones),           BV_FN("full", bv_full),
      BV_FN("arange", bv_arange),       BV_FN("rand", bv_rand),
      BV_FN("randn", bv_randn),         BV_FN("cat", bv_cat),
      BV_FN("stack", bv_stack),         BV_FN("manual_seed", bv_manual_seed),
      BV_FN("is_tensor", bv_is_tensor), {nullptr, nullptr},
  };
  luaL_setfuncs(L, functions, 0);
}

}  // namespace bv::lua
