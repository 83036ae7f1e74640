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

-- half(p, lo): `model`'s loss and gradients on examples lo and lo + 1 of a fixed batch of four
-- 16x16 images (seed 1) on `device`; rank r of two takes lo = 2r + 1, and the mean of both halves
-- is the one-process step's.
function M.halves(model, device)
  local x = bv.randn({4, 16, 16, 3}, bv.rng(1)):to(device)
  local labels = bv.tensor({{1.0, 0, 0}, {0, 1.0, 0}, {0, 0, 1.0}, {1.0, 0, 0}}):to(device)
  return function(p, lo)
    return model:loss_and_grads(p, {image = x[{{lo, lo + 1}}], labels = labels[{{lo, lo + 1}}]},
                                {loss = "softmax_xent"})
  end
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
