-- scripts/gpu_check's comparisons and reports, run by the bvlua it built:
--   bvlua run scripts/gpu_check.lua compare RUNS RESULTS NUMBERS DEVICE
--   bvlua run scripts/gpu_check.lua speed RESULTS NUMBERS WORK DEVICE   (WORK: bf16 or train)
--   bvlua run scripts/gpu_check.lua report RESULTS NUMBERS OUT MODE
-- compare reads the runs' workdirs under RUNS (metrics files, checkpoints, the profiler's trace,
-- their printed notes) and appends one JSON line per check to RESULTS (as the script's own
-- `record`); it exits 1 when a correctness check failed. speed turns the timed steps in NUMBERS
-- into rows; report writes OUT/gpu_check.json and OUT/gpu_check.txt from RESULTS.
local json = require "bv.json"
local metrics = require "bv.metrics"

local verb = arg[1]
local failed = false

local function record(results, name, verdict, detail)
  local f = assert(io.open(results, "a"))
  f:write(json.encode({check = name, verdict = verdict, detail = detail}), "\n")
  f:close()
  print(string.format("gpu_check: [%s] %s: %s", verdict, name, detail))
  if verdict == "fail" then failed = true end
end

-- A file's text, or nil when the run did not write it.
local function read_file(path)
  return bv.fs.exists(path) and bv.fs.read_file(path) or nil
end

-- metric -> {step -> value} of a workdir's metrics file, or nil when the run wrote none.
local function series(workdir, key)
  if not bv.fs.exists(workdir .. "/big_vision_metrics.txt") then return nil end
  local out = {}
  for _, row in ipairs(metrics.read(workdir .. "/big_vision_metrics.txt")) do
    if row[key] then out[row.step] = row[key] end
  end
  return out
end

-- The largest relative difference of b from a over a's steps up to `upto` (all when nil); nil
-- and a message when b lacks one of them.
local function max_rel(a, b, upto)
  local worst, n = 0, 0
  for step, v in pairs(a) do
    if not upto or step <= upto then
      if b[step] == nil then return nil, "step " .. step .. " missing" end
      worst = math.max(worst, math.abs(b[step] - v) / math.max(math.abs(v), 1e-12))
      n = n + 1
    end
  end
  return worst, n
end

-- Device against CPU: `key` at every logged step within the tolerances, each {upto = step
-- (nil: all), tol = relative}. Training is chaotic: a rounding difference in one step grows in
-- the next ones (measured on the fake device, whose only difference from the CPU is summation
-- order: 0 up to step 5, 1e-7 at step 6, 1e-3 at step 15 of bit_lines:quick), so the first
-- steps are held tight and the rest only against gross errors (another data order, a wrong
-- kernel).
local function compare_series(results, name, cpu_dir, dev_dir, key, tiers, want_n)
  local a, b = series(cpu_dir, key), series(dev_dir, key)
  if not a or not b then
    return record(results, name, "fail", "no metrics file in " .. (a and dev_dir or cpu_dir))
  end
  local parts, ok = {}, true
  for _, tier in ipairs(tiers) do
    local worst, n = max_rel(a, b, tier.upto)
    if not worst then return record(results, name, "fail", key .. ": " .. n) end
    if want_n and not tier.upto and n < want_n then
      return record(results, name, "fail", string.format("%s: %d values, want %d", key, n, want_n))
    end
    ok = ok and worst <= tier.tol
    parts[#parts + 1] = string.format("%s %.2e (tolerance %.0e)", tier.upto and
      ("steps 1-" .. tier.upto) or ("all " .. n .. " steps"), worst, tier.tol)
  end
  record(results, name, ok and "pass" or "fail",
         key .. ", largest relative difference: " .. table.concat(parts, "; "))
end

