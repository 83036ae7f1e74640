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
