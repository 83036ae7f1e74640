#!/usr/bin/env bash
# `bvlua sweep`: 4 tiny runs of configs/lines/resnet.lua:runlocal (a grid of lr and
# total_steps) with 2 slots; SIGTERM to the sweep mid-way stops its jobs cleanly (each saves a
# checkpoint); the same command again skips the finished runs, resumes the stopped ones from
# their checkpoints and runs the rest; `bvlua runs` then ranks all 4. A sweep file works too.
# Usage: sweep_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: sweep_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
SWEEP=
trap '[ -n "$SWEEP" ] && kill -9 "$SWEEP" 2>/dev/null; pkill -9 -f "$TMP/" 2>/dev/null; rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" "$TMP/out2" 2>/dev/null | tail -30; exit 1; }

cd "$TMP" || exit 1
"$BVLUA" run "$ROOT/scripts/make_lines.lua" data/lines --train 64 --val 16 --test 4 >/dev/null \
  || fail "make_lines"
CFG="$ROOT/configs/lines/resnet.lua:runlocal"
ARGS=(--workdir "$TMP/sw" --grid lr=1e-3,3e-3 --grid total_steps=2,60 --jobs 2)
LONG=sw/lr0.001_total_steps60

"$BVLUA" sweep "$CFG" "${ARGS[@]}" >"$TMP/out" 2>&1 &
SWEEP=$!
# Wait until the first short run has finished and the long one has trained a few steps.
for _ in $(seq 1 600); do
  step=$(grep -o '"step": [0-9]*' "$LONG/big_vision_metrics.txt" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
  [ -f sw/lr0.001_total_steps2/SWEEP_DONE ] && [ "${step:-0}" -ge 3 ] && break
  sleep 0.1
done
[ -f sw/lr0.001_total_steps2/SWEEP_DONE ] || fail "the short run did not finish"
kill -TERM "$SWEEP"
wait "$SWEEP"
code=$?
SWEEP=
[ "$code" -eq 0 ] || fail "the stopped sweep exited with $code"
grep -q "sweep: stopping" "$TMP/out" || fail "no stopping message"
[ -f "$LONG/SWEEP_DONE" ] && fail "the long run finished before the stop (make it longer)"
[ -f "$LONG/LAST" ] || fail "the stopped run saved no checkpoint"

"$BVLUA" sweep "$CFG" "${ARGS[@]}" >"$TMP/out2" 2>&1 || fail "the second sweep exited with $?"
grep -q "skip   lr0.001_total_steps2 (finished before)" "$TMP/out2" || fail "a finished run ran again"
grep -q "NOTE: Resumed from" "$LONG/sweep.log" || fail "the stopped run did not resume"
[ "$(grep -c 'NOTE: Running for' sw/lr0.001_total_steps2/sweep.log)" = 1 ] \
  || fail "the finished run was started twice"
for d in sw/*/; do [ -f "$d/SWEEP_DONE" ] || fail "$d did not finish"; done
# The status table at the end: each job's state, step, last checkpoint and latest metrics.
grep -Eq '^  done +lr0.001_total_steps60 +step 60  ckpt 60  eval/acc/prec@1 [0-9.]+ ' "$TMP/out2" \
  || fail "the status table"
"$BVLUA" runs sw >"$TMP/out" 2>&1 || fail "runs"
[ "$(tail -n +2 "$TMP/out" | wc -l)" = 4 ] || fail "bvlua runs lists 4 runs"
grep -Eq '^run +lr +total_steps +step ' "$TMP/out" || fail "the swept keys head the table"

# The same as a sweep file, with a list of variants.
cat >sweep.lua <<LUA
return {config = "$CFG", workdir = "$TMP/sw_file", jobs = 1,
        list = {{lr = 0.01, total_steps = 2}}}
LUA
"$BVLUA" sweep sweep.lua >"$TMP/out" 2>&1 || fail "the sweep file exited with $?"
[ -f sw_file/lr0.01_total_steps2/SWEEP_DONE ] || fail "the sweep file's run"
"$BVLUA" sweep "$CFG" --grid lr=1 >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "no --workdir given" "$TMP/out" || fail "no --workdir"
echo OK
