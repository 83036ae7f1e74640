#!/usr/bin/env bash
# `bvlua plot`: the tutorial's panels from two runs' metrics files (written here as a trainer
# would), overlaid in a colour per run: the PNG's pixels hold both runs' colours inside the
# first panel's plot area and in the legend under the panels; SVG too; --x/--y panels; errors
# name what is wrong. With -v it prints what it drew, which the rest checks: the step-0
# evaluation (a line without epoch) is drawn at epoch 0; a constant is drawn around its value;
# a series of one point has a dot in the legend too; a typo in a key, or a run that has logged
# nothing, is an error naming it; a sweep's first run that has not evaluated yet does not decide
# the eval metric.
# Usage: plot_test.sh path/to/bvlua
set -u
BVLUA=$(realpath "${1:?usage: plot_test.sh path/to/bvlua}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; cat "$TMP/out" 2>/dev/null; exit 1; }

"$BVLUA" -e "
for r, name in ipairs({'a', 'b'}) do
  bv.fs.mkdirs('$TMP/runs/' .. name)
  local lines = {}
  for step = 1, 20 do
    local row = {string.format('\"step\": %d, \"epoch\": %g, \"training_loss\": %g, '
      .. '\"img/sec/core\": %g, \"z/secs/update0\": 0.1', step, step / 5, 2 / (step + r), 50 + r * step)}
    if step % 5 == 0 then row[2] = string.format('\"eval/acc/prec@1\": %g', 0.3 + 0.02 * step * r) end
    lines[#lines + 1] = '{' .. table.concat(row, ', ') .. '}'
  end
  -- The trainer's initial evaluation: step 0, before its clock has an epoch.
  if name == 'a' then table.insert(lines, 1, '{\"step\": 0, \"eval/acc/prec@1\": 0.31}') end
  bv.fs.write_file('$TMP/runs/' .. name .. '/big_vision_metrics.txt', table.concat(lines, '\n') .. '\n')
end" || fail "writing the metrics files"

"$BVLUA" plot "$TMP/runs" -o "$TMP/p.png" -v >"$TMP/out" 2>&1 || fail "plot exited with $?"
# The step-0 evaluation is the first point of a's eval series, at epoch 0.
grep -q "series eval/acc/prec@1 of a: 5 points, epoch 0 to 4$" "$TMP/out" \
  || fail "the step-0 evaluation is not drawn at epoch 0"
# Panel 1 spans x in [0, W/3): count the pixels of each run's colour (tab10 blue and orange).
"$BVLUA" -e "
local img = bv.image.read('$TMP/p.png')
local h, w = img:shape()[1], img:shape()[2]
assert(w > 1000 and h > 300, 'the figure is ' .. w .. 'x' .. h)
local px = img:narrow(2, 1, w // 3):to('int64')
local function count(r, g, b)
  local d = (px:select(3, 1) - r):abs() + (px:select(3, 2) - g):abs() + (px:select(3, 3) - b):abs()
  return (d:lt(30)):to('int64'):sum():item()
end
local blue, orange = count(31, 119, 180), count(255, 127, 14)
print('blue', blue, 'orange', orange)
assert(blue > 300 and orange > 300, 'both runs are drawn in the first panel')
local white = count(255, 255, 255)
assert(white > 0.5 * h * (w // 3), 'mostly white background')
-- Under the panels (400 px high), a legend strip names each run in its colour.
assert(h > 400, 'no legend strip under the panels: the figure is ' .. h .. ' high')
px = img:narrow(1, 401, h - 400):to('int64')
assert(count(31, 119, 180) > 20 and count(255, 127, 14) > 20, 'both runs in the legend strip')" >"$TMP/out" 2>&1 \
  || fail "the PNG's pixels"

"$BVLUA" plot "$TMP/runs/a" -o "$TMP/p.svg" --x step --y training_loss --x epoch --y img/sec/core \
  >"$TMP/out" 2>&1 || fail "svg exited with $?"
grep -q '<svg' "$TMP/p.svg" || fail "not an SVG"

"$BVLUA" plot "$TMP/runs" -o "$TMP/p.gif" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "must end in .png or .svg" "$TMP/out" || fail "a .gif"
"$BVLUA" plot "$TMP/runs" --y step >"$TMP/out" 2>&1
[ $? -eq 2 ] && grep -q "needs an --x KEY before it" "$TMP/out" || fail "--y without --x"
"$BVLUA" plot "$TMP/runs" -o "$TMP/q.png" --x step --y nothing >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "y 'nothing' is not in the 2 runs' big_vision_metrics.txt (its keys: " \
  "$TMP/out" || fail "an unknown key"

# A run of 40 steps: its eval metric logged once (at the end), two constants (0 and 0.25).
"$BVLUA" -e "
bv.fs.mkdirs('$TMP/solo')
local lines = {}
for step = 1, 40 do
  lines[step] = string.format('{\"step\": %d, \"epoch\": %g, \"training_loss\": %g, '
    .. '\"zero\": 0, \"quarter\": 0.25%s}', step, step / 10, 1 / step,
    step == 40 and ', \"eval/acc/prec@1\": 0.5' or '')
end
bv.fs.write_file('$TMP/solo/big_vision_metrics.txt', table.concat(lines, '\n') .. '\n')" \
  || fail "writing the solo run"

# The lone eval point's legend entry shows the dot it is drawn with (a series of 40 points does
# not); the pixels just above its legend sample's line are the dot's blue.
"$BVLUA" plot "$TMP/solo" -o "$TMP/solo.png" -v >"$TMP/out" 2>&1 || fail "solo exited with $?"
grep -q "series eval/acc/prec@1 of .*solo: 1 point, epoch 4 to 4$" "$TMP/out" \
  || fail "the lone point"
grep -q "legend 'training_loss' at [0-9]*,[0-9]*$" "$TMP/out" || fail "40 points are marked"
at=$(sed -n "s|^  legend 'eval/acc/prec@1' at \([0-9]*\),\([0-9]*\), marked$|\1, \2|p" "$TMP/out")
[ -n "$at" ] || fail "the lone point's legend entry is not marked"
"$BVLUA" -e "
local x, y = $at
local px = bv.image.read('$TMP/solo.png'):to('int64')
local blue = 0
for dx = -1, 1 do  -- 3 px above the sample's 2 px line: inside the dot only
  local p = px[y - 3 + 1][x + dx + 1]
  local d = math.abs(p[1]:item() - 31) + math.abs(p[2]:item() - 119) + math.abs(p[3]:item() - 180)
  if d < 60 then blue = blue + 1 end
end
assert(blue > 0, 'no dot on the legend sample at ' .. x .. ',' .. y)" >"$TMP/out" 2>&1 \
  || fail "the legend's dot"

# A constant is drawn around its value (0 not from -1 to 1) with ticks that tell apart.
"$BVLUA" plot "$TMP/solo" -o "$TMP/c.png" -v --x step --y zero --x step --y quarter \
  >"$TMP/out" 2>&1 || fail "constants exited with $?"
axis() {  # KEY VALUE WIDTH: the y axis holds VALUE, is at most WIDTH wide, its ticks differ
  awk -v key="$1" -v v="$2" -v w="$3" '$1 == "y" && $2 == key ":" {
      found = 1; lo = $3 + 0; hi = $5 + 0
      if (!(lo < v && v < hi && hi - lo <= w)) { print key " is drawn from " lo " to " hi; exit 1 }
      for (i = 7; i <= NF; i++) if (seen[$i]++) { print key ": the tick " $i " twice"; exit 1 }
    }
    END { if (!found) { print "no y axis for " key; exit 1 } }' "$TMP/out" || fail "the axis of $1"
}
axis zero 0 0.2
axis quarter 0.25 0.05

# A typo in --metric, --x or --y: an error naming it and the keys meant; nothing is drawn.
"$BVLUA" plot "$TMP/runs" -o "$TMP/q.png" --metric eval/acc/prec@l >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "metric 'eval/acc/prec@l' is not in .*(did you mean 'eval/acc/prec@1'?)" \
  "$TMP/out" && [ ! -e "$TMP/q.png" ] || fail "a --metric typo"
"$BVLUA" plot "$TMP/runs/a" -o "$TMP/q.png" --metric eval/acx >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "runs/a/big_vision_metrics.txt (did you mean 'eval/acc/prec@1'?)" \
  "$TMP/out" || fail "a typo in a part of --metric"
"$BVLUA" plot "$TMP/runs" -o "$TMP/q.png" --x stp --y training_loss >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "x 'stp' is not in the 2 runs' .*(did you mean 'step'?)" "$TMP/out" \
  || fail "an --x typo"

# A run that has logged nothing (or no training step): an error naming its file; inside a
# directory, it is skipped.
mkdir -p "$TMP/runs/c"
: >"$TMP/runs/c/big_vision_metrics.txt"
"$BVLUA" plot "$TMP/runs/c" -o "$TMP/q.png" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "runs/c/big_vision_metrics.txt holds no metrics" "$TMP/out" \
  || fail "a run without metrics"
mkdir -p "$TMP/d"
echo '{"step": 0, "eval/acc/prec@1": 0.3}' >"$TMP/d/big_vision_metrics.txt"
"$BVLUA" plot "$TMP/d" -o "$TMP/q.png" >"$TMP/out" 2>&1
[ $? -eq 1 ] && grep -q "no line of .*d/big_vision_metrics.txt holds training_loss and epoch" \
  "$TMP/out" || fail "a run with its initial evaluation only"
"$BVLUA" plot "$TMP/runs" -o "$TMP/q.png" >"$TMP/out" 2>&1 && [ -e "$TMP/q.png" ] \
  && grep -q "skipping .*runs/c: its big_vision_metrics.txt holds no metrics yet" "$TMP/out" \
  || fail "a run without metrics among others"

# A sweep whose first run has not evaluated yet: the eval metric is the one the second logged
# (as `bvlua runs` picks it), not training_loss; the runs are named below the directory they
# share.
mkdir -p "$TMP/sweep/lr1" "$TMP/sweep/lr2"
printf '%s\n' '{"step": 1, "epoch": 0.5, "training_loss": 1.0}' \
  '{"step": 2, "epoch": 1, "training_loss": 0.9}' >"$TMP/sweep/lr1/big_vision_metrics.txt"
printf '%s\n' '{"step": 1, "epoch": 0.5, "training_loss": 1.1}' \
  '{"step": 2, "epoch": 1, "training_loss": 0.8, "eval/acc/prec@1": 0.4}' \
  >"$TMP/sweep/lr2/big_vision_metrics.txt"
"$BVLUA" plot "$TMP/sweep" -o "$TMP/s.png" -v >"$TMP/out" 2>&1 || fail "sweep exited with $?"
grep -q "^panel 1: training loss and eval/acc/prec@1$" "$TMP/out" \
  && grep -q "^  series eval/acc/prec@1 of lr1: 0 points$" "$TMP/out" \
  && grep -q "^  series eval/acc/prec@1 of lr2: 1 point, epoch 1 to 1$" "$TMP/out" \
  || fail "the eval metric of a sweep whose first run has not evaluated"
echo OK
