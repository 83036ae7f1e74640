#!/usr/bin/env bash
# SIGTERM during `bvlua train` saves a checkpoint at the current step and exits cleanly; running
# the same command again resumes from it. Usage: train_sigterm_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: train_sigterm_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Tiny data: colour gives the label.
"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 24 do
  local img = (bv.rand({8, 8, 3}, rng) * 255):to('uint8')
  bv.image.write_png(img, '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 3})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))" || fail "making data"

cat >"$TMP/cfg.lua" <<LUA
return {
  seed = 0, total_steps = 100000, num_classes = 3, loss = "softmax_xent",
  input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
           batch_size = 4, pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'},
  model_name = "vit", model = {variant = "mu/4", depth = 1},
  optax_name = "big_vision.sgd", lr = 0.01, schedule = {},
  log_training_steps = 1, ckpt_steps = 100000,
}
LUA

"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$TMP/w" >"$TMP/out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do  # wait (up to 30 s) until a few steps are logged
  [ -f "$TMP/w/big_vision_metrics.txt" ] && [ "$(wc -l <"$TMP/w/big_vision_metrics.txt")" -ge 3 ] && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/out"; fail "exit code $rc after SIGTERM"; }
grep -q "SIGTERM received: saved a checkpoint at step" "$TMP/out" || { cat "$TMP/out"; fail "no stop note"; }
last_logged=$(tail -n 1 "$TMP/w/big_vision_metrics.txt" | sed 's/^{"step": \([0-9]*\).*/\1/')
saved=$("$BVLUA" -e "print(bv.ckpt.load('$TMP/w').step)")
[ "$saved" = "$last_logged" ] || fail "checkpoint at step $saved, last logged step $last_logged"
echo "stopped at step $saved with a checkpoint"

# The same command resumes from there (stop it again right away).
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$TMP/w" >"$TMP/out2" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  grep -q "Resumed from" "$TMP/out2" && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
grep -q "Resumed from .*ckpt-0*$saved at step $saved" "$TMP/out2" || { cat "$TMP/out2"; fail "did not resume"; }
echo "1 passed, 0 failed"
