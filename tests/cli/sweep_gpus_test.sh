#!/usr/bin/env bash
# `bvlua sweep --gpus N` hands each job one GPU through CUDA_VISIBLE_DEVICES: 0..N-1, or, when
# the sweep itself was given CUDA_VISIBLE_DEVICES (a cluster's allocation), the first N devices
# it lists, never another. A trainer file of the test's own records what each job was given.
# Usage: sweep_gpus_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: sweep_gpus_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null | tail -30; exit 1; }

cd "$TMP" || exit 1
cat >trainer.lua <<'LUA'
return function(config, workdir)
  local f = assert(io.open(workdir .. "/visible", "w"))
  f:write(os.getenv("CUDA_VISIBLE_DEVICES") or "unset")
  f:close()
end
LUA
cat >cfg.lua <<LUA
return {get_config = function() return {trainer = "$TMP/trainer.lua", seed = 0} end}
LUA

# The GPUs each job of sweep DIR was given, sorted and unique, comma-separated.
given() { for f in "$1"/*/visible; do cat "$f"; echo; done | sort -u | paste -sd, -; }

# No CUDA_VISIBLE_DEVICES: GPUs 0 and 1.
env -u CUDA_VISIBLE_DEVICES "$BVLUA" sweep cfg.lua --workdir plain --grid seed=1,2,3,4 --gpus 2 \
  --status 0 >out 2>&1 || fail "the sweep without CUDA_VISIBLE_DEVICES exited with $?"
[ "$(given plain)" = "0,1" ] || fail "without CUDA_VISIBLE_DEVICES the jobs got $(given plain)"

# CUDA_VISIBLE_DEVICES=5,7,2: --gpus 2 takes 5 and 7, as CUDA numbers them, nothing outside.
CUDA_VISIBLE_DEVICES=5,7,2 "$BVLUA" sweep cfg.lua --workdir listed --grid seed=1,2,3,4 --gpus 2 \
  --status 0 >out 2>&1 || fail "the sweep with CUDA_VISIBLE_DEVICES exited with $?"
[ "$(given listed)" = "5,7" ] || fail "CUDA_VISIBLE_DEVICES=5,7,2 --gpus 2: the jobs got $(given listed)"
grep -q "on GPU(s) 5,7" out || fail "the sweep's first line does not name GPUs 5,7"
grep -q "start  seed[0-9] on GPU 7" out || fail "no job started on GPU 7"

# UUIDs pass through as they are; -1 ends the list as it does for CUDA.
CUDA_VISIBLE_DEVICES=GPU-aa11,GPU-bb22,-1,3 "$BVLUA" sweep cfg.lua --workdir uuids --grid seed=1,2 \
  --gpus 2 --status 0 >out 2>&1 || fail "the sweep with GPU UUIDs exited with $?"
[ "$(given uuids)" = "GPU-aa11,GPU-bb22" ] || fail "UUIDs: the jobs got $(given uuids)"

# More GPUs than listed: an error naming the variable, and no job started.
CUDA_VISIBLE_DEVICES=4,-1,6 "$BVLUA" sweep cfg.lua --workdir over --grid seed=1,2 --gpus 2 \
  --status 0 >out 2>&1
[ $? -eq 1 ] || fail "--gpus 2 with one GPU listed did not fail"
grep -q 'may use only the 1 GPU(s) that CUDA_VISIBLE_DEVICES="4,-1,6" lists' out \
  || fail "the error does not name CUDA_VISIBLE_DEVICES"
ls over/*/visible >/dev/null 2>&1 && fail "a job started though --gpus was refused"
echo OK
