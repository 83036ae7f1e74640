#!/usr/bin/env bash
# The GPU tutorial's three configs (configs/lines/{resnet,siglip,paligemma}.lua) train end to end
# in their runlocal form: ResNet with and without its augmentations (one of them an op the config
# defines itself), SigLIP fine-tuned from the randomly initialised stand-in its prepare writes
# (big_vision's two-tower layout: img/, txt/, t, b), and without runlocal an error naming where
# big_vision publishes the real checkpoint, PaliGemma's tiny variant with
# the tutorial's evaluators (eval/acc writes question_id, answer and gts for every example).
# Each keeps checkpoints; a run that keeps none says so at its start, and the REPL's run says why.
# The three runlocal runs are the README's lines for a CPU walk of the tutorial, run as written
# there (from a directory holding configs/, as the repository root does), so the README's
# commands are the ones tested.
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

trained() {  # trained WORKDIR: the run's output ($TMP/out) and files say it trained to the end
  local w=$1
  grep -q '^\[8\] eval/acc/' "$TMP/out" || fail "$w: no eval/acc at the last step"
  [ -d "$w/ckpt-000000008" ] || fail "$w: no checkpoint at the end"
  grep -q "No checkpoints will be saved" "$TMP/out" && fail "$w: says it saves nothing"
  return 0
}
train() {  # train WORKDIR CONFIG[:ARGS] [FLAGS...]
  local w=$1; shift
  "$BVLUA" train "$@" --workdir "$w" >"$TMP/out" 2>&1 || fail "train $w exited with $?"
  trained "$w"
}
ln -s "$ROOT/configs" configs
mapfile -t README_RUNS < <(grep -E '^    bvlua train configs/lines/[a-z]+\.lua:runlocal --workdir [a-z_/]+$' \
  "$ROOT/README.md")
[ "${#README_RUNS[@]}" -eq 3 ] || fail "the README has ${#README_RUNS[@]} runlocal lines, want 3"
readme_train() {  # readme_train NAME: the README's line for configs/lines/NAME.lua; W: its workdir
  local line words
  line=$(printf '%s\n' "${README_RUNS[@]}" | grep -F "configs/lines/$1.lua:runlocal ")
  [ -n "$line" ] || fail "the README has no runlocal line for configs/lines/$1.lua"
  read -r -a words <<<"$line"
  W=${words[-1]}
  "$BVLUA" "${words[@]:1}" >"$TMP/out" 2>&1 || fail "the README's '${line# *}' exited with $?"
  trained "$W"
}

readme_train resnet
grep -q 'lines_flip_ud' "$W/config.json" || fail "the config's own op is not in the train pp"
grep -q 'random_crop(32)' "$W/config.json" || fail "crop is on by default"
"$BVLUA" mistakes "$W/eval_acc_8.json" data/lines/val.jsonl -o "$W/mistakes.png" >"$TMP/out" 2>&1 \
  || fail "bvlua mistakes on the classification evaluator's outfile"
[ -s "$W/mistakes.png" ] || fail "no mistakes sheet"
train resnet_noaug "$ROOT/configs/lines/resnet.lua:runlocal,flip=True,crop=False" --config.lr 3e-4
grep -q 'random_crop' resnet_noaug/config.json && fail "crop=False still crops"
grep -q '"lr": 0.0003' resnet_noaug/config.json || fail "--config.lr 3e-4 (a space) was not applied"

# SigLIP: runlocal needs nothing but the config. Its prepare writes a random two-tower stand-in
# into the data directory (NOTE says so) and the ViT starts from its img/ (dont_load keeps the
# config's own 3-class head).
# --dry-run (and a sweep's checks) before the stand-in exists: a note that train writes it, not a
# missing file; without runlocal, the missing checkpoint is one problem saying where to get it.
"$BVLUA" train configs/lines/siglip.lua:runlocal --dry-run >"$TMP/out" 2>&1 \
  || fail "siglip runlocal's --dry-run before its stand-in exists"
grep -qF 'siglip_standin_random.npz is not there yet: bvlua train writes a RANDOMLY INITIALISED' \
  "$TMP/out" || fail "siglip runlocal's --dry-run: no note about the stand-in"
"$BVLUA" train configs/lines/siglip.lua --dry-run >"$TMP/out" 2>&1 \
  && fail "siglip's --dry-run without a checkpoint said ok"
