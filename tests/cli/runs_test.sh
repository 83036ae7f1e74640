#!/usr/bin/env bash
# `bvlua runs`: the tutorial's ranking table from workdirs (written here as a trainer would:
# config.json and big_vision_metrics.txt): only the config values that differ, the last step,
# the last and best value of the metric, ranked by the last; --metric, --min, --csv, --json; a
# directory of runs; config keys named like the fixed columns; errors name the path.
# runs_table_test.sh: long values, width, --keys.
# Usage: runs_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: runs_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

run() {  # run NAME LR EPOCHS ACC1 ACC2: a workdir with two eval steps
  mkdir -p "$TMP/runs/$1"
  printf '{"lr": %s, "total_epochs": %s, "model": {"depth": 26}, "seed": 0}\n' "$2" "$3" \
    >"$TMP/runs/$1/config.json"
  printf '%s\n' \
    "{\"step\": 1, \"training_loss\": 1.1}" \
    "{\"step\": 5, \"training_loss\": 0.9, \"eval/acc/prec@1\": $4}" \
    "{\"step\": 10, \"training_loss\": 0.7, \"eval/acc/prec@1\": $5}" \
    >"$TMP/runs/$1/big_vision_metrics.txt"
}
run a 0.001 10 0.50 0.60
run b 0.0003 10 0.80 0.70
run c 0.001 30 0.40 0.65

export COLUMNS=100
"$BVLUA" runs "$TMP/runs" >"$TMP/out" 2>&1 || fail "runs exited with $?"
head -1 "$TMP/out" \
  | grep -Eq '^run +lr +total_epochs +step +last eval/acc/prec@1 \(ranked\) +best$' \
  || fail "header: only the keys that differ, then step, last (ranked by), best"
grep -q 'model.depth\|seed' "$TMP/out" && fail "keys that are the same everywhere are shown"
order=$(tail -n +2 "$TMP/out" | awk '{print $1}' | xargs -n1 basename | tr -d '\n')
[ "$order" = bca ] || fail "best first: expected b, c, a, got $order"
grep -Eq '^b +0.0003 +10 +10 +0.7 +0.8$' "$TMP/out" || fail "b's row (named below runs/)"

"$BVLUA" runs "$TMP/runs/a" "$TMP/runs/b" --metric training_loss --csv >"$TMP/out" 2>&1 \
  || fail "--csv exited with $?"
[ "$(head -1 "$TMP/out")" = "run,lr,step,last training_loss,best training_loss" ] \
  || fail "csv header"
grep -q ',0.7,0.7$' "$TMP/out" || fail "a loss ranks smaller first, best 0.7"
"$BVLUA" runs "$TMP/runs" --json >"$TMP/out" 2>&1 || fail "--json exited with $?"
"$BVLUA" -e "
local rows = require('bv.json').decode(io.open('$TMP/out'):read('a'))
assert(#rows == 3 and rows[1].best == 0.8 and rows[1].config.lr == 0.0003, 'json rows')
assert(rows[1].lr == nil and rows[1].config.total_epochs == 10, 'config keys under config')" \
  || fail "--json"
"$BVLUA" runs "$TMP/runs" --min >"$TMP/out" 2>&1
[ "$(sed -n 2p "$TMP/out" | awk '{print $1}' | xargs basename)" = a ] || fail "--min puts a first"
"$BVLUA" runs "$TMP/runs" --min --best >"$TMP/out" 2>&1
[ "$(sed -n 2p "$TMP/out" | awk '{print $1}' | xargs basename)" = c ] || fail "--min --best: c"

# Config keys named like the fixed fields or columns (run, step, best, last ..., config.run)
# cannot overwrite them: in JSON they sit under "config"; in CSV and the table, when a key
# collides, every key's column is config.KEY.
for n in x y; do
  mkdir -p "$TMP/clash/$n"
  printf '{"run": "%s", "step": "s%s", "best": "b%s", "last training_loss": "l%s", %s}\n' \
    "$n" "$n" "$n" "$n" "\"config\": {\"run\": \"c$n\"}" >"$TMP/clash/$n/config.json"
  echo '{"step": 4, "training_loss": 0.5}' >"$TMP/clash/$n/big_vision_metrics.txt"
done
"$BVLUA" runs "$TMP/clash" --json >"$TMP/out" 2>&1 || fail "clash --json exited with $?"
"$BVLUA" -e "
local rows = require('bv.json').decode(io.open('$TMP/out'):read('a'))
local x = rows[1].run == 'x' and rows[1] or rows[2]
assert(x.run == 'x' and x.step == 4 and x.last == 0.5 and x.best == 0.5, 'fixed fields')
assert(x.metric == 'training_loss', 'metric')
assert(x.config.run == 'x' and x.config.step == 'sx' and x.config.best == 'bx', 'config')
assert(x.config['config.run'] == 'cx', 'a nested key')" || fail "--json: config keys clash"
"$BVLUA" runs "$TMP/clash" --metric training_loss --csv >"$TMP/out" 2>&1 \
  || fail "clash --csv exited with $?"
[ "$(head -1 "$TMP/out")" = "run,config.best,config.config.run,config.last training_loss,\
config.run,config.step,step,last training_loss,best training_loss" ] || fail "clash: csv header"
grep -qx 'x,bx,cx,lx,x,sx,4,0.5,0.5' "$TMP/out" || fail "clash: x's csv row"
"$BVLUA" runs "$TMP/clash" --metric training_loss --csv --keys best >"$TMP/out" 2>&1
[ "$(head -1 "$TMP/out")" = "run,best,step,last training_loss,best training_loss" ] \
  || fail "csv: no column to tell apart"
COLUMNS=200 "$BVLUA" runs "$TMP/clash" >"$TMP/out" 2>&1 || fail "clash table exited with $?"
head -1 "$TMP/out" \
  | grep -Eq '^run +config.best +config.config.run +.*config.run +config.step +step +last ' \
  || fail "clash: the table's header"

"$BVLUA" runs "$TMP/nothere" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "runs: '.*nothere' is not a directory" "$TMP/out" || fail "missing dir"
mkdir -p "$TMP/empty"
"$BVLUA" runs "$TMP/empty" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "holds no run" "$TMP/out" || fail "a directory without runs"
"$BVLUA" runs --bogus >"$TMP/out" 2>&1
[ $? -eq 2 ] && grep -q "unknown option --bogus" "$TMP/out" || fail "unknown option"
echo OK
