#!/usr/bin/env bash
# The GPU tutorial's three configs (configs/lines/{resnet,siglip,paligemma}.lua) train end to end
# in their runlocal form: ResNet with and without its augmentations (one of them an op the config
# defines itself), SigLIP fine-tuned from a stand-in checkpoint written here (a small ViT under
# img/, as a SigLIP npz is laid out, with a txt/ tower beside it), PaliGemma's tiny variant with
# the tutorial's evaluators (eval/acc writes question_id, answer and gts for every example).
# Each keeps checkpoints; a run that keeps none says so at its start, and the REPL's run says why.
# Usage: lines_configs_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: lines_configs_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; tail -30 "$TMP/out" 2>/dev/null; exit 1; }

cd "$TMP" || exit 1  # the configs read data/lines/ relative to the working directory
"$BVLUA" run "$ROOT/scripts/make_lines.lua" data/lines --train 160 --val 40 --test 8 >/dev/null \
  || fail "make_lines"

train() {  # train WORKDIR CONFIG[:ARGS] [FLAGS...]
  local w=$1; shift
  "$BVLUA" train "$@" --workdir "$w" >"$TMP/out" 2>&1 || fail "train $w exited with $?"
  grep -q '^\[8\] eval/acc/' "$TMP/out" || fail "$w: no eval/acc at the last step"
  [ -d "$w/ckpt-000000008" ] || fail "$w: no checkpoint at the end"
  grep -q "No checkpoints will be saved" "$TMP/out" && fail "$w: says it saves nothing"
  return 0
}

train resnet "$ROOT/configs/lines/resnet.lua:runlocal"
grep -q 'lines_flip_ud' resnet/config.json || fail "the config's own op is not in the train pp"
grep -q 'random_crop(32)' resnet/config.json || fail "crop is on by default"
"$BVLUA" mistakes resnet/eval_acc_8.json data/lines/val.jsonl -o resnet/mistakes.png >"$TMP/out" 2>&1 \
  || fail "bvlua mistakes on the classification evaluator's outfile"
[ -s resnet/mistakes.png ] || fail "no mistakes sheet"
train resnet_noaug "$ROOT/configs/lines/resnet.lua:runlocal,flip=True,crop=False" --config.lr 3e-4
grep -q 'random_crop' resnet_noaug/config.json && fail "crop=False still crops"
grep -q '"lr": 0.0003' resnet_noaug/config.json || fail "--config.lr 3e-4 (a space) was not applied"

# SigLIP: a two-tower npz whose image tower is the runlocal ViT with a 10-class head (dont_load
# keeps the config's own 3-class head).
"$BVLUA" -e "
local m = bv.models.build('vit', {variant = 'mu/4', pool_type = 'map', scan = true,
                                  num_classes = 10, image_size = 32})
local out = {['txt/Encoder_0/whatever'] = bv.zeros({2})}
for k, v in pairs(m:init(5)) do out['img/' .. k] = v end
bv.ckpt.save_npz('siglip.npz', out)" || fail "writing the stand-in checkpoint"
train siglip "$ROOT/configs/lines/siglip.lua:runlocal,init=siglip.npz"
grep -q 'Initialised .* parameters from siglip.npz:img' "$TMP/out" || fail "siglip: not initialised"

train paligemma "$ROOT/configs/lines/paligemma.lua:runlocal"
grep -q '^\[8\] val/pplx/avg = ' "$TMP/out" || fail "paligemma: no val/pplx at the last step"
"$BVLUA" -e "
local json = require 'bv.json'
local f = assert(io.open('paligemma/vqa_eval_8.json'))
local rows = json.decode(f:read('a'))
f:close()
assert(#rows == 16, 'expected 16 examples in the outfile, got ' .. #rows)
local seen = {}
for _, r in ipairs(rows) do
  assert(r.question_id and r.answer and r.gts, 'a row lacks question_id, answer or gts')
  seen[r.question_id] = true
end
assert(seen['0'] and seen['15'], 'question ids are the examples ids')" \
  || fail "paligemma: the vqa outfile"

# A run that keeps no checkpoint says so, and the REPL's run says why.
"$BVLUA" train "$ROOT/configs/lines/resnet.lua:runlocal" --workdir nockpt \
  --config.ckpt_percent=0 >"$TMP/out" 2>&1 || fail "nockpt exited with $?"
grep -q "NOTE: No checkpoints will be saved: to keep the parameters, set ckpt_steps" "$TMP/out" \
  || fail "no NOTE about checkpoints"
"$BVLUA" -e "
local run = require('bv.inspect').run('nockpt')
assert(tostring(run):find('its config sets none of ckpt_steps', 1, true), tostring(run))
local ok, err = pcall(run.model)
assert(not ok and err:find('saved no parameters', 1, true), tostring(err))" \
  || fail "the REPL's run does not say why there is no checkpoint"
echo OK
