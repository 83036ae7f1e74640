#!/usr/bin/env bash
# replicate's all-reduce during the backward (config.sharding_overlap; bv.dist.grad_buckets): 2
# ranks of tests/lua/dist/grad_overlap.lua on the CPU and on the test device (core/fake_device.h,
# as strict as CUDA), collectives checked across ranks. Buckets start from the gradient hooks
# before the backward ends, and gradients, loss and parameters equal the path without overlap
# and one process's, for accum_steps 1 and 2, replicate alone, with fsdp and as zero1.
# Usage: grad_overlap_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: grad_overlap_test.sh path/to/bvlua}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for where in cpu fake; do
  BV_CHECK_COLLECTIVES=1 BV_TEST_DEVICE=1 timeout 180 "$BVLUA" launch --nproc 2 -- \
    run tests/lua/dist/grad_overlap.lua "$where" >"$TMP/$where.out" 2>&1
  code=$?
  sed "s/^/  $where: /" "$TMP/$where.out"
  [ "$code" -eq 0 ] || fail "$where: exit code $code"
  grep -q '^rank 0: ok$' "$TMP/$where.out" || fail "$where: rank 0 did not finish"
  grep -q '^\[rank 1\] rank 1: ok$' "$TMP/$where.out" || fail "$where: rank 1 did not finish"
  grep -Eq '^accum_steps 2, replicate: [0-9]+ buckets a step, [1-9][0-9]* of' "$TMP/$where.out" \
    || fail "$where: no bucket started during the backward"
done
[ "$failures" -eq 0 ] && echo "grad_overlap: ok"
exit $((failures > 0))
