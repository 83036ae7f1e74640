#!/usr/bin/env bash
# replicate's all-reduce during the backward (config.sharding_overlap; bv.dist.grad_buckets): 2
# ranks of tests/lua/dist/grad_overlap.lua on the CPU and on the test device (core/fake_device.h,
# as strict as CUDA), collectives checked across ranks. Buckets start from the gradient hooks
# before the backward ends, and gradients, loss and parameters equal the path without overlap
# and one process's, for accum_steps 1 and 2, replicate alone, with fsdp and as zero1.
# Usage: grad_overlap_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: grad_overlap_test.sh path/to/bvlua}
. "$(dirname "$0")/two_ranks.sh"
two_ranks "$BVLUA" tests/lua/dist/grad_overlap.lua \
  '^accum_steps 2, replicate: [0-9]+ buckets a step, [1-9][0-9]* of' \
  'no bucket started during the backward' && echo "grad_overlap: ok"
