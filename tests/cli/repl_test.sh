#!/usr/bin/env bash
# `bvlua repl` the way a person uses it: typed into a terminal (tmux, on a private socket), with
# Tab, Ctrl-C and Ctrl-D, checking what the screen shows: method completion, the tree of a
# checkpoint written here, `?resize`, an interrupted infinite loop followed by a working prompt,
# multi-line input, history; then `bvlua train --debug` opening the prompt on a failed run.
# Usage: repl_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: repl_test.sh path/to/bvlua}")
command -v tmux >/dev/null || { echo "FAIL: no tmux (scripts/setup installs it)"; exit 1; }
TMP=$(mktemp -d)
SOCK="bvlua_repl_test_$$"
TMUX_CMD=(tmux -L "$SOCK" -f /dev/null)
export TERM=${TERM:-xterm}
trap '"${TMUX_CMD[@]}" kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
failures=0
checks=0

fail() {
  failures=$((failures + 1))
  echo "FAIL: $* (lines ${BASH_LINENO[*]})"
  echo "--- screen ---"
  screen | grep -v '^$' | tail -25
  echo "--------------"
}

screen() { "${TMUX_CMD[@]}" capture-pane -p -J -S - -t repl 2>/dev/null; }
keys() { "${TMUX_CMD[@]}" send-keys -t repl "$@"; }
# type_line TEXT: types TEXT and Enter (a final ';' escaped: tmux reads it as a separator).
type_line() {
  local text=$1
  [[ $text == *";" ]] && text="${text%;}\\;"
  wait_prompt
  keys -l "$text"
  keys Enter
}

# wait_for TEXT WHAT [SECONDS]: polls the screen until TEXT (fixed string) is on it.
wait_for() {
  checks=$((checks + 1))
  local tries=$(( ${3:-10} * 10 ))
  for _ in $(seq 1 "$tries"); do
    screen | grep -qF -- "$1" && return 0
    sleep 0.1
  done
  fail "$2: '$1' not on the screen"
}

# exit_code: waits (5 s) for the program in the terminal to end; prints its exit status.
exit_code() {
  for _ in $(seq 1 50); do
    [ -s "$TMP/rc" ] && { cat "$TMP/rc"; return; }
    sleep 0.1
  done
  echo "still running"
}

# start PROGRAM ARGS...: runs it in a fresh 120x40 terminal; its exit status goes to $TMP/rc.
# The shell in between ignores SIGINT (as an interactive shell's job control keeps it out of
# the way), so Ctrl-C reaches only the program.
start() {
  "${TMUX_CMD[@]}" kill-server 2>/dev/null
  rm -f "$TMP/rc"
  local cmd=""
  for a in "$@"; do cmd+=" '$a'"; done
  local record="echo \$? >'$TMP/rc.tmp'; mv '$TMP/rc.tmp' '$TMP/rc'"
  "${TMUX_CMD[@]}" new-session -d -s repl -x 120 -y 40 -c "$PWD" \
    "trap '' INT; BVLUA_HISTORY='$TMP/history'$cmd; $record; sleep 60"
}

# wait_prompt: until the prompt waits for input (the screen's last line is "> " or ">> "), so
# keys sent next reach the line editor, not the terminal's type-ahead echo.
wait_prompt() {
  for _ in $(seq 1 100); do
    screen | grep -v '^$' | tail -1 | grep -qE '^>>? ?$' && return 0
    sleep 0.1
  done
  checks=$((checks + 1))
  fail "no prompt"
}

wait_re() {  # wait_re REGEX WHAT: polls the screen until a line matches REGEX (grep -E)
  checks=$((checks + 1))
  for _ in $(seq 1 100); do
    screen | grep -qE -- "$1" && return 0
    sleep 0.1
  done
  fail "$2: no line matches '$1'"
}

# A checkpoint to look at.
"$BVLUA" -e "bv.ckpt.save_npz('$TMP/p.npz', {
  ['img/head/kernel'] = bv.ones({4, 3}), ['img/head/bias'] = bv.zeros({3}),
  ['img/embedding/kernel'] = bv.zeros({2, 2, 3, 8}, 'bfloat16')})" || { echo "FAIL: npz"; exit 1; }

start "$BVLUA" repl "$TMP/p.npz"
wait_for "ckpt = $TMP/p.npz (npz): 3 tensors, 111 parameters" "banner names the checkpoint"
wait_for "? for help" "banner"
wait_re '^> ?$' "the prompt"

# Completion of a method name after ':'.
type_line 't = bv.zeros({2, 3});'
wait_prompt; keys -l 't:sha'; keys Tab
wait_for "> t:shape" "Tab completes t:sha to t:shape"
keys -l '()'; keys Enter
wait_re '^\{2, 3\}$' "the completed call runs"

# Two Tabs list the candidates.
wait_prompt; keys -l 'bv.o'; keys Tab Tab
wait_for "bv.optim" "double Tab lists bv.ones and bv.optim"
wait_for "bv.ones" "double Tab lists bv.ones and bv.optim"
keys C-u; keys -l '"cleared" .. 1'; keys Enter
wait_for "cleared1" "the line after a listing"

