#!/usr/bin/env bash
# `bvlua sweep --jobs 2` in a directory without the lines data set: the sweep runs the config's
# prepare itself, one job after the other, before launching any job, so the data set is drawn
# once (not by every job at once, racing on the same files) and both jobs train on it. Run again,
# the finished jobs are skipped and nothing is prepared. A prepare that fails stops the sweep
# before anything is launched, naming the job.
# Usage: sweep_prepare_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: sweep_prepare_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; tail -30 "$TMP/out" 2>/dev/null; exit 1; }

cd "$TMP" || exit 1
CFG="$ROOT/configs/lines/resnet.lua:runlocal,data=data/lines"
SWEEP=(sweep "$CFG" --workdir sw --grid lr=1e-3,3e-4 --config.total_steps=2 --jobs 2 --status 0)
"$BVLUA" "${SWEEP[@]}" >"$TMP/out" 2>&1 || fail "the sweep exited with $?"
grep -q '^sweep: 2 done$' "$TMP/out" || fail "not both jobs done"
n=$(grep -c '^bv.lines: drawing the lines data set (12,000 images, 49 MB) into data/lines' "$TMP/out")
[ "$n" = 1 ] || fail "the sweep drew the data set $n times, not once"
for split in train val test; do
  [ -s "data/lines/$split.jsonl" ] || fail "data/lines/$split.jsonl was not drawn"
done
grep -l 'drawing the lines data set' sw/*/sweep.log 2>/dev/null && fail "a job drew the data set"
# Each job's prepare, in the sweep, before the first job starts.
grep -q '^  prepare lr0.001 ' "$TMP/out" && grep -q '^  prepare lr0.0003 ' "$TMP/out" \
  || fail "the prepares are not said"
first_start=$(grep -n '^  start ' "$TMP/out" | head -1 | cut -d: -f1)
last_prepare=$(grep -n '^  prepare ' "$TMP/out" | tail -1 | cut -d: -f1)
[ "$last_prepare" -lt "$first_start" ] || fail "a job started before the last prepare"

# Again: both finished, nothing prepared or drawn.
"$BVLUA" "${SWEEP[@]}" >"$TMP/out" 2>&1 || fail "the second sweep exited with $?"
[ "$(grep -c '^  skip ' "$TMP/out")" = 2 ] || fail "the finished jobs were not skipped"
grep -q 'prepare\|drawing' "$TMP/out" && fail "the second sweep prepared"

# A prepare that fails: the sweep stops, naming the job and the error; no job starts and no
# workdir is made.
cat >failing.lua <<LUA
local base = dofile("$ROOT/configs/lines/resnet.lua")
return {get_config = base.get_config, register_pp_ops = base.register_pp_ops,
        prepare = function(c) error("no room for " .. c.input.data.fname, 0) end}
LUA
"$BVLUA" sweep "$TMP/failing.lua:runlocal" --workdir bad --grid lr=1e-3,3e-4 --jobs 2 \
  >"$TMP/out" 2>&1
code=$?
[ "$code" = 1 ] || fail "a failing prepare: exit code $code, want 1"
grep -qF "bvlua sweep: the config's prepare failed for job lr0.001 ($TMP/failing.lua:runlocal): no room for data/lines/train.jsonl; nothing was launched" \
  "$TMP/out" || fail "the failing prepare is not named with its job"
grep -q '^  start ' "$TMP/out" && fail "a job started after a failed prepare"
[ -e bad ] && fail "a failed prepare left the workdir"
echo OK
