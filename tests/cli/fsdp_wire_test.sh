#!/usr/bin/env bash
# fsdp with config.sharding_wire_dtype = "bfloat16": 2 ranks of tests/lua/dist/fsdp_wire.lua on the
# CPU and on the test device (core/fake_device.h, as strict as CUDA), collectives checked across
# ranks. Reads get the owner's value rounded to bfloat16 (float32 and the default: exact), the
# bytes broadcast and reduced a step halve, and 10 SGD steps' losses stay within 0.005 of the
# float32 run's; the measured difference is printed.
# Usage: fsdp_wire_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: fsdp_wire_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for where in cpu fake; do
  BV_CHECK_COLLECTIVES=1 BV_TEST_DEVICE=1 timeout 180 "$BVLUA" launch --nproc 2 -- \
    run tests/lua/dist/fsdp_wire.lua "$where" >"$TMP/$where.out" 2>&1
  code=$?
  sed "s/^/  $where: /" "$TMP/$where.out"
  [ "$code" -eq 0 ] || fail "$where: exit code $code"
  grep -q '^rank 0: ok$' "$TMP/$where.out" || fail "$where: rank 0 did not finish"
  grep -q '^\[rank 1\] rank 1: ok$' "$TMP/$where.out" || fail "$where: rank 1 did not finish"
done
[ "$failures" -eq 0 ] && echo "fsdp_wire: ok"
exit $((failures > 0))
