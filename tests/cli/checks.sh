# The checks the CLI tests share, sourced after they set TMP (a scratch directory):
#   run CMD...              stdout and stderr to $TMP/out and $TMP/err, the exit code to rc
#   check WHAT CMD...       CMD must succeed, else a failure named WHAT (with run's output)
#   expect_rc N WHAT        the last run's exit code is N
#   expect_in out|err TEXT WHAT, expect_not_in out|err TEXT WHAT
#   finish                  prints the counts; the exit status says whether all passed
failures=0
checks=0

run() {
  "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}
fail() {
  failures=$((failures + 1))
  echo "FAIL: $*"
  echo "  stdout: $(tail -c 1500 "$TMP/out")"
  echo "  stderr: $(tail -c 600 "$TMP/err")"
}
check() {
  local what=$1
  shift
  checks=$((checks + 1))
  "$@" || fail "$what"
}
expect_rc() { check "$2: exit code $rc, want $1" [ "$rc" -eq "$1" ]; }
expect_in() { check "$3: '$2' not in std$1" grep -qF -- "$2" "$TMP/$1"; }
expect_not_in() { checks=$((checks + 1)); ! grep -qF -- "$2" "$TMP/$1" || fail "$3: '$2' in std$1"; }
finish() {
  echo "$((checks - failures)) passed, $failures failed"
  [ "$failures" -eq 0 ]
}

# colour_data BVLUA DIR N: N random 8x8 PNGs in DIR and DIR/train.jsonl ({image, label = i % 3}),
# the tiny data set the training tests use.
colour_data() {
  "$1" -e "
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, $3 do
  local img = (bv.rand({8, 8, 3}, rng) * 255):to('uint8')
  bv.image.write_png(img, '$2/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i % 3})
end
bv.fs.write_file('$2/train.jsonl', table.concat(lines, '\\n'))"
}
