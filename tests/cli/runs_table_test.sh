#!/usr/bin/env bash
# `bvlua runs` on the runs issue 32 found hard to read (workdirs written here: config.json and
# big_vision_metrics.txt): pp strings that differ in the middle show that part; ranked by the
# last value, --best by the best; a directory of sweeps; the table fits COLUMNS (or 100) and
# --keys picks keys; a misspelt metric or key names the closest; --json keeps types.
# Usage: runs_table_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: runs_table_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/checks.sh"
cd "$TMP" || exit 1
export COLUMNS=100

BASE='decode|resize(64)|value_range(-1, 1)'
TAIL='onehot(3, key=\"label\", key_result=\"labels\")|keep(\"image\", \"labels\")'
CROP='pad_to_shape(shape=(73, 73, 3), pad_value=1, where=\"both\")|random_crop(64)'
AUG="$BASE|flip_lr|lines_flip_ud|$CROP|$TAIL"
FLIP="$BASE|flip_lr|lines_flip_ud|$TAIL"
NOAUG="$BASE|$TAIL"
# workdir DIR LR PP ACC1 ACC2 [EXTRA JSON]: two eval steps of eval/acc/prec@1
workdir() {
  mkdir -p "$1"
  printf '{"lr": %s, "input": {"pp": "%s", "batch_size": 32}, "seed": 0%s}\n' "$2" "$3" "${6:-}" \
    >"$1/config.json"
  printf '%s\n' "{\"step\": 5, \"training_loss\": 0.9, \"eval/acc/prec@1\": $4}" \
    "{\"step\": 10, \"training_loss\": 0.7, \"eval/acc/prec@1\": $5}" >"$1/big_vision_metrics.txt"
}
# A directory of sweeps (sweeps/<sweep>/<run>), the best value and the last ranking differently.
workdir sweeps/aug/lr0.001 0.001 "$AUG" 0.50 0.74
workdir sweeps/flip/lr0.001 0.001 "$FLIP" 0.70 0.66
workdir sweeps/noaug/lr0.001 0.001 "$NOAUG" 0.80 0.47
workdir sweeps/noaug/lr0.0003 0.0003 "$NOAUG" 0.60 0.48

run "$BVLUA" runs sweeps
expect_rc 0 "a directory of sweeps"
check "header: ranked by the last value" \
  grep -Eq '^run +input.pp +lr +step +last eval/acc/prec@1 \(ranked\) +best$' "$TMP/out"
check "names below sweeps/, ranked by the last value" \
  [ "$(tail -n +2 "$TMP/out" | awk '{print $1}' | tr '\n' ' ')" \
    = "aug/lr0.001 flip/lr0.001 noaug/lr0.0003 noaug/lr0.001 " ]
# The three pp strings share their start and end: each row shows where it differs.
pp_cells() { tail -n +2 "$TMP/out" | sed -E 's/^[^ ]+ +//; s/ +[0-9.]+ +10 +[0-9.]+ +[0-9.]+$//'; }
check "three different input.pp cells" [ "$(pp_cells | sort -u | wc -l)" = 3 ]
expect_in out "1)|flip_lr|lines_flip_ud|one" "flip's pp shows its ops"
expect_in out "_range(-1, 1)|onehot(" "noaug's pp shows what follows value_range"
expect_in out "1)|flip_lr|" "aug's pp shows the start of its differing part"
expect_in out "crop(64)|…" "and its end"
expect_not_in out "decode|resize" "the shared start is elided"
# The longest line in characters ("…" counted as one whatever the locale).
longest() { sed 's/…/./g' | awk '{print length}' | sort -n | tail -1; }
check "no input.pp cell over 40 characters" [ "$(pp_cells | longest)" -le 40 ]
run "$BVLUA" runs sweeps --best
check "--best: header" grep -Eq 'last eval/acc/prec@1 +best \(ranked\)$' "$TMP/out"
check "--best ranks by the best" [ "$(sed -n 2p "$TMP/out" | awk '{print $1}')" = noaug/lr0.001 ]
run "$BVLUA" runs sweeps/noaug
check "one sweep: names below it" [ "$(tail -n +2 "$TMP/out" | awk '{print $1}' | tr '\n' ' ')" \
  = "lr0.0003 lr0.001 " ]
mkdir -p deep/a/b && cp -r sweeps/aug/lr0.001 deep/a/b/
run "$BVLUA" runs deep
expect_rc 1 "three levels down is not looked at"
expect_in err "'deep' holds no run" "three levels down"

