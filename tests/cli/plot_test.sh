#!/usr/bin/env bash
# `bvlua plot`: the tutorial's panels from two runs' metrics files (written here as a trainer
# would), overlaid in a colour per run: the PNG's pixels hold both runs' colours inside the
# first panel's plot area and in the legend under the panels; SVG too; --x/--y panels; errors
# name what is wrong.
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
  bv.fs.write_file('$TMP/runs/' .. name .. '/big_vision_metrics.txt', table.concat(lines, '\n') .. '\n')
end" || fail "writing the metrics files"

"$BVLUA" plot "$TMP/runs" -o "$TMP/p.png" >"$TMP/out" 2>&1 || fail "plot exited with $?"
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
[ $? -eq 1 ] && grep -q "no line of the metrics holds both 'step' and 'nothing'" "$TMP/out" \
  || fail "an unknown key"
echo OK
