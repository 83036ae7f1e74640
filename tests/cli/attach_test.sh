#!/usr/bin/env bash
# `bvlua attach DIR`: a prompt inside a running `bvlua train` (lib/bv/attach.lua). One process:
# read the step and a parameter norm, pause and resume, save (the checkpoint loads with the same
# norm), evaluate (its line in the metrics file), an error that stays at the prompt, the
# learning-rate multiplier (global_schedule from the next step on, kept by a resume), detach and
# the run finishes; stop(); a stale socket replaced; another user refused; --no-attach; and a
# run nobody attaches to ends bit-identical to one with --no-attach.
# Usage: attach_test.sh path/to/bvlua
set -u
BVLUA=${1:?usage: attach_test.sh path/to/bvlua}
BVLUA=$(cd "$(dirname "$BVLUA")" && pwd)/$(basename "$BVLUA")
TMP=$(mktemp -d)
chmod 755 "$TMP"  # another user's prompt must reach the socket to be refused by its uid
KIDS=()
trap 'for p in "${KIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
# shellcheck source=checks.sh
. "$(dirname "$0")/checks.sh"
export BVLUA_HISTORY=""

colour_data "$BVLUA" "$TMP" 24 || { echo "FAIL: making data"; exit 1; }

# `slow` paces the steps (about 20 ms an example) so that a prompt attaches mid-run.
cat >"$TMP/cfg.lua" <<LUA
local PP = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'
local function get_config(arg)
  local config = {
    seed = 0, total_steps = 60, num_classes = 3, loss = "softmax_xent",
    input = {data = {name = "bv:jsonl", fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}},
             batch_size = 4, pp = (arg == "fast" and "" or "slow|") .. PP},
    model_name = "vit", model = {variant = "mu/4", depth = 1},
    optax_name = "big_vision.sgd", lr = 0.01, wd = 0.001, schedule = {},
    log_training_steps = 1, ckpt_steps = 1000,
    evals = {val = {type = "classification", data = {name = "bv:jsonl", fname = "$TMP/train.jsonl",
                    fopen_keys = {image = "$TMP"}}, log_steps = 1000, loss_name = "softmax_xent",
                    pp = PP}},
  }
  if arg ~= "fast" then  -- an evaluation long enough to be interrupted at the prompt
    config.evals.slowval = {type = "classification", data = {name = "bv:jsonl",
      fname = "$TMP/train.jsonl", fopen_keys = {image = "$TMP"}}, log_steps = 1000,
      skip_first = true, loss_name = "softmax_xent", pp = "sleepy|" .. PP}
  end
  return config
end
local function register_pp_ops()
  bv.pp.register("slow", function()
    return function(data) bv.sleep(0.02); return data end
  end, "slow(): sleeps 20 ms (attach_test's pacing)")
  bv.pp.register("sleepy", function()
    return function(data) bv.sleep(0.3); return data end
  end, "sleepy(): sleeps 300 ms (attach_test's evaluation to interrupt)")
end
return {get_config = get_config, register_pp_ops = register_pp_ops}
LUA