# Mixed configs: 61 keys that differ. The table keeps to 100 columns (or COLUMNS), keys every
# run has first, and says on stderr what it left out.
for r in x y; do
  n=$([ $r = x ] && echo 1 || echo 2)
  keys=$(for k in $(seq -w 1 30); do printf ', "k%s": %d' "$k" "$n$k"; done)
  opts=$(for k in $(seq -w 1 30); do printf '"opt%s": "v%d", ' "$k" "$n"; done)
  opts=${opts%, }
  workdir "mixed/$r" "0.$n" "$NOAUG" 0.5 0.6 "$keys, \"model\": {$opts}"
done
sed -i 's/^{/{"only": 1, /' mixed/x/config.json
"$BVLUA" runs mixed --csv >"$TMP/csv"
check "--csv: every key that differs" [ "$(head -1 "$TMP/csv" | tr ',' '\n' | wc -l)" = 66 ]
run env -u COLUMNS "$BVLUA" runs mixed
expect_rc 0 "mixed configs"
check "not a terminal: 100 columns" [ "$(longest <"$TMP/out")" -le 100 ]
expect_in err "more config keys differ between the runs, left out to fit 100 columns" "the note"
expect_in err "--keys K1,K2" "the note names --keys"
check "the narrow keys first" grep -Eq '^run +k01 +k02 ' "$TMP/out"
expect_not_in out "only" "a key every run has goes before one that only one run has"
run env COLUMNS=60 "$BVLUA" runs mixed
check "COLUMNS=60" [ "$(longest <"$TMP/out")" -le 60 ]
run "$BVLUA" runs mixed --keys model.opt07,lr
check "--keys: those keys, in that order" \
  grep -Eq '^run +model.opt07 +lr +step +last eval/acc/prec@1 \(ranked\) +best$' "$TMP/out"
expect_not_in err "left out" "--keys shows what it names"
METRICS="last eval/acc/prec@1,best eval/acc/prec@1"
run "$BVLUA" runs mixed --keys seed,model --csv
check "--keys: a key the runs share, and a.b for all of a's" \
  [ "$(head -1 "$TMP/out")" = "run,seed,$(seq -f 'model.opt%02g' 1 30 | paste -sd,),step,$METRICS" ]
run "$BVLUA" runs mixed --keys lr,model.opt7
expect_rc 1 "an unknown key"
expect_in err "--keys: no run's config has key 'model.opt7' (did you mean 'model.opt07'?)" \
  "its suggestion"

# A misspelt metric is an error naming the one meant, not an empty column.
run "$BVLUA" runs sweeps --metric eval/acc/prec1
expect_rc 1 "a misspelt metric"
expect_in err "no run logged metric 'eval/acc/prec1' (did you mean 'eval/acc/prec@1'?)" \
  "metric typo"
run "$BVLUA" runs sweeps --metric zzz
expect_in err "no run logged metric 'zzz'; the runs logged eval/acc/prec@1, training_loss" \
  "no match"
run "$BVLUA" runs sweeps --metric training_loss
expect_rc 0 "a metric every run logged"
expect_in out "last training_loss (ranked)" "training_loss"

# --json: numbers, booleans, lists and strings as JSON has them; config values under "config".
workdir typed/a 0.001 "$NOAUG" 0.5 0.6 ', "flip": true, "shape": [64, 64], "steps": 100'
workdir typed/b 0.0003 "$NOAUG" 0.5 0.7 ', "flip": false, "shape": [32, 32], "steps": 200'
run "$BVLUA" runs typed --json
expect_rc 0 "--json"
check "--json types" "$BVLUA" -e "
local rows = require('bv.json').decode(io.open('$TMP/out'):read('a'))
local b = rows[1]
assert(#rows == 2 and b.run == 'b', 'ranked by the last value: b first')
assert(math.type(b.step) == 'integer' and b.step == 10, 'step ' .. tostring(b.step))
local c = b.config
assert(b.last == 0.7 and b.best == 0.7 and c.lr == 0.0003, 'numbers')
assert(c.flip == false and rows[2].config.flip == true, 'booleans')
assert(c.shape[1] == 32 and math.type(c.steps) == 'integer', 'a list and an integer')
assert(b.metric == 'eval/acc/prec@1' and c['input.pp'] == nil, 'strings; no key that agrees')"
check "--json: no number in quotes" bash -c "! grep -Eq '\"[0-9.]+\"' '$TMP/out'"
finish
