-- What the rank scripts of tests/cli/two_ranks.sh share. rank.start(where) puts this process
-- on its device before anything is allocated (as CUDA wants: "fake" is the test device, rank r
-- on fake:r; anything else the CPU) and joins the Gloo group; returns device, group.
local M = {}

function M.start(where, timeout)
  local device = "cpu"
  if where == "fake" then
    bv._fake_device()
    device = "fake:" .. (bv.dist.env().rank % 2)
    bv.set_device(device)
  end
  return device, bv.dist.init{backend = "gloo", timeout = timeout or 60}
end

-- The model's parameters for seed 0, on `device`.
function M.init_on(model, device)
  local p = {}
  for name, t in pairs(model:init(0)) do p[name] = t:to(device) end
  return p
end

-- A table's keys, sorted: every rank walks parameters in the same order.
function M.sorted_names(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

-- The largest absolute difference of two tensors, read on the host.
function M.maxdiff(a, b) return (a:to("cpu") - b:to("cpu")):abs():max():item() end

return M
