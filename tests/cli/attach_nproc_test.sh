#!/usr/bin/env bash
# `bvlua attach` on a `bvlua train --nproc 2` run (zero1: rank 1 updates half the parameters):
# rank 0 answers the prompt, and every command that touches the run (pause, save, evaluate, the
# learning-rate multiplier) is done by both ranks at the same step boundary. Checked against a
# one-process run whose schedule halves at the step the prompt changed it (the whole data set is
# each step's batch, unshuffled, so that any split over ranks sees the same examples): the same
# global_schedule and, within float noise, the same losses and parameter norms (a rank that
# missed the change would update its half at twice the rate). Usage: attach_nproc_test.sh BVLUA
set -u
BVLUA=${1:?usage: attach_nproc_test.sh path/to/bvlua}
TMP=$(mktemp -d)
KIDS=()
trap 'for p in "${KIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
# shellcheck source=checks.sh
. "$(dirname "$0")/checks.sh"
export BVLUA_HISTORY=""

colour_data "$BVLUA" "$TMP" 24 || { echo "FAIL: making data"; exit 1; }
cp "$TMP/train.jsonl" "$TMP/val.jsonl"

cat >"$TMP/cfg.lua" <<LUA
local PP = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'
local function get_config(arg)
  return {
    seed = 0, total_steps = 40, num_classes = 3, loss = "softmax_xent",
    input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
             batch_size = 24, shuffle_buffer_size = 1, pp = (arg == "fast" and "" or "slow|") .. PP},
    model_name = "vit", model = {variant = "mu/4", depth = 1},
    optax_name = "big_vision.sgd", lr = 0.05, schedule = {},
    sharding_strategy = {{".*", 'zero1(axis="data", min_size_to_shard_mb=0)'}},
    log_training_steps = 1, ckpt_steps = 1000,
    evals = {val = {type = "classification", data = {name = "bv:jsonl", fname = "$TMP/val.jsonl",
                    fopen_keys = {image = "$TMP"}}, log_steps = 1000, loss_name = "softmax_xent",
                    pp = PP}},
  }
end
local function register_pp_ops()
  bv.pp.register("slow", function()
    return function(data) bv.sleep(0.01); return data end
  end, "slow(): sleeps 10 ms (attach_nproc_test's pacing)")
end
return {get_config = get_config, register_pp_ops = register_pp_ops}
LUA

W="$TMP/w"
wait_for() {
  local n=$(($1 * 20))
  shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.05; done
  return 1
}
answered() { wait_for 60 grep -qF -- "$1" "$TMP/pout"; }
say() { echo "$1" >&3; }

"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --nproc 2 >"$TMP/train.out" 2>&1 &
TRAIN=$!
KIDS+=("$TRAIN")
check "rank 0 listens" wait_for 120 test -S "$W/.bvlua.attach"
mkfifo "$TMP/in"
"$BVLUA" attach "$W" <"$TMP/in" >"$TMP/pout" 2>"$TMP/perr" &
PROMPT=$!
exec 3>"$TMP/in"
say 'pause()'
check "pause answered" answered "paused after step"
check "banner names the ranks" grep -qF "(rank 0 of 2)" "$TMP/pout"
say 'print("STEP", step)'
check "step read" answered "STEP"
S=$(sed -n 's/^STEP\t\([0-9]*\)$/\1/p' "$TMP/pout")
check "step is a number ($S)" [ -n "$S" ]
say 'save()'
check "save answered" answered "saved a checkpoint at step $S"
check "ckpt at step $S" [ "$("$BVLUA" -e "print(bv.ckpt.load('$W').step)")" = "$S" ]
say 'evaluate("val")'
check "evaluate answered" answered "val/prec@1"
check "the evaluation's line" grep -q "^{\"step\": $S, .*\"val/prec@1\"" "$W/big_vision_metrics.txt"
mv "$TMP/val.jsonl" "$TMP/val.aside"
say 'evaluate("val")'
check "a command that fails on every rank: each rank's error at the prompt" wait_for 60 grep -qF "rank 1: " "$TMP/perr"
check "... and the run goes on" kill -0 "$TRAIN"
mv "$TMP/val.aside" "$TMP/val.jsonl"
say 'change("lr_multiplier", 0.5)'
check "change answered" answered "lr_multiplier: 1 -> 0.5"
say 'resume()'
check "resume answered" answered "resumed (paused"
exec 3>&-
wait "$PROMPT"
check "detached: exit code $?" [ $? -eq 0 ]
wait "$TRAIN"
rc=$?
check "the 2-process run finished: exit code $rc" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || tail -n 30 "$TMP/train.out"

# One process, its schedule halved from step S + 1 (stair: optimizer count S on).
"$BVLUA" --threads 1 train "$TMP/cfg.lua:fast" --workdir "$TMP/ref" \
  "--config.schedule={'decay_type': 'stair', 'steps': [$S], 'mults': [0.5]}" \
  --config.sharding_strategy='[[".*", "replicate"]]' >"$TMP/ref.out" 2>&1 || { tail "$TMP/ref.out"; fail "reference run"; }
check "the same schedule, losses and norms as the one-process reference" "$BVLUA" -e "
local metrics = require 'bv.metrics'
local function by_step(path)
  local out = {}
  for _, r in ipairs(metrics.read(path)) do
    if r.training_loss then out[r.step] = r end
  end
  return out
end
local a, b = by_step('$W/big_vision_metrics.txt'), by_step('$TMP/ref/big_vision_metrics.txt')
for step = 1, 40 do
  local x, y = assert(a[step], 'no line ' .. step), assert(b[step], 'no reference line ' .. step)
  assert(x.global_schedule == y.global_schedule, 'step ' .. step .. ' global_schedule '
         .. x.global_schedule .. ' vs ' .. y.global_schedule)
  for _, k in ipairs({'training_loss', 'l2_params'}) do
    assert(math.abs(x[k] - y[k]) <= 1e-5 * math.abs(y[k]), 'step ' .. step .. ' ' .. k .. ' '
           .. x[k] .. ' vs ' .. y[k])
  end
end
assert(a[$S].global_schedule == 1.0 and a[$S + 1].global_schedule == 0.5)"
finish