-- A resumed run ends with the uninterrupted one's parameters, bit for bit.
local function compare_checkpoints(results, name, whole, parts)
  local ok_a, a = pcall(bv.ckpt.load, whole)
  local ok_b, b = pcall(bv.ckpt.load, parts)
  if not (ok_a and ok_b) then
    return record(results, name, "fail", "no checkpoint: " .. tostring(ok_a and b or a))
  end
  local differ, total, worst = {}, 0, 0
  for key, t in pairs(a.tensors) do
    total = total + 1
    local u = b.tensors[key]
    if not u or not u:equal(t) then
      differ[#differ + 1] = key
      if u and u:shape()[1] == t:shape()[1] then
        worst = math.max(worst, (u:to("float64") - t:to("float64")):abs():max():item())
      end
    end
  end
  if a.step ~= b.step then
    return record(results, name, "fail", string.format("steps %s and %s", a.step, b.step))
  end
  table.sort(differ)
  record(results, name, #differ == 0 and "pass" or "fail",
         #differ == 0 and string.format("step %d: all %d tensors bit-identical", a.step, total)
           or string.format("%d of %d tensors differ (largest %.3g): %s", #differ, total, worst,
                            table.concat(differ, ", ", 1, math.min(#differ, 5))))
end

-- Host syncs per profiled step: CUDA runtime calls that wait for the GPU, inside each
-- ProfilerStep#N span of the trace.
local SYNC_CALLS = {cudaStreamSynchronize = true, cudaDeviceSynchronize = true,
                    cudaEventSynchronize = true, cudaMemcpy = true}

local function count_syncs(results, workdir, device)
  local dir = workdir .. "/profile"
  local trace
  for _, name in ipairs(bv.fs.exists(dir) and bv.fs.list(dir) or {}) do
    if name:match("%.pt%.trace%.json$") then trace = dir .. "/" .. name end
  end
  if not trace then return record(results, "host_syncs", "fail", "no trace under " .. dir) end
  local events = json.decode(read_file(trace)).traceEvents or {}
  local steps, syncs = {}, {}
  for _, e in ipairs(events) do
    local n = e.name and e.name:match("^ProfilerStep#(%d+)$")
    if n and e.dur then steps[#steps + 1] = {n = tonumber(n), from = e.ts, to = e.ts + e.dur} end
    if e.name and SYNC_CALLS[e.name] then syncs[#syncs + 1] = e end
  end
  table.sort(steps, function(x, y) return x.n < y.n end)
  local per_step, total, names = {}, 0, {}
  for _, s in ipairs(steps) do
    local c = 0
    for _, e in ipairs(syncs) do
      if e.ts >= s.from and e.ts <= s.to then
        c = c + 1
        names[e.name] = true
      end
    end
    per_step[#per_step + 1] = string.format("%d:%d", s.n, c)
    total = total + c
  end
  local which = {}
  for k in pairs(names) do which[#which + 1] = k end
  if #steps == 0 then return record(results, "host_syncs", "fail", "no ProfilerStep in " .. trace) end
  record(results, "host_syncs", total == 0 and "pass" or "warn",
         string.format("%d host syncs in %d profiled steps (step:count %s)%s%s", total, #steps,
                       table.concat(per_step, " "),
                       #which > 0 and "; calls: " .. table.concat(which, ", ") or "",
                       device == "fake" and "; the fake device makes no CUDA calls" or ""))
end

local function peak_memory(results, name, workdir)
  local peaks = series(workdir, "y/devmem/dev0/peak_bytes_in_use")
  if not peaks then return record(results, name, "fail", "no metrics in " .. workdir) end
  local steps = {}
  for step in pairs(peaks) do steps[#steps + 1] = step end
  table.sort(steps)
  local parts = {}
  for _, s in ipairs(steps) do parts[#parts + 1] = string.format("%d:%.1f", s, peaks[s] / 2^20) end
  if #steps == 0 then return record(results, name, "fail", "no y/devmem in " .. workdir) end
  record(results, name, "info", "peak MiB by step " .. table.concat(parts, " "))
end

-- The SDPA kernels the attention calls chose (core/notes.h posts one NOTE per choice).
local function sdpa_notes(results, out_file)
  local seen, list = {}, {}
  for line in (read_file(out_file) or ""):gmatch("[^\n]+") do
    if line:find("SDPA", 1, true) and not seen[line] then
      seen[line] = true
      list[#list + 1] = line
    end
  end
  record(results, "sdpa_kernels", "info", #list > 0 and table.concat(list, " | ")
         or "no SDPA note (none is posted off CUDA)")
end

local function compare(runs, results, numbers, device)
  local d = function(name) return runs .. "/" .. name end
  compare_series(results, "lines_losses_fp32", d("lines_cpu"), d("lines_dev"), "training_loss",
                 {{upto = 5, tol = 1e-4}, {tol = 2e-2}}, 20)
  compare_series(results, "lines_losses_tf32", d("lines_cpu"), d("lines_dev_tf32"),
                 "training_loss", {{upto = 5, tol = 1e-2}, {tol = 5e-2}}, 20)
  compare_checkpoints(results, "resume_bit_identical", d("whole_dev"), d("parts_dev"))
  local resumed = read_file(d("parts_dev.out")) or ""
  record(results, "resume_from_step_10", resumed:find("Resumed from .* at step 10") and "pass"
         or "fail", "the second part resumed at step 10")
  compare_series(results, "paligemma_losses", d("pg_cpu"), d("pg_dev"), "training_loss",
                 {{tol = 1e-4}}, 3)
  compare_series(results, "paligemma_pplx", d("pg_cpu"), d("pg_dev"), "val/pplx/avg",
                 {{tol = 1e-4}})
  local acc_cpu, acc_dev = series(d("pg_cpu"), "val/vqa/acc"), series(d("pg_dev"), "val/vqa/acc")
  record(results, "paligemma_vqa_acc", "info", string.format("step 3: cpu %s, device %s",
         acc_cpu and acc_cpu[3], acc_dev and acc_dev[3]))
  local loss = series(d("pg_dev_30"), "training_loss") or {}
  record(results, "paligemma_loss_falls", (loss[1] and loss[30] and loss[30] < 0.5 * loss[1])
         and "pass" or "fail", string.format("training_loss %s at step 1, %s at 30", loss[1], loss[30]))
  for _, s in ipairs({"pg_dev_30", "pg_temperature", "pg_nucleus", "pg_best_of_n"}) do
    local step = s == "pg_dev_30" and 30 or 2
    local text = read_file(string.format("%s/vqa_val_%d.json", d(s), step)) or ""
    record(results, s .. "_answers", text:find('"answer"', 1, true) and "pass" or "fail",
           string.format("%s/vqa_val_%d.json holds answers", s, step))
  end
  count_syncs(results, d("whole_dev"), device)
  peak_memory(results, "peak_memory_lines", d("lines_dev"))  -- logged at every step
  peak_memory(results, "peak_memory_paligemma", d("pg_dev_30"))
  sdpa_notes(results, d("pg_dev_30.out"))
end

-- H100 SXM and H200: 989 TFLOP/s dense bf16 (NVIDIA's data sheets; the lent machines' cards).
local PEAK_BF16 = 989e12

-- One row: steps/s of bvlua and its peers (eager, torch.compile) from NUMBERS/<prefix>_<side>,
-- the FLOPs of a step from <prefix>_flops (the peer's count), MFU = FLOPs x steps/s / peak.
local function speed_row(results, numbers, name, prefix, what)
  local function words(file)
    local t = {}
    for w in (read_file(numbers .. "/" .. file) or ""):gmatch("%S+") do t[#t + 1] = tonumber(w) end
    return t
  end
  local flops = words(prefix .. "_flops")[1]
  local parts = {}
  for _, side in ipairs({"bvlua", "eager", "compile"}) do
    local rate = words(prefix .. "_" .. side)[1]
    if rate then
      parts[#parts + 1] = string.format("%s %.2f steps/s%s", side, rate, flops and
        string.format(" (MFU %.2f%%)", 100 * flops * rate / PEAK_BF16) or "")
    else
      parts[#parts + 1] = side .. " did not run"
    end
  end
  local ours, eager = words(prefix .. "_bvlua")[1], words(prefix .. "_eager")[1]
  record(results, name, ours and "info" or "warn", string.format(
         "%s: %s%s; %s; MFU against 989 TFLOP/s bf16", what, table.concat(parts, ", "),
         (ours and eager) and string.format("; bvlua/eager %.2fx", ours / eager) or "",
         flops and string.format("%.3g FLOP/step", flops) or "no FLOP count"))
end

local function speed(results, numbers, work, device)
  local how = work == "bf16" and "bf16 autocast" or "float32"
  local where = device == "fake" and " (rehearsal: smaller, bvlua on the fake device, peers on "
                .. "the CPU; MFU means nothing)" or ""
  speed_row(results, numbers, "speed_vit", "vit",
            (device == "fake" and "ViT-Ti/16 32 batch 8" or "ViT-B/16 224 batch 64") .. ", "
            .. how .. ", SGD" .. where)
  speed_row(results, numbers, "speed_paligemma_step", "pg_step",
            "tiny PaliGemma train step, batch 32, " .. how .. ", Adam" .. where)
  speed_row(results, numbers, "speed_paligemma_decode", "pg_decode",
            "tiny PaliGemma greedy decode of 8 tokens, batch 32 (a step = a whole decode)" .. where)
end

local function report(results, numbers, out, mode)
  local rows, counts = {}, {}
  for line in (read_file(results) or ""):gmatch("[^\n]+") do
    local row = json.decode(line)
    rows[#rows + 1] = row
    counts[row.verdict] = (counts[row.verdict] or 0) + 1
  end
  local verdict = (counts.fail or 0) > 0 and "fail" or "pass"
  local doc = {mode = mode, date = os.date("!%Y-%m-%d %H:%M UTC"), verdict = verdict,
               counts = counts, checks = rows}
  bv.fs.write_file(out .. "/gpu_check.json", json.encode(doc, {indent = 1}) .. "\n")
  local lines = {string.format("bvlua GPU check (%s), %s: %s", mode, doc.date, verdict:upper())}
  for _, row in ipairs(rows) do
    lines[#lines + 1] = string.format("%-5s %-24s %s", row.verdict, row.check, row.detail)
  end
  bv.fs.write_file(out .. "/gpu_check.txt", table.concat(lines, "\n") .. "\n")
  print(table.concat(lines, "\n"))
end

if verb == "compare" then
  compare(arg[2], arg[3], arg[4], arg[5])
elseif verb == "speed" then
  speed(arg[2], arg[3], arg[4], arg[5])
elseif verb == "report" then
  report(arg[2], arg[3], arg[4], arg[5])
else
  error("gpu_check.lua: compare, speed or report (see the top of this file), got " .. tostring(verb))
end
os.exit(failed and 1 or 0)