W="$TMP/w"
SOCK="$W/.bvlua.attach"
wait_for() {  # wait_for SECONDS CMD...: until CMD succeeds
  local n=$(($1 * 20))
  shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.05; done
  return 1
}
lines() { wc -l <"$W/big_vision_metrics.txt"; }
more_lines_than() { [ "$(lines)" -gt "$1" ]; }
count_is() { [ "$(grep -cF -- "$2" "$3")" -eq "$1" ]; }  # count_is N TEXT FILE
gone() { [ ! -e "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat"; }  # exited (a zombie)
# The prompt reads from a FIFO that the test writes commands to, one at a time.
start_prompt() {
  rm -f "$TMP/in"
  mkfifo "$TMP/in"
  "$BVLUA" attach "$1" <"$TMP/in" >"$TMP/pout" 2>"$TMP/perr" &
  PROMPT=$!
  exec 3>"$TMP/in"
}
say() { echo "$1" >&3; }
# Waits until the prompt's stdout has TEXT (a command's answer).
answered() { wait_for 30 grep -qF -- "$1" "$TMP/pout"; }

# --- no run, bad usage ------------------------------------------------------------------------
run "$BVLUA" attach
expect_rc 2 "attach without a workdir"
expect_in err "missing WORKDIR" "attach without a workdir"
run "$BVLUA" attach "$TMP"
expect_rc 1 "attach where nothing trains"
expect_in err "no run is listening in $TMP: there is no $TMP/.bvlua.attach" "attach where nothing trains"
run "$BVLUA" attach "$TMP/none"
expect_rc 1 "attach to a missing workdir"
expect_in err "no such workdir: $TMP/none" "attach to a missing workdir"

# --- a run, a prompt ---------------------------------------------------------------------------
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" >"$TMP/train.out" 2>&1 &
TRAIN=$!
KIDS+=("$TRAIN")
check "the run listens on $SOCK" wait_for 60 test -S "$SOCK"
check "the socket is owner-only" [ "$(stat -c %a "$SOCK")" = 600 ]
start_prompt "$W"
say 'pause()'
check "pause answered" answered "paused after step"
check "banner" grep -qF "attached to bvlua train in $W" "$TMP/pout"
say 'print("STEP", step)'
check "step read" answered "STEP"
S=$(sed -n 's/^STEP\t\([0-9]*\)$/\1/p' "$TMP/pout")
check "step is a number ($S)" [ -n "$S" ]
n1=$(lines)
sleep 1.5
check "paused: no line written in 1.5 s" [ "$(lines)" = "$n1" ]
say 'print(string.format("NORM %.9g", params["head/kernel"]:norm():item()))'
check "norm read" answered "NORM "
NORM=$(sed -n 's/^NORM \(.*\)$/\1/p' "$TMP/pout")
say 'save()'
check "save answered" answered "saved a checkpoint at step $S"
check "ckpt at step $S" [ "$("$BVLUA" -e "print(bv.ckpt.load('$W').step)")" = "$S" ]
check "the checkpoint has the norm the prompt read" [ "$("$BVLUA" -e "
print(string.format('%.9g', bv.ckpt.load('$W').tensors['params/head/kernel']:norm():item()))")" = "$NORM" ]
say 'evaluate("val")'
check "evaluate answered" answered "val/prec@1"
check "the evaluation's line, at step $S" grep -q "^{\"step\": $S, .*\"val/prec@1\": .*\"note\": \"attach: evaluate val\"" "$W/big_vision_metrics.txt"
say 'evaluate("slowval")'
check "a long evaluation says the run waits" answered "evaluating slowval at step $S; the run waits (Ctrl-C stops the evaluation, not the run)"
sleep 1
kill -INT "$PROMPT"
check "Ctrl-C at the prompt interrupts the evaluation" wait_for 30 grep -qF "interrupted at the prompt (Ctrl-C)" "$TMP/perr"
check "the interrupted evaluation wrote nothing" bash -c "! grep -q slowval/ '$W/big_vision_metrics.txt'"
check "the run was not stopped" kill -0 "$TRAIN"
say 'error("boom in a chunk")'
check "an error stays at the prompt" wait_for 30 grep -qF "boom in a chunk" "$TMP/perr"
say 'bv.sleep(2.5)'
check "a chunk that runs long: the prompt says the run waits" answered "(waiting: a command starts at the end of the run's step, and the run waits while it runs; Ctrl-C interrupts it)"
say 'change("lr_multiplier", 0.5)'
check "change answered" answered "lr_multiplier: 1 -> 0.5 from step $((S + 1)) on"
say 'save()'
check "a change after this step's checkpoint: save() writes it again" wait_for 30 count_is 2 "saved a checkpoint at step $S" "$TMP/pout"
check "the checkpoint holds the change" [ "$("$BVLUA" -e "print(bv.ckpt.load('$W').state.attach_changes.current.lr_multiplier)")" = 0.5 ]
say 'change("log_training_steps", math.huge)'
check "a value out of range is refused" wait_for 30 grep -qF "change: log_training_steps must be a whole number from 1 to 2^31, got inf" "$TMP/perr"
say 'change("lr", 1)'
check "what cannot change is refused" wait_for 30 grep -qF "'lr' cannot be changed while the run trains" "$TMP/perr"
say 'evaluate("nope")'
check "an unknown evaluator is named" wait_for 30 grep -qF "no evaluator 'nope' (this run's: " "$TMP/perr"
say 'resume()'
check "resume answered" answered "resumed (paused"
check "the run goes on after resume" wait_for 30 more_lines_than "$((n1 + 2))"
kill -INT "$PROMPT"  # Ctrl-C at the prompt: detach
check "Ctrl-C at the prompt detaches" wait_for 30 gone "$PROMPT"
exec 3>&-
wait "$PROMPT"
rc=$?
check "detach: exit code $rc" [ "$rc" -eq 0 ]
check "detach said" grep -qF "detached from $W; the run goes on" "$TMP/perr"
wait "$TRAIN"
rc=$?
check "the run finished: exit code $rc" [ "$rc" -eq 0 ]
check "Done" grep -qF "Done!" "$TMP/train.out"
check "socket removed at the end" [ ! -e "$SOCK" ]
schedules=$("$BVLUA" -e "
local rows = require('bv.metrics').read('$W/big_vision_metrics.txt')
local out = {}
for _, r in ipairs(rows) do
  if r.global_schedule then out[#out + 1] = r.step .. '=' .. r.global_schedule end
end
print(table.concat(out, ' '))")
check "global_schedule 1 up to step $S" grep -qE "(^| )$S=1\.0( |$)" <<<"$schedules"
check "global_schedule 0.5 from step $((S + 1))" grep -qE "(^| )$((S + 1))=0\.5( |$)" <<<"$schedules"
check "global_schedule 0.5 at the last step" grep -qE "(^| )60=0\.5$" <<<"$schedules"
check "the change is noted in step $((S + 1))'s line" grep -q "^{\"step\": $((S + 1)), .*\"note\": \".*attach: lr_multiplier 1 -> 0.5" "$W/big_vision_metrics.txt"
check "config_changes.json lists it" grep -q '"lr_multiplier"' "$W/config_changes.json"
check "config.json keeps the original" grep -q '"lr": 0.01' "$W/config.json"

# --- a resume keeps the multiplier; stop() -----------------------------------------------------
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.total_steps=100000 >"$TMP/train.out" 2>&1 &
TRAIN=$!
KIDS+=("$TRAIN")
check "resumed run listens" wait_for 60 test -S "$SOCK"
start_prompt "$W"
say 'opt:lr_multiplier()'
check "the multiplier survived the resume" answered "0.5"
say 'opt:set_lr_multiplier(2)'
check "the prompt's opt does not change the run" wait_for 30 grep -qF 'use change("lr_multiplier", x)' "$TMP/perr"
say 'sv = save; print("KEPT")'
check "save kept in a variable" answered "KEPT"
sleep 0.5  # the session ends once no chunk comes within 20 ms; the next one is another
say 'sv()'
check "a command kept from an earlier session is refused" wait_for 30 grep -qF "save() belongs to the session at step" "$TMP/perr"
say 'pause()'
check "paused again" answered "paused after step"
say 'change("log_training_steps", 2)'
check "log_training_steps changed" answered "log_training_steps: 1 -> 2"
say 'stop()'
check "stop answered" answered "the run stops"
wait "$TRAIN"
rc=$?
check "stop(): exit code $rc" [ "$rc" -eq 0 ]
exec 3>&-
wait "$PROMPT"
check "resume note" grep -qF "Resuming with the changes made by bvlua attach: lr_multiplier 0.5" "$TMP/train.out"
last=$(tail -n 1 "$W/big_vision_metrics.txt" | sed 's/^{"step": \([0-9]*\).*/\1/')
check "stop(): checkpoint at the last line's step ($last)" [ "$("$BVLUA" -e "print(bv.ckpt.load('$W').step)")" = "$last" ]
check "after the resume global_schedule is 0.5" grep -q "^{\"step\": 61, .*\"global_schedule\": 0.5" "$W/big_vision_metrics.txt"
STOPPED=$last

# --- a stale socket; another user ----------------------------------------------------------------
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.total_steps=100000 >"$TMP/train.out" 2>&1 &
TRAIN=$!
KIDS+=("$TRAIN")
check "third run listens" wait_for 60 test -S "$SOCK"
kill -9 "$TRAIN"
wait "$TRAIN" 2>/dev/null
check "a killed run leaves its socket" test -S "$SOCK"
run "$BVLUA" attach "$W"
expect_rc 1 "attach to a stale socket"
expect_in err "is a stale socket: the run that made it is gone" "attach to a stale socket"
"$BVLUA" --threads 1 train "$TMP/cfg.lua" --workdir "$W" --config.total_steps=100000 >"$TMP/train.out" 2>&1 &
TRAIN=$!
KIDS+=("$TRAIN")
check "the stale socket is replaced" wait_for 60 grep -qF "replaced a stale attach socket" "$TMP/train.out"
check "fourth run listens" wait_for 60 test -S "$SOCK"
if [ "$(id -u)" -eq 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
  chmod 755 "$W"
  run setpriv --reuid=65534 --regid=65534 --clear-groups "$BVLUA" attach "$W"
  expect_rc 1 "nobody, socket 0600"
  expect_in err "permission denied" "nobody, socket 0600"
  chmod 666 "$SOCK"  # loosened: the run's uid check still refuses
  run setpriv --reuid=65534 --regid=65534 --clear-groups "$BVLUA" attach "$W"
  expect_rc 1 "nobody, socket 0666"
  expect_in err "refused: this run belongs to" "nobody, socket 0666"
  check "the run logs the refusal" wait_for 30 grep -qF "may not attach" "$TMP/train.out"
else
  echo "SKIP: another user's prompt (needs root and setpriv)"
fi
start_prompt "$W"
say 'pause()'
check "the run still answers its owner" answered "paused after step"
P=$(sed -n 's/^paused after step \([0-9]*\):.*/\1/p' "$TMP/pout")
kill -TERM "$TRAIN"  # while paused: saves and stops, as between steps
wait "$TRAIN"
rc=$?
check "SIGTERM while paused: exit code $rc" [ "$rc" -eq 0 ]
check "SIGTERM while paused: saved at step $P" grep -qF "SIGTERM received: saved a checkpoint at step $P and stopped" "$TMP/train.out"
exec 3>&-  # the prompt learns it at its next line (here: the end of its input)
wait "$PROMPT"
check "the prompt was told" grep -qF "the run stopped after step $P (checkpoint saved)" "$TMP/perr"

# --- --no-attach; bit-identical ----------------------------------------------------------------
"$BVLUA" --threads 1 train "$TMP/cfg.lua:fast" --workdir "$TMP/plain" --config.total_steps=12 >"$TMP/out" 2>&1 || fail "plain run"
"$BVLUA" --threads 1 train "$TMP/cfg.lua:fast" --workdir "$TMP/off" --no-attach --config.total_steps=12 >"$TMP/out2" 2>&1 || fail "--no-attach run"
check "--no-attach says nothing of attach" bash -c "! grep -q 'bvlua attach' '$TMP/out2'"
run "$BVLUA" --threads 1 train "$TMP/cfg.lua:fast" --workdir "$TMP/off2" --config.attach=false --config.total_steps=12
expect_rc 0 "config.attach = false"
expect_not_in out "opens a prompt inside this run" "config.attach = false"
check "bit-identical with and without the listener" "$BVLUA" -e "
local metrics = require 'bv.metrics'
local a, b = metrics.read('$TMP/plain/big_vision_metrics.txt'), metrics.read('$TMP/off/big_vision_metrics.txt')
assert(#a == #b, 'line counts differ')
for i = 1, #a do
  for _, k in ipairs({'training_loss', 'l2_params', 'l2_grads', 'global_schedule', 'val/prec@1'}) do
    assert(a[i][k] == b[i][k], 'line ' .. i .. ' ' .. k .. ': ' .. tostring(a[i][k]) .. ' vs ' .. tostring(b[i][k]))
  end
end
local x, y = bv.ckpt.load('$TMP/plain'), bv.ckpt.load('$TMP/off')
local n = 0
for name, t in pairs(x.tensors) do
  if name:match('^params/') or name:match('^opt/') then
    assert(t:equal(y.tensors[name]), name .. ' differs')
    n = n + 1
  end
end
assert(n > 0)"
check "a change made just before stop() is noted in the resumed run's first line" grep -q "^{\"step\": $((STOPPED + 1)), \"note\": \"attach: log_training_steps 1 -> 2" "$W/big_vision_metrics.txt"
finish
