#!/usr/bin/env bash
# configs/tfds_lines.lua trains end to end from the TFDS fixture (tests/data/tfds, written by the
# real tensorflow-datasets) with big_vision's data keys, evaluating on another split expression
# (train[80%:]+validation: 8 + 10 examples) and on test; a missing shard and a corrupt record are
# errors naming them.
# Usage: tfds_train_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: tfds_train_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$ROOT/tests/cli/checks.sh"
cd "$TMP" || exit 1

run "$BVLUA" train "$ROOT/configs/tfds_lines.lua" --workdir w
expect_rc 0 "training from the TFDS fixture"
expect_in out "Running for 20 steps, that means 5.000000 epochs" "train[:80%] is 32 examples (20 steps of 8)"
check "a checkpoint at the end" [ -d w/ckpt-000000020 ]
# Every val/prec@1 is a count of right answers over the 18 examples of train[80%:]+validation.
check "val/prec@1 over 18 examples" "$BVLUA" -e "
local n = 0
for line in io.lines('w/big_vision_metrics.txt') do
  local v = line:match('\"val/prec@1\": ([-0-9.e]+)')
  if v then
    n = n + 1
    local right = tonumber(v) * 18
    assert(math.abs(right - math.floor(right + 0.5)) < 1e-9, v .. ' is not k/18')
  end
end
assert(n == 3, n .. ' val evaluations, want 3 (steps 0, 10, 20)')"
expect_in out "[20] test/prec@1 = " "the test split evaluated at the end"

# A copy of the fixture with one shard gone, then with one record's bytes changed.
cp -r "$ROOT/tests/data/tfds" data
SHARD=data/lines_tfds/1.0.0/lines_tfds-validation.tfrecord-00001-of-00002
mv "$SHARD" "$TMP/shard"
run "$BVLUA" train "$ROOT/configs/tfds_lines.lua:data_dir=data" --workdir w2
expect_rc 1 "a missing shard"
expect_in err "lines_tfds-validation.tfrecord-00001-of-00002" "the missing shard is named"
mv "$TMP/shard" "$SHARD"
# The first record's data starts after its 12-byte header: change a byte of it.
printf '\x00' | dd of="$SHARD" bs=1 seek=40 count=1 conv=notrunc 2>/dev/null
run "$BVLUA" train "$ROOT/configs/tfds_lines.lua:data_dir=data" --workdir w3
expect_rc 1 "a corrupt record"
expect_in err "lines_tfds-validation.tfrecord-00001-of-00002' record 0" "the corrupt record is named"
expect_in err "corrupt record" "says what is wrong"
finish