grep -qF '1 problem in configs/lines/siglip.lua' "$TMP/out" \
  && grep -qF 'model_init: ' "$TMP/out" && grep -qF 'gs://big_vision/siglip/' "$TMP/out" \
  || fail "siglip's --dry-run: the missing checkpoint, once, with where big_vision publishes it"
readme_train siglip
grep -q 'NOTE: Wrote data/lines/siglip_standin_random.npz: a RANDOMLY INITIALISED stand-in' \
  "$TMP/out" || fail "siglip: no NOTE that the stand-in is random"
grep -q 'Initialised .* parameters from data/lines/siglip_standin_random.npz:img' "$TMP/out" \
  || fail "siglip: not initialised from the stand-in"
"$BVLUA" -e "
local c = bv.inspect.checkpoint('data/lines/siglip_standin_random.npz')
local function has(name) assert(c:info(name), 'no ' .. name .. ' in the stand-in') end
has('img/Transformer/encoderblock/MlpBlock_0/Dense_0/kernel')  -- scanned, as the config's ViT
has('img/MAPHead_0/probe'); has('img/pos_embedding')
assert(c:info('img/pos_embedding').shape[2] == 64, '32 px in patches of 4: 64 positions')
assert(not c:info('img/head/kernel'), 'out_dim (None, D): no image head, as big_vision SigLIP')
has('txt/Embed_0/embedding'); has('txt/Encoder_0/encoder_norm/scale'); has('txt/head/kernel')
has('t'); has('b')
assert(math.abs(c.t:item() - math.log(10)) < 1e-6 and c.b:item() == -10, 't, b')" \
  || fail "siglip: the stand-in's layout"
# Without runlocal, the missing So400m checkpoint is named with where to get it, before any
# data is drawn.
"$BVLUA" train "$ROOT/configs/lines/siglip.lua:data=nodata" --workdir siglip_real >"$TMP/out" 2>&1 \
  && fail "siglip without a checkpoint succeeded"
grep -qF 'no SigLIP checkpoint at webli_en_so400m_224_57633886.npz' "$TMP/out" \
  || fail "siglip: the error does not name the missing file"
grep -qF 'gs://big_vision/siglip/webli_en_so400m_224_57633886.npz' "$TMP/out" \
  || fail "siglip: the error does not say where big_vision publishes it"
grep -qF 'siglip.lua:init=PATH/webli_en_so400m_224_57633886.npz' "$TMP/out" \
  || fail "siglip: the error does not say how to point the config at it"
grep -qF 'siglip.lua:runlocal trains a tiny ViT' "$TMP/out" || fail "siglip: no runlocal hint"
[ -e nodata ] && fail "siglip: data drawn before the checkpoint was checked"

readme_train paligemma
grep -q '^\[8\] val/pplx/avg = ' "$TMP/out" || fail "paligemma: no val/pplx at the last step"
PG=$W
"$BVLUA" -e "
local json = require 'bv.json'
local f = assert(io.open('$PG/vqa_eval_8.json'))
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

# The real PaliGemma without its tokenizer: the fix first (the command to run), then why.
env -u BV_GEMMA_DIR "$BVLUA" train "$ROOT/configs/lines/paligemma.lua" --workdir pg_real \
  >"$TMP/out" 2>&1 && fail "paligemma without a tokenizer succeeded"
grep -q '^bvlua: paligemma: no Gemma tokenizer. To fix: fetch it (gsutil cp gs://big_vision/gemma_tokenizer.model ckpts/) .* BV_GEMMA_DIR=ckpts bvlua train .*paligemma.lua --workdir runs/pg. On a CPU with nothing to download: bvlua train .*paligemma.lua:runlocal .*\. Why: .*looked in: nothing: BV_GEMMA_DIR is not set' \
  "$TMP/out" || fail "paligemma: the missing tokenizer's message (fix, then why)"
grep -q 'data worker' "$TMP/out" && fail "paligemma: the data workers started without a tokenizer"
env -u BV_GEMMA_DIR "$BVLUA" train "$ROOT/configs/lines/paligemma.lua" --dry-run >"$TMP/out" 2>&1 \
  && fail "paligemma's --dry-run without a tokenizer said ok"
grep -qF "pp: its gemma(...) tokenizer: gemma tokenizer: no model file found" "$TMP/out" \
  || fail "paligemma's --dry-run: the missing tokenizer is not a problem"

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
