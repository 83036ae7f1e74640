#!/usr/bin/env bash
# `bvlua train --dry-run` checks a config without training: a good one says "ok" (exit 0) with
# the resolved config as JSON on stdout; one with several problems (a pp typo, an unknown
# evaluator type, a missing data file, a warmup as long as the run, an unknown model key) lists
# them all, each naming its key, and exits 1, making no workdir; a lines config whose data is
# missing says that bvlua train draws it, and draws nothing, and refuses a directory outside
# the current one. Usage: dry_run_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: dry_run_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$ROOT/tests/cli/checks.sh"

check "make_lines" "$BVLUA" run "$ROOT/scripts/make_lines.lua" "$TMP/lines" --train 8 --val 2 \
  --test 1 >/dev/null

cat >"$TMP/cfg.lua" <<LUA
return {
  register_pp_ops = function()
    bv.pp.register("my_identity", function() return function(data) return data end end,
                   "my_identity(): the example as it is (dry_run_test.sh)")
  end,
  get_config = function()
    local function data()
      return {name = "bv:jsonl", fname = "$TMP/lines/train.jsonl", fopen_keys = {image = "$TMP/lines"}}
    end
    local pp = 'decode|resize(16)|value_range(-1, 1)|onehot(3, key="label", key_result="labels")'
    return {
      seed = 0, total_steps = 4, num_classes = 3, loss = "softmax_xent", log_training_steps = 1,
      input = {data = data(), batch_size = 4, pp = "my_identity|" .. pp},
      model_name = "vit", model = {variant = "mu/8", depth = 1},
      optax_name = "scale_by_adam", lr = 0.001,
      schedule = {decay_type = "cosine", warmup_steps = 1},
      evals = {val = {type = "classification", loss_name = "softmax_xent", data = data(), pp = pp}},
    }
  end,
}
LUA

cd "$TMP" || exit 1
run "$BVLUA" train cfg.lua --dry-run
expect_rc 0 "a good config"
expect_in err "NOTE: 4 training steps (2 epochs of 8 examples, 4 a batch)" "the steps"
expect_in err "bvlua train --dry-run: ok" "ok"
check "stdout is the config's JSON" "$BVLUA" -e "
  local c = require('bv.json').decode(io.open('$TMP/out'):read('a'))
  assert(c.lr == 0.001 and c.input.batch_size == 4)"

run "$BVLUA" train cfg.lua --dry-run --workdir w --config.input.pp='decode|resise(16)' \
  --config.evals.val.type=clasification --config.evals.val.data.fname=val_missing.jsonl \
  --config.schedule.warmup_steps=4 --config.model='{"variant": "mu/8", "dept": 1}'
expect_rc 1 "several problems"
expect_in err "bvlua train --dry-run: 5 problems in cfg.lua:" "the count"
expect_in err "  input.pp: pp: unknown op 'resise' in 'resise(16)' (did you mean 'resize'?)" \
  "the pp typo"
expect_in err "  evals.val.type: evaluators: unknown evaluator type 'clasification' (did you mean 'classification'?)" \
  "the evaluator type"
expect_in err "  bv:jsonl: no such file 'val_missing.jsonl' (evals.val.data.fname): a relative path is relative to the current directory, $TMP" \
  "the missing data file"
expect_in err "  model: vit: unknown config key 'dept'" "the model key"
expect_in err "  config.schedule: warmup_steps (4) must be less than total_steps (4)" "the warmup"
expect_not_in err "ok" "no ok"
expect_in out '"warmup_steps": 4' "the config's JSON all the same"
check "no workdir made" [ ! -e w ]

# A lines config: data the config's prepare draws is a note, and nothing is drawn; a directory
# outside the current one is a problem.
mkdir here
cd here || exit 1
run "$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal,data=sub/lines" --dry-run
expect_rc 0 "lines data to be drawn"
expect_in err "NOTE: input.data: sub/lines/train.jsonl is not there yet: bvlua train draws the lines data set (12,000 images, 49 MB) into sub/lines first (the config's prepare)" \
  "the drawing is said"
expect_in err "bvlua train --dry-run: ok" "ok with data to draw"
check "nothing drawn" [ ! -e sub ]
run "$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal,data=$TMP/elsewhere/lines" --dry-run
expect_rc 1 "lines data outside"
expect_in err "bv.lines: refusing to draw the lines data set (12,000 images, 49 MB) into $TMP/elsewhere/lines" \
  "the refusal"
check "nothing drawn outside" [ ! -e "$TMP/elsewhere" ]
finish