# A file name inside a string.
wait_prompt; keys -l "f = '$TMP/p.n"; keys Tab
wait_for "> f = '$TMP/p.npz" "Tab completes a path inside a string"
keys -l "'"; keys Enter

# The tree of the checkpoint, lazily opened.
type_line 'ckpt:tree()'
wait_for "  head/" "the tree shows folders"
wait_for "    kernel" "the tree shows tensors"
checks=$((checks + 1))
screen | grep -qE '^    kernel +float32 +\[4, 3\] +12$' || fail "kernel row: dtype, shape, count"
checks=$((checks + 1))
screen | grep -qE '^  embedding/ +96$' || fail "folder row: its parameter count"
type_line 'ckpt["img/head/kernel"]:sum():item()'
wait_re '^12\.0$' "ckpt[name] loads one tensor (its sum is 12.0)"

# Help from the pp registry.
type_line '?resize'
wait_for "pp op resize(size, method='bilinear', antialias=False)" "?resize shows the op's doc"

# An infinite loop stops on Ctrl-C and the prompt works afterwards.
type_line 'while true do end'
sleep 1
checks=$((checks + 1))
screen | grep -q "interrupted" && fail "the loop ended before Ctrl-C"
keys C-c
wait_for "interrupted (Ctrl-C)" "Ctrl-C interrupts the loop"
type_line '"alive" .. 40 + 2'
wait_for "alive42" "the prompt works after the interrupt"

# Ctrl-C while typing drops the line.
wait_prompt; keys -l 'this is not lua'; keys C-c
type_line '"fresh" .. 7'
wait_for "fresh7" "Ctrl-C drops a half-typed line"
checks=$((checks + 1))
screen | grep -q "unexpected symbol" && fail "the dropped line was run"

# Multi-line input continues while the chunk is incomplete; ';' keeps a value quiet.
type_line 'for i = 1, 3 do'
wait_for ">> " "continuation prompt"
type_line '  io.write("n=", i, " ")'
type_line 'end print()'
wait_for "n=1 n=2 n=3" "the multi-line chunk ran"
type_line '31330 + 7;'
type_line '"after" .. 1'
wait_for "after1" "a value after a quiet one"
checks=$((checks + 1))
screen | grep -qx '31337' && fail "a trailing ; must keep the value quiet"

# A command over a second shows its time.
type_line 'local t0 = bv.clock() while bv.clock() - t0 < 1.1 do end'
wait_re '^ +1\.[0-9]{2} s$' "a slow command shows its time, right-aligned"

# Ctrl-D exits with code 0 and the history file has the commands.
wait_prompt
keys C-d
rc=$(exit_code)
checks=$((checks + 1))
[ "$rc" = "0" ] || fail "Ctrl-D exits with 0 (got '$rc')"
checks=$((checks + 1))
grep -q 'ckpt:tree()' "$TMP/history" || fail "history file keeps the commands"
"${TMUX_CMD[@]}" kill-server 2>/dev/null

# --- bvlua train --debug: the prompt opens on the error, with the trainer's state ---
cat >"$TMP/trainer.lua" <<'LUA'
return function(config, workdir, run)
  run.state = {config = config, params = {["head/kernel"] = bv.ones({2, 2})}, step = 7,
               batch = {image = bv.zeros({1, 2, 2, 3})}}
  error("training_loss became nan or inf somewhere within steps [6, 7]", 0)
end
LUA
cat >"$TMP/cfg.lua" <<LUA
return {trainer = "$TMP/trainer.lua", lr = 0.5}
LUA
start "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/w" --debug
wait_for "the training failed at step 7: training_loss became nan" "--debug banner"
type_line 'step * 10'
wait_for "70" "step is a global"
type_line 'params'
wait_for "1 tensor, 4 parameters" "params print as a tree"
type_line 'config.lr'
wait_for "0.5" "config is a global"
wait_prompt
keys C-d
rc=$(exit_code)
checks=$((checks + 1))
[ "$rc" = "1" ] || fail "--debug exits with 1 after the prompt (got '$rc')"

# Without a terminal, the same prompt reads stdin.
printf 'print("err is", err)\nprint(batch.image:shape()[4])\n' |
  "$BVLUA" train "$TMP/cfg.lua" --workdir "$TMP/w" --debug >"$TMP/out" 2>"$TMP/err"
rc=$?
checks=$((checks + 1))
[ "$rc" -eq 1 ] || fail "--debug with piped input exits with 1 (got $rc)"
checks=$((checks + 1))
grep -qF "err is	training_loss became nan" "$TMP/out" || fail "err holds the message"
checks=$((checks + 1))
grep -qx "3" "$TMP/out" || fail "batch is a global"
checks=$((checks + 1))
grep -qF "bvlua train: training_loss became nan" "$TMP/err" || fail "the error goes to stderr"

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
