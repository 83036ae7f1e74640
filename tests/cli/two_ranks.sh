# Runs a rank script of tests/lua/dist/ as 2 ranks (`bvlua launch --nproc 2`), on the CPU and
# on the test device (core/fake_device.h, as strict as CUDA), with collectives checked across
# ranks (BV_CHECK_COLLECTIVES). Sourced by the tests that run such a script:
#   two_ranks BVLUA tests/lua/dist/NAME.lua [EXTENDED_REGEX WHAT]...
# Each rank must print "rank R: ok"; each EXTENDED_REGEX must match a line of the output, else
# the failure is named WHAT. Prints the ranks' output; returns the number of failures.
two_ranks() {
  local bvlua=$1 script=$2
  shift 2
  local tmp failures=0 where code
  tmp=$(mktemp -d)
  for where in cpu fake; do
    BV_CHECK_COLLECTIVES=1 BV_TEST_DEVICE=1 timeout 180 "$bvlua" launch --nproc 2 -- \
      run "$script" "$where" >"$tmp/$where.out" 2>&1
    code=$?
    sed "s/^/  $where: /" "$tmp/$where.out"
    fail_if() { "$@" || { echo "FAIL: $where: $msg"; failures=$((failures + 1)); }; }
    msg="exit code $code" fail_if [ "$code" -eq 0 ]
    msg="rank 0 did not finish" fail_if grep -q '^rank 0: ok$' "$tmp/$where.out"
    msg="rank 1 did not finish" fail_if grep -q '^\[rank 1\] rank 1: ok$' "$tmp/$where.out"
    local args=("$@")
    while [ ${#args[@]} -ge 2 ]; do
      msg=${args[1]} fail_if grep -Eq -- "${args[0]}" "$tmp/$where.out"
      args=("${args[@]:2}")
    done
  done
  rm -rf "$tmp"
  return "$failures"
}
