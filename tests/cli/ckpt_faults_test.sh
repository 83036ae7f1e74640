#!/usr/bin/env bash
# Resuming `bvlua train` from a checkpoint whose manifest was edited and its manifest.crc32
# recomputed (the CRC detects accidents, not tampering): a negative or huge data_position ends
# within seconds with rc 1 and an error naming data_position and the manifest, instead of
# skipping 2^64 examples; a far but valid position is skipped until a SIGTERM, which ends the
# skip with an error saying so. Usage: ckpt_faults_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: ckpt_faults_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$ROOT/tests/cli/checks.sh"

cd "$TMP" || exit 1  # the config reads data/lines/ relative to the working directory
"$BVLUA" run "$ROOT/scripts/make_lines.lua" data/lines --train 16 --val 8 --test 0 >/dev/null \
  || { echo "FAIL: make_lines"; exit 1; }
train() { "$BVLUA" --threads 1 train "$ROOT/configs/lines/resnet.lua:runlocal" --workdir w "$@"; }
run train --stop-after 2
expect_rc 0 "the first run"
DIR=$TMP/w/ckpt-000000002
MANIFEST=$DIR/manifest.json
check "a checkpoint at step 2 with its data position" grep -q '"data_position": 16,' "$MANIFEST"
cp "$MANIFEST" "$TMP/manifest.orig"

# manifest.json with data_position replaced, and manifest.crc32 recomputed (zlib's CRC-32).
forge() {
  sed "s/\"data_position\": 16,/\"data_position\": $1,/" "$TMP/manifest.orig" >"$MANIFEST"
  python3 -c 'import sys, zlib; print("%08x" % zlib.crc32(open(sys.argv[1], "rb").read()))' \
    "$MANIFEST" >"$DIR/manifest.crc32"
}

for position in -5 18446744073709551611 9007199254740992; do
  forge "$position"
  start=$SECONDS
  run timeout -k 5 60 "$BVLUA" --threads 1 train "$ROOT/configs/lines/resnet.lua:runlocal" --workdir w
  expect_rc 1 "data_position $position"
  check "data_position $position: ended in $((SECONDS - start)) s" [ $((SECONDS - start)) -lt 30 ]
  expect_in err "checkpoint 'w/ckpt-000000002': manifest.json: state.data_position is $position," \
    "data_position $position: the error names the key and the file"
  expect_not_in out "Resumed from" "data_position $position: no resume"
done

# 2^53 - 1 is allowed (a position is only bounded where a double stays exact): the skip runs
# until a SIGTERM ends it.
forge 9007199254740991
"$BVLUA" --threads 1 train "$ROOT/configs/lines/resnet.lua:runlocal" --workdir w \
  >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 1 100); do  # up to 10 s for the start-up (the checkpoint is verified by then)
  grep -q "Training on" "$TMP/out" "$TMP/err" && break
  sleep 0.1
done
sleep 1
kill -TERM "$pid"
start=$SECONDS
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; echo "FAIL: SIGTERM did not stop the skip"; }
wait "$pid"
rc=$?
expect_rc 1 "a far position stopped by SIGTERM"
check "SIGTERM ended the skip in $((SECONDS - start)) s" [ $((SECONDS - start)) -lt 10 ]
expect_in err "stopped (SIGTERM) while skipping to data position 9007199254740991" \
  "the stop names the skip"

finish
