#!/usr/bin/env bash
# fsdp with config.sharding_wire_dtype = "bfloat16": 2 ranks of tests/lua/dist/fsdp_wire.lua on the
# CPU and on the test device (core/fake_device.h, as strict as CUDA), collectives checked across
# ranks. Reads get the owner's value rounded to bfloat16 (float32 and the default: exact), the
# bytes broadcast and reduced a step halve, and 10 SGD steps' losses stay within 0.005 of the
# float32 run's; the measured difference is printed.
# Usage: fsdp_wire_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: fsdp_wire_test.sh path/to/bvlua}
. "$(dirname "$0")/two_ranks.sh"
two_ranks "$BVLUA" tests/lua/dist/fsdp_wire.lua && echo "fsdp_wire: ok"
