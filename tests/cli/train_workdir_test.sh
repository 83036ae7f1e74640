#!/usr/bin/env bash
# `bvlua train --workdir DIR` that fails before its first training step: a DIR this invocation
# made, holding only its config.json (and a metrics file of step 0), is removed again and the
# error output says so; a DIR that was there before, or that holds a step's line or a
# checkpoint, is left as it is. Usage: train_workdir_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: train_workdir_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/checks.sh"

# Six 8x8 images, labels 0..2; val.jsonl names an image that is not there (an eval that fails
# when it runs, not when it is made).
"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 6 do
  bv.image.write_png((bv.rand({8, 8, 3}, rng) * 255):to('uint8'), '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 3})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))
bv.fs.write_file('$TMP/val.jsonl', json.encode({image = 'missing.png', label = 0}))" \
  || { echo "FAIL: making data"; exit 1; }

# NAN=1 in the environment: the training images are NaN (the NaN guard stops step 1).
cat >"$TMP/cfg.lua" <<LUA
local nan = os.getenv("NAN") == "1"
return {
  register_pp_ops = function()
    bv.pp.register("nan_if_asked", bv.pp.inkeyoutkey(function()
      return function(img) return nan and img * (0 / 0) or img end
    end), "nan_if_asked(): NaN images when NAN=1 (train_workdir_test.sh)")
  end,
  get_config = function()
    return {
      seed = 0, total_steps = 3, num_classes = 3, loss = "softmax_xent",
      input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
               batch_size = 2, shuffle_buffer_size = 4,
               pp = 'decode|value_range(-1, 1)|nan_if_asked|onehot(3, key="label", key_result="labels")|keep("image", "labels")'},
      model_name = "vit", model = {variant = "mu/4", depth = 1},
      optax_name = "scale_by_adam", lr = 0.001, log_training_steps = 1, ckpt_steps = 3,
      evals = {val = {type = "classification", loss_name = "softmax_xent", log_steps = 2,
                      data = {name = "bv:jsonl", fname = "$TMP/val.jsonl", fopen_keys = {image = "$TMP"}},
                      pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'}},
    }
  end,
}
LUA
train() { "$BVLUA" --threads 1 train "$TMP/cfg.lua" "$@"; }
removed() { echo "removed $1, which this run had created"; }

# A missing data file: fails in the trainer's start, the new workdir goes (its parent stays).
W=$TMP/runs/new
run train --workdir "$W" --config.input.data.fname "$TMP/nope.jsonl"
expect_rc 1 "missing data"; expect_in err "nope.jsonl" "missing data named"
expect_in err "$(removed "$W")" "missing data: the removal said"
check "missing data: workdir removed" [ ! -e "$W" ]
check "missing data: the parent it made stays" [ -d "$TMP/runs" ]

# A bad model option: fails once the data is read.
run train --workdir "$W" --config.model.variant=mu/nope
expect_rc 1 "bad model option"; expect_in err "$(removed "$W")" "bad model option: removal said"
check "bad model option: workdir removed" [ ! -e "$W" ]

# The NaN guard at step 1, after the initial evals wrote their step-0 line: removed too.
run env NAN=1 "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.evals.val.data.fname \
  "$TMP/train.jsonl"
expect_rc 1 "NaN at step 1"; expect_in err "training_loss became nan" "NaN at step 1 named"
expect_in err "$(removed "$W")" "NaN at step 1: removal said"
expect_in err "left only big_vision_metrics.txt and config.json" "what it held"
check "NaN at step 1: workdir removed" [ ! -e "$W" ]

# --debug: the REPL ends (no input), exit 1, the workdir goes.
run train --workdir "$W" --config.model.variant=mu/nope --debug </dev/null
expect_rc 1 "--debug"; expect_in err "$(removed "$W")" "--debug: removal said"
check "--debug: workdir removed" [ ! -e "$W" ]

# --nproc 2: the launcher made the workdir; both ranks fail; it goes.
run train --workdir "$W" --nproc 2 --config.input.data.fname "$TMP/nope.jsonl"
check "--nproc 2: fails (rc $rc)" [ "$rc" -ne 0 ]; expect_in err "$(removed "$W")" "--nproc 2: removal said"
check "--nproc 2: workdir removed" [ ! -e "$W" ]

# A workdir that was there before (empty, made by the user): kept, config.json in it.
mkdir -p "$TMP/mine"
run train --workdir "$TMP/mine" --config.input.data.fname "$TMP/nope.jsonl"
expect_rc 1 "existing workdir"; expect_not_in err "removed" "existing workdir: nothing removed"
check "existing workdir kept" [ -f "$TMP/mine/config.json" ]

# Failing after step 1 (the eval at step 2 meets the missing image): step 1's line is worth
# keeping, so the workdir stays.
W2=$TMP/runs/stepped
run train --workdir "$W2" --config.evals.val.skip_first=true
expect_rc 1 "eval failing at step 2"; expect_in err "missing.png" "the eval's error"
expect_not_in err "removed" "eval failing at step 2: nothing removed"
check "eval failing at step 2: step 1's line kept" grep -q '^{"step": 1,' "$W2/big_vision_metrics.txt"
check "eval failing at step 2: the checkpoint of step 1 kept" [ -d "$W2/ckpt-000000001" ]

# A run with a checkpoint, resumed with missing data: nothing of it is touched.
W3=$TMP/runs/done
run train --workdir "$W3" --config.evals.val.data.fname "$TMP/train.jsonl"
expect_rc 0 "a whole run"
# (.bvlua.lock names the last process that held the workdir: it changes with each run.)
before=$(cd "$W3" && find . -type f ! -name .bvlua.lock | sort | xargs md5sum)
run train --workdir "$W3" --config.evals.val.data.fname "$TMP/train.jsonl" \
  --config.input.data.fname "$TMP/nope.jsonl"
expect_rc 1 "resume with missing data"; expect_not_in err "removed" "resume: nothing removed"
after=$(cd "$W3" && find . -type f ! -name 'config.json.*' ! -name .bvlua.lock | sort | xargs md5sum)
checks=$((checks + 1))
[ "$(echo "$before" | grep -v ' ./config.json$')" = "$(echo "$after" | grep -v ' ./config.json$')" ] \
  || fail "resume with missing data: the run's files changed"

# --dry-run makes and keeps a workdir, as before.
run train --workdir "$TMP/runs/dry" --dry-run
expect_rc 0 "--dry-run"; check "--dry-run keeps its config.json" [ -f "$TMP/runs/dry/config.json" ]

finish
