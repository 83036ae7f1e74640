#!/usr/bin/env bash
# `bvlua mistakes`: from a VQA outfile (written here as the vqa evaluator writes it; then a
# classification evaluator's) and the
# lines data it evaluated, a contact sheet of the wrong answers only, titled "Pred: x   GT: y";
# an outfile without question_id, or an id the data lacks, is an error naming it.
# Usage: mistakes_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: mistakes_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

"$BVLUA" run "$ROOT/scripts/make_lines.lua" "$TMP/lines" --train 1 --val 6 --test 1 >/dev/null \
  || fail "make_lines"
cat >"$TMP/vqa.json" <<'JSON'
[{"question_id": "0", "answer": "1", "gts": ["1"]}, {"question_id": "1", "answer": "2", "gts": ["0"]},
 {"question_id": "2", "answer": " 0", "gts": ["0"]}, {"question_id": "3", "answer": "", "gts": ["2"]},
 {"question_id": "4", "answer": "1", "gts": ["2"]}, {"question_id": "5", "answer": "2", "gts": ["2"]}]
JSON
"$BVLUA" mistakes "$TMP/vqa.json" "$TMP/lines/val.jsonl" -o "$TMP/m.png" >"$TMP/out" 2>&1 \
  || fail "mistakes exited with $?"
grep -q "3 of 6 answers are wrong; wrote 3 to" "$TMP/out" || fail "the count of mistakes"
"$BVLUA" -e "
local img = bv.image.read('$TMP/m.png')
local s = img:shape()
-- 3 pictures in a row: 3 cells of 224 with 8 px gaps; one row under a 28 px title.
assert(s[1] == 268 and s[2] == 704, 'the sheet is ' .. s[1] .. 'x' .. s[2])
-- the lines' red and blue are on it
local px = img:to('int64')
local red = ((px:select(3, 1) - 255):abs() + px:select(3, 2) + px:select(3, 3)):lt(60):to('int64'):sum():item()
assert(red > 200, 'red line pixels: ' .. red)" >"$TMP/out" 2>&1 || fail "the sheet's pixels"

# The classification evaluator's outfile: {id, label, prediction}, 0-based classes.
echo '[{"id": "0", "label": 1, "prediction": 1}, {"id": "3", "label": 2, "prediction": 0}]' \
  >"$TMP/cls.json"
"$BVLUA" mistakes "$TMP/cls.json" "$TMP/lines/val.jsonl" -o "$TMP/c.png" >"$TMP/out" 2>&1 \
  || fail "classification records exited with $?"
grep -q "1 of 2 answers are wrong; wrote 1 to" "$TMP/out" || fail "classification mistakes"

echo '[{"answer": "1", "gts": ["2"]}]' >"$TMP/bad.json"
"$BVLUA" mistakes "$TMP/bad.json" "$TMP/lines/val.jsonl" -o "$TMP/x.png" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "record 1 lacks question_id, answer and gts" "$TMP/out" || fail "no question_id"
echo '[{"question_id": "99", "answer": "1", "gts": ["2"]}]' >"$TMP/bad.json"
"$BVLUA" mistakes "$TMP/bad.json" "$TMP/lines/val.jsonl" -o "$TMP/x.png" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "question_id 99 of .* is not an example of" "$TMP/out" || fail "unknown id"
echo OK
