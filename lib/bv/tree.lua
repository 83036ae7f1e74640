-- bv.tree: big_vision's tree utilities (utils.py) for nested Lua tables.
--
--   tree.flatten({a = {b = 1, c = 2}, d = {5, 6}})  -- {"a/b", "a/c", "d/0", "d/1"}, {1, 2, 5, 6}
--   tree.recover({"a/b", "d"}, {0, 3})              -- {a = {b = 0}, d = 3}
--   tree.get(t, "a/b"), tree.map_with_names(f, t), tree.replace(t, rules),
--   tree.make_mask_trees(t, {"img/.*", ".*"}),
--   tree.sorted_keys(t), tree.copy(t), tree.numel(shape)
--
-- Names are big_vision's: keys joined by "/", maps in sorted key order, lists by their 0-based
-- index (as Python tuples are named), so names match those in big_vision's checkpoints. A leaf
-- is anything but a plain table (numbers, strings, booleans, tensors). A flat table whose keys
-- already hold "/" ({["a/b"] = 1}) gives the same names as its nested form.
local M = {}

local function is_node(v) return type(v) == "table" and getmetatable(v) == nil end

-- The keys of a node in big_vision's order; a list's keys are 1..n (named 0..n-1).
local function ordered_keys(node)
  local n = #node
  local keys, strings = {}, true
  for k in pairs(node) do
    if type(k) ~= "string" then strings = false end
    keys[#keys + 1] = k
  end
  if strings then
    table.sort(keys)
    return keys, false
  end
  if #keys ~= n then error("tree: a table mixes list entries and named keys", 3) end
  for i = 1, n do keys[i] = i end
  return keys, true
end

local function join(prefix, name)
  if prefix == "" then return name end
  if name == "" then return prefix end
  return prefix .. "/" .. name
end

-- utils._traverse_with_names: {name, value} pairs, leaves in order; with `inner`, each inner
-- node follows its children, the root last under the name "".
function M.traverse(tree, inner)
  local out = {}
  local function walk(node, prefix)
    if not is_node(node) then
      out[#out + 1] = {prefix, node}
      return
    end
    local keys, is_list = ordered_keys(node)
    for _, k in ipairs(keys) do
      walk(node[k], join(prefix, is_list and tostring(k - 1) or k))
    end
    if inner then out[#out + 1] = {prefix, node} end
  end
  walk(tree, "")
  return out
end

-- tree_flatten_with_names: the leaves' names and values, as two lists.
function M.flatten(tree)
  local names, values = {}, {}
  for i, nv in ipairs(M.traverse(tree)) do names[i], values[i] = nv[1], nv[2] end
  return names, values
end

-- recover_tree: a nested table from "a/b/c" names and their values.
function M.recover(names, values)
  local root = {}
  for i, name in ipairs(names) do
    local node, parts = root, {}
    for part in (name .. "/"):gmatch("(.-)/") do parts[#parts + 1] = part end
    for j = 1, #parts - 1 do
      local child = node[parts[j]]
      if child == nil then
        child = {}
        node[parts[j]] = child
      elseif not is_node(child) then
        error(string.format("tree.recover: '%s' is both a leaf and a node", name), 2)
      end
      node = child
    end
    if node[parts[#parts]] ~= nil then
      error(string.format("tree.recover: '%s' given twice, or also a node", name), 2)
    end
    node[parts[#parts]] = values[i]
  end
  return root
end

-- tree_get: a leaf or an inner node by name; an unknown name lists the ones that exist.
function M.get(tree, name)
  local known = {}
  for _, nv in ipairs(M.traverse(tree, true)) do
    if nv[1] == name then return nv[2] end
    known[#known + 1] = nv[1] == "" and '""' or nv[1]
  end
  error(string.format("tree.get: no '%s'; available: %s", name, table.concat(known, ", ")), 2)
end

-- tree_map_with_names: f(name, leaf, leaf_of_rest...) at every leaf; same structure.
function M.map_with_names(f, tree, ...)
  local rest = {...}
  local rest_values = {}
  for i, t in ipairs(rest) do
    local _, values = M.flatten(t)
    rest_values[i] = values
  end
  local index = 0
  local function walk(node, prefix)
    if not is_node(node) then
      index = index + 1
      local args = {}
      for i, values in ipairs(rest_values) do args[i] = values[index] end
      return f(prefix, node, table.unpack(args, 1, #rest))
    end
    local out = {}
    local keys, is_list = ordered_keys(node)
    for _, k in ipairs(keys) do out[k] = walk(node[k], join(prefix, is_list and tostring(k - 1) or k)) end
    return out
  end
  return walk(tree, "")
end

-- Python's Match.expand: \1 .. \99 and \g<N> are groups; \\ is a backslash.
local function expand(template, groups)
  return (template:gsub("\\(g?)<?(%d*)>?", function(g, digits)
    if digits == "" then return nil end
    local v = groups[tonumber(digits)]
    if v == nil then error("tree.replace: no group " .. digits .. " in the match", 0) end
    return v
  end):gsub("\\\\", "\\"))
end

-- tree_replace: renames and removes leaves. `rules` is a list of {regex, replacement} applied
-- in order with Python's re.match (a prefix match); the matched prefix becomes the expanded
-- replacement, and a leaf that any rule with replacement false matches is removed.
function M.replace(tree, rules)
  for i, r in ipairs(rules) do
    if type(r) ~= "table" or type(r[1]) ~= "string"
       or (type(r[2]) ~= "string" and r[2] ~= false) then
      error(string.format("tree.replace: rule %d must be {regex, replacement or false}", i), 2)
    end
  end
  local names, values = {}, {}
  for _, nv in ipairs(M.traverse(tree)) do
    local name, removed = nv[1], false
    for _, r in ipairs(rules) do
      if r[2] == false and bv.rematch(r[1], name) then removed = true end
    end
    if not removed then
      for _, r in ipairs(rules) do
        local m = r[2] and bv.rematch(r[1], name)
        if m then name = expand(r[2], m) .. name:sub(#m[0] + 1) end
      end
      names[#names + 1], values[#values + 1] = name, nv[2]
    end
  end
  return M.recover(names, values)
end

-- make_mask_trees: one boolean tree per pattern; a leaf is true in the tree of the first
-- pattern that fully matches its name (re.fullmatch), false in all others.
function M.make_mask_trees(tree, patterns)
  local masks = {}
  for i in ipairs(patterns) do
    masks[i] = M.map_with_names(function(name)
      for j, p in ipairs(patterns) do
        if bv.fullmatch(p, name) then return j == i end
      end
      return false
    end, tree)
  end
  return masks
end

-- The keys of t (a table or nil), sorted by their string forms: a stable order for mixed keys.
function M.sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- A deep copy of v: tables are copied all the way down and keep their metatables; other
-- values (numbers, strings, tensors) are shared.
function M.copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = M.copy(x) end
  return setmetatable(out, getmetatable(v))
end

-- The number of elements of a shape ({2, 3} -> 6; {} -> 1).
function M.numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

return M
