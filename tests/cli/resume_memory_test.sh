#!/usr/bin/env bash
# A resume reads its checkpoint one tensor at a time (lib/bv/trainers/utils.lua resume_or_init):
# the resuming process's peak host memory stays about that of the run that wrote the checkpoint,
# instead of adding a whole host copy of the checkpoint (parameters and Adam's state: about 3x
# the parameters) on top of the model's own parameters, as it did. The model is large enough
# (a ViT of about 25M parameters: a 0.3 GB checkpoint) for the difference to stand out of
# libtorch's own few hundred MB. Measured with GNU time's peak resident set.
# Usage: resume_memory_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: resume_memory_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$TMP/out" 2>/dev/null; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "SKIP: no GNU time"; exit 77; }

"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 4 do
  bv.image.write_png((bv.rand({8, 8, 3}, rng) * 255):to('uint8'), '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 2})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))" || fail "making data"

cat >"$TMP/cfg.lua" <<LUA
return {
  seed = 0, total_steps = 2, num_classes = 2, loss = "softmax_xent",
  input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
           batch_size = 2, shuffle_buffer_size = 1,
           pp = 'decode|value_range(-1, 1)|onehot(2, key="label", key_result="labels")|keep("image", "labels")'},
  model_name = "vit",
  model = {variant = "mu/4", width = 512, depth = 8, mlp_dim = 2048, num_heads = 8},
  optax_name = "scale_by_adam", lr = 1e-3, schedule = {}, log_training_steps = 1, ckpt_steps = 1,
}
LUA

peak_kb() {  # peak_kb WORKDIR ARGS...: runs bvlua train, prints its peak RSS in KiB
  local w=$1; shift
  /usr/bin/time -f "%M" -o "$TMP/rss" "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/$w" "$@" \
    >>"$TMP/out" 2>&1 || fail "train $w exited with $?"
  cat "$TMP/rss"
}
first=$(peak_kb w --config.total_steps=1)
resumed=$(peak_kb w)
grep -q "Resumed from .* at step 1" "$TMP/out" || fail "the second run did not resume"
ckpt_kb=$(du -k "$TMP/w"/ckpt-*/tensors.safetensors | sort -n | tail -1 | cut -f1)
echo "peak RSS: first run $((first / 1024)) MiB, resumed run $((resumed / 1024)) MiB;" \
     "checkpoint $((ckpt_kb / 1024)) MiB"
[ "$ckpt_kb" -gt 200000 ] || fail "the checkpoint is too small to tell ($ckpt_kb KiB)"
# A whole host copy of the checkpoint would add ckpt_kb; reading one tensor at a time adds about
# the largest tensor. Half the checkpoint is the line between the two.
[ "$resumed" -lt $((first + ckpt_kb / 2)) ] \
  || fail "the resume's peak ($resumed KiB) exceeds the first run's ($first KiB) by more than" \
          "half the checkpoint ($ckpt_kb KiB): the checkpoint was read whole"
echo "resume_memory_test: all passed"
