#!/usr/bin/env bash
# g:check(key) across 2 ranks of tests/lua/dist/store_check.lua, on the CPU and on the test
# device: one rank's set is seen by the other at once, subgroups keep their keys apart.
# Usage: dist_check_test.sh path/to/bvlua   (run from the source root)
set -u
BVLUA=${1:?usage: dist_check_test.sh path/to/bvlua}
. "$(dirname "$0")/two_ranks.sh"
two_ranks "$BVLUA" tests/lua/dist/store_check.lua && echo "dist_check: ok"
