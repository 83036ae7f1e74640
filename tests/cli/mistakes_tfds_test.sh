#!/usr/bin/env bash
# `bvlua mistakes` on a TFDS split (tfds:NAME[:VERSION]:SPLIT, --data-dir, else $TFDS_DATA_DIR):
# a short run of configs/tfds_lines.lua on the fixture (tests/data/tfds) writes the
# classification evaluator's outfile of its test split (ids: the dataset's id feature); the
# mistakes are drawn from the records with the ClassLabel's names as titles ("Pred: horizontal
# GT: diagonal"); another split is refused, and an unknown dataset, version, split, label or
# image feature is an error naming it. `bvlua repl` on the run: run.predict names the class.
# Usage: mistakes_tfds_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: mistakes_tfds_test.sh path/to/bvlua}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$ROOT/tests/cli/checks.sh"
cd "$TMP" || exit 1
DATA=$ROOT/tests/data/tfds
PP='decode|resize(16)|value_range(-1, 1)|onehot(3, key="label", key_result="labels")'
PP="$PP"'|keep("image", "labels", "id")'

run "$BVLUA" train "$ROOT/configs/tfds_lines.lua:steps=4" --workdir w \
  "--config.evals.test.outfile={workdir}/test_{step}.json" "--config.evals.test.pp=$PP"
expect_rc 0 "a short run on the TFDS fixture with a test outfile"
check "the run wrote its test outfile" [ -e w/test_4.json ] || { finish; exit 1; }

# Every wrong answer (--n 100), each with the class names of its prediction and label, in the
# split's order: what the listing must be.
"$BVLUA" -e "
local names = {'horizontal', 'vertical', 'diagonal'}
local lines, wrong = {}, 0
for _, r in ipairs(require('bv.json').decode(bv.fs.read_file('w/test_4.json'))) do
  if r.label ~= r.prediction then
    wrong = wrong + 1
    lines[#lines + 1] = string.format('  id %d: Pred: %s   GT: %s', r.id, names[r.prediction + 1],
                                      names[r.label + 1])
  end
end
assert(wrong > 0, 'the short run made no mistakes on test')
bv.fs.write_file('want', string.format('bvlua mistakes: %d of 10 answers are wrong; wrote %d to '
  .. 'm.png\n', wrong, wrong) .. table.concat(lines, '\n') .. '\n')" || fail "reading the outfile"

run "$BVLUA" mistakes w/test_4.json tfds:lines_tfds:test --data-dir "$DATA" -o m.png --n 100
expect_rc 0 "mistakes on the TFDS test split"
check "the listing titles each mistake with the class names" cmp -s want "$TMP/out"
check "the sheet is a picture" "$BVLUA" -e "assert(bv.image.read('m.png'):shape()[3] == 3)"
# The same from $TFDS_DATA_DIR, with the version named and the split as an expression.
run env TFDS_DATA_DIR="$DATA" "$BVLUA" mistakes w/test_4.json "tfds:lines_tfds:1.0.0:test[:100%]" \
  -o m2.png --n 100
expect_rc 0 "\$TFDS_DATA_DIR, a version and a split expression"
check "the same listing" cmp -s <(sed 's/m.png/m2.png/' want) "$TMP/out"

# Another split: refused, naming both, and nothing drawn.
run "$BVLUA" mistakes w/test_4.json tfds:lines_tfds:validation --data-dir "$DATA" -o x.png
expect_rc 1 "another split"
expect_in err "w/test_4.json is not the outfile of tfds:lines_tfds:validation: 10 of its 10 \
answers are for ids the data lacks (the first: record 1, id 5" \
  "the refusal names the outfile and the split"
expect_in err "give the split the evaluator ran on" "says what to give"
check "nothing drawn for another split" [ ! -e x.png ]
run "$BVLUA" mistakes w/test_4.json "tfds:lines_tfds:test[:50%]" --data-dir "$DATA" -o x.png
expect_rc 1 "half the split"
expect_in err "it holds 10 answers, the data 5 examples" "more answers than examples"

# Unknown dataset, version, split, label or image feature: an error naming it.
refused() {  # DATA PATTERN WHAT [OPTIONS...]
  local data=$1 pattern=$2 what=$3
  shift 3
  run "$BVLUA" mistakes w/test_4.json "$data" --data-dir "$DATA" -o x.png "$@"
  expect_rc 1 "$what"
  expect_in err "$pattern" "$what"
}
refused tfds:lines_tfd:test "no dataset 'lines_tfd' in $DATA" "an unknown dataset"
refused tfds:lines_tfds:2.0.0:test "has no prepared version 2.0.0" "an unknown version"
refused tfds:lines_tfds:tst "unknown split 'tst' (did you mean 'test'?)" "an unknown split"
refused tfds:lines_tfds:test "tfds:lines_tfds:test has no label feature 'digit' (--label); \
its class label features: label" \
  "an unknown label feature" --label digit
refused tfds:lines_tfds:test "tfds:lines_tfds:test has no image feature 'label' (--key); \
its image features: image" \
  "a --key that is no image" --key label
check "nothing drawn for an error" [ ! -e x.png ]
# A TFDS name without a split, or --data-dir with a JSON-L file: usage errors.
run "$BVLUA" mistakes w/test_4.json tfds:lines_tfds --data-dir "$DATA"
expect_rc 2 "no split"
expect_in err "'tfds:lines_tfds' names no split: a TFDS split is \
tfds:NAME[/CONFIG][:VERSION]:SPLIT" \
  "no split is a usage error"
run "$BVLUA" mistakes w/test_4.json val.jsonl --data-dir "$DATA"
expect_rc 2 "--data-dir with a JSON-L file"
run "$BVLUA" mistakes --help
expect_in out "tfds:NAME[/CONFIG][:VERSION]:SPLIT" "the usage says how to name a split"

# The REPL on the run: run.predict gives the class's name beside its 0-based id.
"$BVLUA" -e "
local src = require('bv.data').source({name = 'lines_tfds', split = 'test', data_dir = '$DATA'})
bv.fs.write_file('img.png', src:example(1).image)" || fail "writing a test image"
run sh -c "printf '%s\n' 'p = run.predict(\"img.png\");' \
  'names = {\"horizontal\", \"vertical\", \"diagonal\"};' \
  'print(\"predicted\", p.class, p.name, names[p.class + 1])' \
  | '$BVLUA' repl w"
expect_rc 0 "the REPL on the run"
check "run.predict's name is the ClassLabel's name of its class" \
  grep -qE "^predicted	[0-2]	([a-z]+)	\1$" "$TMP/out"
finish
