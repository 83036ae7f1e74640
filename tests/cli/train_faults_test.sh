#!/usr/bin/env bash
# `bvlua train` under the faults of issue 31's campaign: a finished run started again leaves its
# metrics file byte-identical and says it had finished; a SIGTERM during the final evaluation
# stops with a checkpoint; a SIGTERM during start-up leaves nothing behind; one writer per
# workdir (a second trainer is refused, naming the holder's pid; a SIGKILLed holder leaves no
# stale lock); leftovers of interrupted writers are removed by the next run; a Ctrl-C says at
# once what it will do, and a second one what it kept (issue 32); a full disk during
# training ends with an error or a complete metrics file, never a silent gap (on a small tmpfs:
# skipped with a message where mounting is not allowed). Usage: train_faults_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: train_faults_test.sh path/to/bvlua}
TMP=$(mktemp -d)
MNT=$TMP/small
cleanup() {
  umount "$MNT" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
. "$(dirname "$0")/checks.sh"

"$BVLUA" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 12 do
  bv.image.write_png((bv.rand({8, 8, 3}, rng) * 255):to('uint8'), '$TMP/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 3})
end
bv.fs.write_file('$TMP/train.jsonl', table.concat(lines, '\n'))" \
  || { echo "FAIL: making data"; exit 1; }

# SLOW_EVAL=1: each evaluation example takes 0.3 s (a window for a signal during the final
# evaluation); the evaluation runs only at the last step.
cat >"$TMP/cfg.lua" <<LUA
local slow = os.getenv("SLOW_EVAL") == "1"
return {
  register_pp_ops = function()
    bv.pp.register("slow_if_asked", function()
      return function(data)
        local t = os.clock()
        while slow and os.clock() - t < 0.3 do end
        return data
      end
    end, "slow_if_asked(): 0.3 s per example when SLOW_EVAL=1 (train_faults_test.sh)")
  end,
  get_config = function()
    local pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'
    return {
      seed = 0, total_steps = 6, num_classes = 3, loss = "softmax_xent",
      input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
               batch_size = 2, shuffle_buffer_size = 4, pp = pp},
      model_name = "vit", model = {variant = "mu/4", depth = 1},
      optax_name = "scale_by_adam", lr = 0.001, log_training_steps = 1, ckpt_steps = 2,
      evals = {val = {type = "classification", loss_name = "softmax_xent", skip_first = true,
                      log_steps = 6, batch_size = 2,
                      data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
                      pp = "slow_if_asked|" .. pp}},
    }
  end,
}
LUA
# (Started in the background as "$BVLUA" itself, not through a shell function, so that $! is
# bvlua's pid.)
train() { "$BVLUA" --threads 1 train "$TMP/cfg.lua" "$@"; }
steps_of() { sed -n 's/^{"step": \([0-9]*\)[,}].*/\1/p' "$1" | tr '\n' ' '; }
# Waits (up to 60 s) until file $1 holds text $2; 1 when process $pid ended first.
wait_for_text() {
  for _ in $(seq 1 600); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
tmp_leftovers() { find "$1" -name '*.tmp-*' 2>/dev/null | tr '\n' ' '; }

# 1. A finished run started again: nothing trained or evaluated, the metrics file as it was.
W=$TMP/done
run train --workdir "$W"
expect_rc 0 "a whole run"
before=$(md5sum <"$W/big_vision_metrics.txt")
run train --workdir "$W"
expect_rc 0 "the finished run again"
expect_in out "had finished: its checkpoint is at step 6, the last" "the finished run: said so"
expect_not_in out "val evaluation" "the finished run: no evaluation"
check "the finished run: metrics file byte-identical" \
  [ "$(md5sum <"$W/big_vision_metrics.txt")" = "$before" ]

# 2. SIGTERM during the final evaluation: that step's line and checkpoint, a note, rc 0; then
# the run has finished, and starting it again changes nothing.
W=$TMP/final_eval
SLOW_EVAL=1 "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" >"$TMP/fe.out" 2>"$TMP/fe.err" &
pid=$!
wait_for_text "$TMP/fe.out" "val evaluation..." || echo "(the final evaluation was not seen)"
kill -TERM "$pid"
wait "$pid"
rc=$?
cp "$TMP/fe.out" "$TMP/out"
cp "$TMP/fe.err" "$TMP/err"
expect_rc 0 "SIGTERM in the final evaluation"
expect_in out "SIGTERM received: saved a checkpoint at step 6 and stopped" "final eval: stop note"
check "final eval: the checkpoint of step 6" [ -d "$W/ckpt-000000006" ]
check "final eval: steps 0..6 once, got '$(steps_of "$W/big_vision_metrics.txt")'" \
  [ "$(steps_of "$W/big_vision_metrics.txt")" = "0 1 2 3 4 5 6 " ]
check "final eval: step 6 has the evaluation" grep -q '^{"step": 6,.*"val/loss"' "$W/big_vision_metrics.txt"
before=$(md5sum <"$W/big_vision_metrics.txt")
run train --workdir "$W"
expect_rc 0 "final eval: started again"
expect_in out "had finished" "final eval, started again: said so"
check "final eval, started again: metrics file byte-identical" \
  [ "$(md5sum <"$W/big_vision_metrics.txt")" = "$before" ]

# 3. SIGTERM during start-up (the handlers exist before libtorch has loaded): nothing left
# behind, at any moment.
for delay in 0 0.05 0.2 0.5 1; do
  W=$TMP/early_$delay
  "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" >"$TMP/out" 2>"$TMP/err" &
  pid=$!
  sleep "$delay"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  check "SIGTERM after ${delay}s: leftovers $(tmp_leftovers "$TMP")" [ -z "$(tmp_leftovers "$TMP")" ]
  if [ -d "$W" ]; then  # it had got to its first step: stopped there with a checkpoint
    check "SIGTERM after ${delay}s: rc $rc" [ "$rc" -eq 0 ]
    check "SIGTERM after ${delay}s: a checkpoint" [ -n "$(ls "$W" | grep '^ckpt-')" ]
  else
    # (143: the signal came before the launcher had blocked it, and nothing had started.)
    check "SIGTERM after ${delay}s: rc $rc" [ "$rc" -eq 1 -o "$rc" -eq 143 ]
    if [ "$rc" -eq 1 ]; then expect_in err "SIGTERM received" "SIGTERM after ${delay}s: said"; fi
  fi
  echo "SIGTERM after ${delay}s: rc $rc, $(ls "$W" 2>/dev/null | tr '\n' ' ' || echo 'no workdir')"
done

# 4. One writer per workdir; a SIGKILLed holder leaves no stale lock; leftovers are removed.
W=$TMP/shared
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.total_steps 100000 \
  --config.ckpt_steps 100000 >"$TMP/a.out" 2>&1 &
pid=$!
holder=$pid
wait_for_text "$TMP/a.out" "Running for" || { cat "$TMP/a.out"; echo "FAIL: the first trainer did not start"; }
start=$SECONDS
run train --workdir "$W" --config.lr 0.1
expect_rc 1 "a second trainer on the workdir"
expect_in err "is in use: another bvlua train writes there (pid $holder on host" "the holder named"
check "the second trainer ended at once ($((SECONDS - start)) s)" [ $((SECONDS - start)) -le 20 ]
expect_not_in out "Training on" "the second trainer did not start"
check "the second trainer left config.json alone" grep -q '"lr": 0.001' "$W/config.json"
kill -KILL "$holder"
wait "$holder" 2>/dev/null
mkdir -p "$W/ckpt-000000007.tmp-999999.del" "$W/ckpt-000000009.tmp-999998"
echo x >"$W/ckpt-000000007.tmp-999999.del/tensors.safetensors"
echo "{" >"$W/config.json.tmp-999997"
run train --workdir "$W" --config.total_steps 2
expect_rc 0 "after a killed holder"
expect_in out "Removed what an interrupted run left in $W: ckpt-000000007.tmp-999999.del, ckpt-000000009.tmp-999998, config.json.tmp-999997" "leftovers: said"
check "leftovers removed: $(tmp_leftovers "$W")" [ -z "$(tmp_leftovers "$W")" ]

# 5. Ctrl-C during an evaluation says at once what will happen; a second one, 0.3 s later,
# stops without saving and says which checkpoint is kept; the run then resumes from it.
W=$TMP/double_int
SLOW_EVAL=1 "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.total_steps 12 \
  --config.ckpt_steps 4 --config.evals.val.log_steps 6 >"$TMP/di.out" 2>"$TMP/di.err" &
pid=$!
wait_for_text "$TMP/di.out" "val evaluation..." || echo "(the evaluation at step 6 was not seen)"
kill -INT "$pid"
sleep 0.3
cp "$TMP/di.err" "$TMP/err"
: >"$TMP/out"
expect_in err "bvlua: SIGINT received in step 6: stopping after it (and its evaluations, when due) with a checkpoint; Ctrl-C again to stop at once without saving" "first Ctrl-C: said at once"
kill -INT "$pid"
wait "$pid"
rc=$?
cp "$TMP/di.err" "$TMP/err"
expect_rc 130 "second Ctrl-C"
expect_in err "bvlua: second SIGINT: stopped at once without saving; the last checkpoint is step 4 (the same command resumes from it)" "second Ctrl-C: what is kept"
check "second Ctrl-C: the newest checkpoint is step 4" [ "$(ls "$W" | grep '^ckpt-' | tail -n 1)" = ckpt-000000004 ]
run train --workdir "$W" --config.total_steps 12 --config.ckpt_steps 4 --config.evals.val.log_steps 6
expect_rc 0 "after the second Ctrl-C: resumed"
expect_in out "Resumed from $W/ckpt-000000004 at step 4" "after the second Ctrl-C: from step 4"
check "after the second Ctrl-C: steps 0..12 once" \
  [ "$(steps_of "$W/big_vision_metrics.txt")" = "$(seq 0 12 | tr '\n' ' ')" ]

# 6. The disk fills up for a second during training (a 3 MiB tmpfs, filled by dd): an error that
# names the full disk, with a metrics file of whole lines and no gap, or a complete run; then
# the run resumes to the end with every step exactly once.
mkdir -p "$MNT"
if ! mount -t tmpfs -o size=3m tmpfs "$MNT" 2>/dev/null; then
  echo "SKIP: the disk-full window (cannot mount a tmpfs here: not root, or not allowed)"
else
  W=$MNT/w
  "$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.total_steps 150 \
    --config.ckpt_steps 25 >"$TMP/full.out" 2>"$TMP/full.err" &
  pid=$!
  for _ in $(seq 1 600); do  # until 30 steps are logged
    [ "$(cat "$W/big_vision_metrics.txt" 2>/dev/null | wc -l)" -ge 30 ] && break
    sleep 0.1
  done
  dd if=/dev/zero of="$MNT/filler" bs=4k 2>/dev/null
  sleep 1
  rm -f "$MNT/filler"
  wait "$pid"
  rc=$?
  cp "$TMP/full.out" "$TMP/out"
  cp "$TMP/full.err" "$TMP/err"
  got=$(steps_of "$W/big_vision_metrics.txt")
  lines=$(wc -l <"$W/big_vision_metrics.txt")
  check "disk full: every line whole ($lines lines, $(echo "$got" | wc -w) steps)" \
    [ "$(echo "$got" | wc -w)" -eq "$lines" ]
  check "disk full: the file ends with a whole line" [ -z "$(tail -c 1 "$W/big_vision_metrics.txt")" ]
  check "disk full: no gap ('$got')" [ "$got" = "$(seq 0 $(($(echo "$got" | wc -w) - 1)) | tr '\n' ' ')" ]
  if [ "$rc" -eq 0 ]; then
    echo "disk full: the run rode it out (rc 0, $lines lines)"
    check "disk full, rc 0: steps 0..150" [ "$lines" -eq 151 ]
  else
    echo "disk full: rc $rc: $(head -c 300 "$TMP/err")"
    expect_rc 1 "disk full"
    expect_in err "No space left on device" "disk full: named"
    run train --workdir "$W" --config.total_steps 150 --config.ckpt_steps 25
    expect_rc 0 "disk full: resumed"
    check "disk full, resumed: steps 0..150 once" \
      [ "$(steps_of "$W/big_vision_metrics.txt")" = "$(seq 0 150 | tr '\n' ' ')" ]
  fi
fi
finish
