#!/usr/bin/env bash
# replicate and zero1 with config.sharding_wire_dtype = "bfloat16", sharding_overlap on and off:
# 2 ranks of tests/lua/dist/replicate_wire.lua on the CPU and on the test device
# (core/fake_device.h, as strict as CUDA), collectives checked across ranks. A step's gradient
# all-reduce sends half the float32 bytes (g:sent_bytes()), the gradients are the float32 ones
# rounded, summed and averaged as the wire does, and 10 SGD steps' losses stay within 5e-4 of
# the float32 run's; the measured difference is printed. The default is float32, bit for bit.
# Usage: replicate_wire_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: replicate_wire_test.sh path/to/bvlua}
. "$(dirname "$0")/two_ranks.sh"
two_ranks "$BVLUA" tests/lua/dist/replicate_wire.lua \
  '^rank 0: over 10 steps the bfloat16 losses stay within' "no loss line" \
  && echo "replicate_wire: ok"
