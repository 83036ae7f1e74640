#!/usr/bin/env bash
# fsdp with remat keeps a layer's fetched parameters for its recomputation when
# config.sharding_reshard_after_forward = false: 2 ranks of tests/lua/dist/fsdp_reshard.lua on
# the CPU and on the test device (core/fake_device.h, as strict as CUDA), collectives checked
# across ranks. One broadcast a part a step instead of two, as many gradient reduces, and
# bit-identical losses, gradients and parameters after 3 SGD steps; the kept bytes are printed.
# Usage: fsdp_reshard_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: fsdp_reshard_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for where in cpu fake; do
  BV_CHECK_COLLECTIVES=1 BV_TEST_DEVICE=1 timeout 180 "$BVLUA" launch --nproc 2 -- \
    run tests/lua/dist/fsdp_reshard.lua "$where" >"$TMP/$where.out" 2>&1
  code=$?
  sed "s/^/  $where: /" "$TMP/$where.out"
  [ "$code" -eq 0 ] || fail "$where: exit code $code"
  grep -q '^rank 0: ok$' "$TMP/$where.out" || fail "$where: rank 0 did not finish"
  grep -q '^\[rank 1\] rank 1: ok$' "$TMP/$where.out" || fail "$where: rank 1 did not finish"
done
[ "$failures" -eq 0 ] && echo "fsdp_reshard: ok"
exit $((failures > 0))
