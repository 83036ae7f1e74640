#!/usr/bin/env bash
# A pp op typo is caught before training starts, in bvlua's own process, naming the config key
# and the op it probably meant ("input.pp: pp: unknown op 'resise' in 'resise(32)' (did you mean
# 'resize'?)"), not by a data worker that fails to start with a library traceback; the same for
# an evaluator's pp; a config's own op (register_pp_ops) is known. Usage: pp_typo_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: pp_typo_test.sh path/to/bvlua}")
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
                   "my_identity(): the example as it is (pp_typo_test.sh)")
  end,
  get_config = function()
    local data = {name = "bv:jsonl", fname = "$TMP/lines/train.jsonl",
                  fopen_keys = {image = "$TMP/lines"}}
    local pp = 'decode|resize(32)|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'
    return {
      seed = 0, total_steps = 1, num_classes = 3, loss = "softmax_xent", log_training_steps = 1,
      input = {data = data, batch_size = 4, pp = "my_identity|" .. pp},
      model_name = "vit", model = {variant = "mu/8"},
      optax_name = "scale_by_adam", lr = 0.001,
      evals = {val = {type = "classification", loss_name = "softmax_xent", data = data, pp = pp}},
    }
  end,
}
LUA
train() { "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$TMP/w" "$@"; }

run train --config.input.pp='decode|resise(32)|value_range(-1, 1)'
expect_rc 1 "train pp typo"
expect_in err "input.pp: pp: unknown op 'resise' in 'resise(32)' (did you mean 'resize'?)" "train pp typo"
expect_not_in err "data worker" "train pp typo: not a worker's failure"
expect_not_in err "stack traceback" "train pp typo: no traceback"
check "train pp typo: no workdir left" [ ! -e "$TMP/w" ]

run train --config.evals.val.pp='decode|resize(32)|valu_range(-1, 1)'
expect_rc 1 "eval pp typo"
expect_in err "evals.val.pp: pp: unknown op 'valu_range' in 'valu_range(-1, 1)' (did you mean 'value_range'?)" "eval pp typo"

run train
expect_rc 0 "the config's own op is known"
finish
