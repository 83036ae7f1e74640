-- Config keys of the learning-rate schedules (config.schedule per decay_type, or each
-- {regex, schedule} pair's), which the native optimizer reads (runtime/optim/schedule.cpp).
local config_keys = require "bv.config_keys"

local COMMON = {
  {"decay_type", "string", "stair", "stair, linear, polynomial, cosine or rsqrt"},
  {"mult", "float", 1.0, "the schedule's peak, times config.lr"},
  {"scale_with_batchsize", "bool", false, "lr * batch_size / 256"},
}
for _, prefix in ipairs({"warmup", "cooldown"}) do
  for _, u in ipairs({{"steps", "int"}, {"examples", "int"}, {"epochs", "float"},
                      {"percent", "float"}}) do
    COMMON[#COMMON + 1] = {prefix .. "_" .. u[1], u[2], u[1] == "steps" and 0 or nil, "linear " .. prefix .. ", in "
                           .. u[1] .. "; only one " .. prefix .. "_* may be set",
                           duration = prefix}
  end
end
config_keys.declare("schedule", {doc = "what every schedule reads", keys = COMMON})

local LINEAR = {
  {"end", "float", 0, "the value at the end, times lr (also linear_end)"},
  {"linear_end", "float", 0, "the older spelling of end"},
  {"power", "float", 1, "polynomial decay's power"},
}
config_keys.declare("schedule:linear", {doc = "linear (polynomial) decay to end",
                                        include = {"schedule"}, keys = LINEAR})
config_keys.declare("schedule:polynomial", {doc = "polynomial decay to end (power)",
                                            include = {"schedule"}, keys = LINEAR})
config_keys.declare("schedule:cosine", {doc = "cosine decay to 0", include = {"schedule"}})

local RSQRT = {
  {"timescale", "int", 10000, "steps: lr / sqrt(1 + (step + shift - warmup) / timescale)"},
  {"shift", "int", 0, "steps added to the step"},
}
for _, prefix in ipairs({"timescale", "shift"}) do
  for _, u in ipairs({{"steps", "int"}, {"examples", "int"}, {"epochs", "float"},
                      {"percent", "float"}}) do
    RSQRT[#RSQRT + 1] = {prefix .. "_" .. u[1], u[2], nil, prefix .. " in " .. u[1],
                         duration = prefix}
  end
end
config_keys.declare("schedule:rsqrt", {doc = "inverse square root decay",
                                       include = {"schedule"}, keys = RSQRT})
config_keys.declare("schedule:stair", {doc = "piecewise constant: mults[i] from steps[i] on",
  include = {"schedule"}, keys = {
  {"steps", "list", {}, "the steps where the value changes"},
  {"mults", "list", {}, "the multiplier from each of steps on"},
}})
