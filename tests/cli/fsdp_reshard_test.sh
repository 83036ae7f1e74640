#!/usr/bin/env bash
# fsdp with remat keeps a layer's fetched parameters for its recomputation when
# config.sharding_reshard_after_forward = false: 2 ranks of tests/lua/dist/fsdp_reshard.lua on
# the CPU and on the test device (core/fake_device.h, as strict as CUDA), collectives checked
# across ranks. One broadcast a part a step instead of two, as many gradient reduces, and
# bit-identical losses, gradients and parameters after 3 SGD steps; the kept bytes are printed.
# Usage: fsdp_reshard_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: fsdp_reshard_test.sh path/to/bvlua}
. "$(dirname "$0")/two_ranks.sh"
two_ranks "$BVLUA" tests/lua/dist/fsdp_reshard.lua && echo "fsdp_reshard: ok"
