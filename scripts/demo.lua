-- The end-to-end demo until the trainer lands: resolves the example config the way
-- `bvlua train` does, then fits softmax regression on generated data with bv tensors
-- (hand-written gradients), printing the loss as it falls and the final accuracy.
--   bvlua run scripts/demo.lua [steps]
local steps = tonumber(arg and arg[1]) or 200

-- The repository root, found from this script's own path so the demo runs from anywhere.
local root = (arg and arg[0] or "scripts/demo.lua"):match("^(.*)/scripts/[^/]*$") or "."
local cfg = bv.config.load(root .. "/configs/bit_lines.lua:runlocal")
print(string.format("config: model %s, %d classes, batch %d, lr %g", cfg.model_name,
                    cfg.num_classes, cfg.input.batch_size, cfg.lr))

-- Data: three Gaussian blobs in 2-D, one per class, drawn from a seeded stream.
local rng = bv.rng(cfg.seed)
local n, k = 600, cfg.num_classes
local centers = bv.tensor({{0, 3}, {-3, -2}, {3, -2}}, "float32")
local labels = bv.zeros({n}, "int64")
for i = 1, n do labels[i] = (i - 1) % k end
local x = bv.zeros({n, 2})
for i = 1, n do x[i] = centers[labels[i]:item() + 1] end
x = x + bv.randn({n, 2}, rng) * 1.2
local onehot = bv.zeros({n, k})
for i = 1, n do onehot[{i, labels[i]:item() + 1}] = 1 end

-- Model: logits = x W + b, softmax cross-entropy, plain gradient descent.
local W, b = bv.zeros({2, k}), bv.zeros({k})
local lr = 0.1
for step = 1, steps do
  local logits = x:matmul(W) + b
  local p = logits:softmax(2)
  local loss = -(onehot * logits:log_softmax(2)):sum(2):mean()
  local g = (p - onehot) / n                 -- d loss / d logits
  W = W - lr * x:transpose(1, 2):matmul(g)
  b = b - lr * g:sum(1)
  if step == 1 or step % 50 == 0 or step == steps then
    print(string.format("step %4d  loss %.4f", step, loss:item()))
  end
end
local predicted = (x:matmul(W) + b):argmax(2) - 1  -- argmax is 1-based; labels are 0-based
local accuracy = predicted:eq(labels):to("float32"):mean():item()
print(string.format("accuracy %.3f (chance %.3f)", accuracy, 1 / k))
