#!/usr/bin/env bash
# `bvlua launch`: N ranks of tests/lua/dist/ranks.lua join one Gloo group through the launcher's
# environment and get the right all_reduce/broadcast results; rank 0's output passes through and
# the others' lines are prefixed "[rank N] "; when rank 1 exits with code 3, or is killed with
# SIGKILL by this test, the launcher stops the rest and exits non-zero within 60 s, naming rank 1,
# and rank 0's failed collective names the lost rank 1 by its pid.
# Usage: dist_launch_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: dist_launch_test.sh path/to/bvlua}
TMP=$(mktemp -d)
LAUNCHER=
trap '[ -n "$LAUNCHER" ] && kill -9 "$LAUNCHER" 2>/dev/null; rm -rf "$TMP"' EXIT
SCRIPT=tests/lua/dist/ranks.lua
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_grep() {  # expect_grep PATTERN FILE WHAT
  grep -Eq -- "$1" "$2" || { fail "$3: no line matching '$1' in:"; sed 's/^/    /' "$2"; }
}

# 1. Three healthy ranks.
timeout 120 "$BVLUA" launch --nproc 3 -- run "$SCRIPT" ok >"$TMP/ok.out" 2>"$TMP/ok.err"
code=$?
[ "$code" -eq 0 ] || { fail "ok: exit code $code"; cat "$TMP/ok.out" "$TMP/ok.err"; }
expect_grep '^rank 0 of 3: all_reduce sum 36 36, mean 6, broadcast 40: ok$' \
  "$TMP/ok.out" "ok rank 0"
expect_grep '^\[rank 1\] rank 1 of 3: all_reduce sum 36 36, mean 6, broadcast 40: ok$' \
  "$TMP/ok.out" "ok rank 1"
expect_grep '^\[rank 2\] rank 2 of 3: .*: ok$' "$TMP/ok.out" "ok rank 2"

# fsdp under remat, with prefetches: gradients equal one process's (tests/lua/dist/fsdp_remat.lua).
timeout 120 "$BVLUA" launch --nproc 2 -- run tests/lua/dist/fsdp_remat.lua >"$TMP/fr.out" 2>&1 \
  || { fail "fsdp_remat: exit code $?"; cat "$TMP/fr.out"; }
expect_grep '^rank 0: ok$' "$TMP/fr.out" "fsdp_remat rank 0"
expect_grep '^\[rank 1\] rank 1: ok$' "$TMP/fr.out" "fsdp_remat rank 1"

# On two fake devices, a rank that owns no parameter sums its zero of the global norm on the
# device, as the owner does (tests/lua/dist/owns_nothing.lua; collectives checked).
BV_CHECK_COLLECTIVES=1 BV_TEST_DEVICE=1 timeout 120 "$BVLUA" launch --nproc 2 -- \
  run tests/lua/dist/owns_nothing.lua >"$TMP/on.out" 2>&1 \
  || { fail "owns_nothing: exit code $?"; cat "$TMP/on.out"; }
expect_grep '^ok 6' "$TMP/on.out" "owns_nothing rank 0"

# 2. Rank 1 exits with code 3 mid-way.
start=$(date +%s)
timeout 120 "$BVLUA" launch --nproc 2 --grace 5 -- run "$SCRIPT" exit "$TMP" \
  >"$TMP/exit.out" 2>"$TMP/exit.err"
code=$?
took=$(($(date +%s) - start))
pid1=$(cat "$TMP/pid1" 2>/dev/null || echo none)
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] || fail "exit: launcher exit code $code, wanted non-zero"
[ "$took" -lt 60 ] || fail "exit: took $took s"
expect_grep "^\[rank 1\] rank 1 exits with code 3 now" "$TMP/exit.err" "exit: rank 1's own stderr"
expect_grep "bvlua: rank 1 \(pid $pid1\) exited with code 3" "$TMP/exit.err" "exit: launcher"
expect_grep "dist.all_reduce failed on rank 0 of 2 \(gloo\): lost rank 1 \(pid $pid1\)" \
  "$TMP/exit.err" "exit: rank 0's error"
echo "exit case: launcher exit code $code after $took s"

# 3. Rank 1 killed with SIGKILL while both ranks are reducing.
rm -f "$TMP/pid1"
start=$(date +%s)
"$BVLUA" launch --nproc 2 --grace 5 -- run "$SCRIPT" loop "$TMP" \
  >"$TMP/kill.out" 2>"$TMP/kill.err" &
LAUNCHER=$!
for _ in $(seq 600); do [ -s "$TMP/pid1" ] && break; sleep 0.1; done
kpid=$(cat "$TMP/pid1" 2>/dev/null)
if [ -z "$kpid" ]; then
  fail "kill: rank 1 never wrote its pid"
else
  kill -9 "$kpid"
fi
code=none
for _ in $(seq 600); do
  if ! kill -0 "$LAUNCHER" 2>/dev/null; then wait "$LAUNCHER"; code=$?; break; fi
  sleep 0.1
done
took=$(($(date +%s) - start))
LAUNCHER=
[ "$code" != none ] && [ "$code" -ne 0 ] || fail "kill: launcher exit code $code after $took s"
expect_grep "bvlua: rank 1 \(pid $kpid\) was killed by signal 9" "$TMP/kill.err" "kill: launcher"
expect_grep "dist.all_reduce failed on rank 0 of 2 \(gloo\): lost rank 1 \(pid $kpid\)" \
  "$TMP/kill.err" "kill: rank 0's error"
echo "kill case: launcher exit code $code after $took s"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "dist_launch_test: all passed"
