#!/usr/bin/env bash
# `bvlua mistakes`: from a VQA outfile (written here as the vqa evaluator writes it; then a
# classification evaluator's) and the lines data it evaluated, a contact sheet of the wrong
# answers only, titled "Pred: x   GT: y" (an empty answer as ""), and their list; an outfile
# without question_id, or one that is not of the data given (an id the data lacks, more
# answers than examples, not its examples in order, labels that differ), is an error naming both.
# Usage: mistakes_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: mistakes_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

"$BVLUA" run "$ROOT/scripts/make_lines.lua" "$TMP/lines" --train 1 --val 6 --test 1 >/dev/null \
  || fail "make_lines"
# The outfiles of the 6 val examples, with their labels: answers right for 0, 2 (with a space)
# and 5, wrong for 1, 3 (empty) and 4. Also: val with the labels of examples 2 and 4 changed,
# and its first 4 examples.
"$BVLUA" -e "
local json = require 'bv.json'
local labels, changed, vqa = {}, {}, {}
for line in io.lines('$TMP/lines/val.jsonl') do
  local ex = json.decode(line)
  labels[#labels + 1] = ex.label
  if #labels == 3 or #labels == 5 then ex.label = (ex.label + 1) % 3 end
  changed[#changed + 1] = json.encode(ex)
end
assert(#labels == 6)
local answers = {'%d', '+', ' %d', '', '+', '%d'}
for j, l in ipairs(labels) do
  local a = answers[j] == '+' and tostring((l + 1) % 3) or answers[j]:format(l)
  vqa[j] = {question_id = tostring(j - 1), answer = a, gts = {tostring(l)}}
end
bv.fs.write_file('$TMP/vqa.json', json.encode(vqa))
bv.fs.write_file('$TMP/labels', table.concat(labels, ' '))
bv.fs.write_file('$TMP/lines/changed.jsonl', table.concat(changed, '\n') .. '\n')
bv.fs.write_file('$TMP/lines/four.jsonl', table.concat(changed, '\n', 1, 4) .. '\n')" \
  || fail "writing the outfiles"
read -r -a L <"$TMP/labels"

"$BVLUA" mistakes "$TMP/vqa.json" "$TMP/lines/val.jsonl" -o "$TMP/m.png" >"$TMP/out" 2>&1 \
  || fail "mistakes exited with $?"
grep -q "3 of 6 answers are wrong; wrote 3 to" "$TMP/out" || fail "the count of mistakes"
grep -q "^  id 3: Pred: \"\"   GT: ${L[3]}$" "$TMP/out" \
  || fail "an empty answer is not shown as \"\""
grep -q "^  id 4: Pred: $(((L[4] + 1) % 3))   GT: ${L[4]}$" "$TMP/out" \
  || fail "the list of mistakes"
"$BVLUA" -e "
local img = bv.image.read('$TMP/m.png')
local s = img:shape()
-- 3 pictures in a row: 3 cells of 224 with 8 px gaps; one row under a 28 px title.
assert(s[1] == 268 and s[2] == 704, 'the sheet is ' .. s[1] .. 'x' .. s[2])
-- the lines' red and blue are on it
local px = img:to('int64')
local red = ((px:select(3, 1) - 255):abs() + px:select(3, 2) + px:select(3, 3)):lt(60):to('int64'):sum():item()
assert(red > 200, 'red line pixels: ' .. red)" >"$TMP/out" 2>&1 || fail "the sheet's pixels"

# The classification evaluator's outfile: {id, label, prediction}, 0-based classes, of the
# first 2 examples (an evaluation with a stop).
rec() { echo "{\"id\": \"$1\", \"label\": ${L[$1]}, \"prediction\": $2}"; }  # ID PREDICTION
echo "[$(rec 0 "${L[0]}"), $(rec 1 $(((L[1] + 2) % 3)))]" >"$TMP/cls.json"
"$BVLUA" mistakes "$TMP/cls.json" "$TMP/lines/val.jsonl" -o "$TMP/c.png" >"$TMP/out" 2>&1 \
  || fail "classification records exited with $?"
grep -q "1 of 2 answers are wrong; wrote 1 to" "$TMP/out" || fail "classification mistakes"
grep -q "cls.json answers the first 2 of the 6 examples of .*val.jsonl" "$TMP/out" \
  || fail "the note on the first 2 examples"

# Not the data the outfile was written from: refused, naming both files and what differs.
refused() {  # OUTFILE DATA PATTERN WHAT
  "$BVLUA" mistakes "$1" "$2" -o "$TMP/x.png" >"$TMP/out" 2>&1
  [ $? -eq 1 ] && grep -q "$(basename "$1") is not the outfile of .*$(basename "$2"): $3" \
    "$TMP/out" && [ ! -e "$TMP/x.png" ] || fail "$4"
}
refused "$TMP/vqa.json" "$TMP/lines/changed.jsonl" \
  "2 of the 6 labels differ (the first: record 3, id 2: ${L[2]} in the outfile, \
$(((L[2] + 1) % 3)) in the data)" \
  "vqa gts that differ from the data's labels"
echo "[$(rec 0 0), $(rec 1 0), $(rec 2 0)]" >"$TMP/cls3.json"
refused "$TMP/cls3.json" "$TMP/lines/changed.jsonl" \
  "1 of the 3 labels differ (the first: record 3, id 2: " "classification labels that differ"
refused "$TMP/vqa.json" "$TMP/lines/four.jsonl" "it holds 6 answers, the data 4 examples" \
  "more answers than examples"
echo "[$(rec 0 0), $(rec 3 0)]" >"$TMP/gap.json"
refused "$TMP/gap.json" "$TMP/lines/val.jsonl" \
  "its 2 answers are not the data's first 2 examples in order (record 2 is id 3" "a gap"
echo '[{"question_id": "99", "answer": "1", "gts": ["2"]}]' >"$TMP/bad.json"
refused "$TMP/bad.json" "$TMP/lines/val.jsonl" \
  "1 of its 1 answers are for ids the data lacks (the first: record 1, id 99)" "unknown id"

echo '[{"answer": "1", "gts": ["2"]}]' >"$TMP/bad.json"
"$BVLUA" mistakes "$TMP/bad.json" "$TMP/lines/val.jsonl" -o "$TMP/x.png" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "record 1 lacks question_id, answer and gts" "$TMP/out" || fail "no question_id"
echo OK
