-- scripts/bench's driver (run by bvlua; scripts/bench installs the peers first). Every number of
-- scripts/bench_results/README.md comes from here: each side measured in its own process, the sides
-- alternating ROUNDS times and compared by their medians, printed as tables and written as JSON.
--   bvlua run scripts/bench.lua [SECTION...] [--json FILE] [--compare OLD.json] [--rounds N]
-- SECTIONs (default: all but sharding, optim and attach):
--   gemm      the machine's peak as libtorch reaches it: a 2048^3 matmul, float32 and bfloat16
--   train     a training step of each model (MODELS) against PyTorch eager and torch.compile on
--             the same wheel and threads, float32 and bf16 autocast (MODES); GFLOP/s from the
--             step's FLOPs (PyTorch's FlopCounterMode) over each side's step time
--   eval      the forward pass alone (an evaluator's batch), the same peers
--   paligemma the tiny PaliGemma's train step and greedy decoding with a KV cache, the same peers
--   pp        the input pipeline against PIL, torchvision and tf.data, on one core and on all
--   tfds      reading a TFDS dataset (prepared once by tensorflow-datasets itself) and its pp into
--             batches, as an evaluator does, against tfds + tf.data on the same files and threads
--   startup   `bvlua --version`, and `bvlua train configs/bit_lines.lua:quick` from its start
--             to the end of its first training step (its data drawn beforehand)
--   sharding  scripts/bench_sharding.lua's three strategies in 2 processes
--   optim     one optimizer update of the tiny PaliGemma's and ViT-B/16's parameters, the fused
--             update against the plain per-parameter one it replaced (OPTIM_CASES)
--   attach    `bvlua attach`'s listener (one poll() per step) against --no-attach: a tiny
--             ViT's training steps/s (a step of a few ms, where a cost would show), the two
--             alternating, and the per-step check alone
-- Environment: MODELS ("bit26:224:32:2 ..." as model:res:batch:steps), MODES ("train bf16"),
-- COMPILE=0 (no torch.compile sides: their compiles take minutes), COMPILE_ROUNDS (how many of
-- the rounds run the compiled sides too; default all), BENCH_DIR (the JPEGs), BENCH_TFDS_DIR (where
-- the tfds section's dataset is prepared; default .bench/tfds).
local json = require "bv.json"

local BVLUA = os.getenv("BVLUA") or "build/bvlua"
local PY = os.getenv("BV_PYTHON") or ".venv/bin/python"
local TF_PY = ".bench/tf/bin/python"
local THREADS = bv.threads()

local sections, json_path, compare_path, rounds = {}, nil, nil, 3
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--json" then json_path, i = arg[i + 1], i + 1
    elseif a == "--compare" then compare_path, i = arg[i + 1], i + 1
    elseif a == "--rounds" then rounds, i = math.tointeger(tonumber(arg[i + 1])), i + 1
    elseif a:sub(1, 1) == "-" then error("bench: unknown option " .. a, 0)
    else sections[#sections + 1] = a end
    i = i + 1
  end
  if not rounds or rounds < 1 then error("bench: --rounds wants a whole number >= 1", 0) end
  if #sections == 0 then
    sections = {"gemm", "train", "eval", "paligemma", "pp", "tfds", "startup"}
  end
end

-- The output of a shell command, trimmed; an error naming the command when it fails.
local function sh(cmd)
  local f = assert(io.popen(cmd .. " 2>/tmp/bvlua_bench.err"))
  local out = f:read("a")
  local ok, _, code = f:close()
  if not ok then
    local err = io.open("/tmp/bvlua_bench.err"):read("a")
    error(string.format("bench: `%s` failed (exit %s):\n%s", cmd, tostring(code), err), 0)
  end
  return (out:gsub("%s+$", ""))
end
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function words(s)
  local w = {}
  for x in s:gmatch("%S+") do w[#w + 1] = x end
  return w
end
local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[(#s + 1) // 2]
end
local function ratio(a, b) return (a and b and b > 0) and a / b or nil end
local function fmt(x, pattern)
  if x == nil then return "-" end
  return string.format(pattern or "%.3g", x)
end

local result = {date = os.date("!%Y-%m-%d %H:%M UTC"), threads = THREADS, rounds = rounds}

-- The machine and the versions of everything measured.
local function machine()
  local cpu = sh("sed -n 's/^model name\\s*: //p' /proc/cpuinfo | head -1")
  local flags = sh("grep -m1 '^flags' /proc/cpuinfo")
  result.machine = {cpu = cpu, cores = tonumber(sh("nproc")), threads = THREADS,
                    avx512_bf16 = flags:find("avx512_bf16") ~= nil,
                    memory_gib = tonumber(sh("awk '/MemTotal/ {print $2}' /proc/meminfo")) / 2^20}
  local function py_version(py, module)
    local ok, out = pcall(sh, py .. " -c " .. q("import " .. module .. "; print(" .. module
                                                 .. ".__version__)"))
    return ok and out or nil
  end
  local has_git, commit = pcall(sh, "git rev-parse --short HEAD")
  result.versions = {
    bvlua = bv.version, commit = has_git and commit or nil,
    libtorch = bv.torch_version, torch = py_version(PY, "torch"),
    torchvision = py_version(PY, "torchvision"), pillow = py_version(PY, "PIL"),
    tensorflow = py_version(TF_PY, "tensorflow"),
    tensorflow_datasets = py_version(TF_PY, "tensorflow_datasets"),
  }
  print(string.format("%s: %s, %d cores (%d threads used), %.0f GiB%s", result.date, cpu,
                      result.machine.cores, THREADS, result.machine.memory_gib,
                      result.machine.avx512_bf16 and ", AVX-512 BF16" or ""))
  local v = result.versions
  print(string.format("bvlua %s (%s) on libtorch %s; peers: torch %s, torchvision %s, "
                      .. "Pillow %s, TensorFlow %s, tensorflow-datasets %s", v.bvlua, v.commit,
                      v.libtorch, v.torch, v.torchvision, v.pillow,
                      v.tensorflow or "(not installed)",
                      v.tensorflow_datasets or "(not installed)"))
end

local SECTIONS = {}

function SECTIONS.gemm()
  local n = 2048
  result.gemm = {}
  print(string.format("\ngemm: %d x %d x %d matmul, GFLOP/s (the best of 5, or of what ran "
                      .. "in 10 s)", n, n, n))
  for _, dtype in ipairs({"float32", "bfloat16"}) do
    local a, b = bv.randn({n, n}):to(dtype), bv.randn({n, n}):to(dtype)
    local best, start = math.huge, bv.clock()
    for i = 0, 5 do  -- the first a warm-up, unless it is all there is time for
      local t = bv.clock()
      a:matmul(b)
      if i > 0 or bv.clock() - start > 10 then best = math.min(best, bv.clock() - t) end
      if bv.clock() - start > 10 then break end
    end
    result.gemm[dtype] = 2 * n ^ 3 / best * 1e-9
    print(string.format("  %-9s %8.1f", dtype, result.gemm[dtype]))
  end
end

local JEMALLOC = sh("ls /usr/lib/*-linux-gnu/libjemalloc.so.2 2>/dev/null | head -1")
local JE_CONF = sh("sed -n 's/.*malloc_conf = \"\\(.*\\)\";/\\1/p' bindings/malloc_conf.cpp")

-- One row per case: case.label (model, res, batch, mode), case.ours (bvlua's command) and
-- case.peer(kind) (the peer's command for kind eager, compile or flops), each printing
-- "steps/s faults-per-step sys-share"; the peers run with glibc's malloc (PyTorch's default)
-- and with bvlua's jemalloc and settings preloaded, and the ratios are against the faster.
local function measure_rows(work, cases)
  local compile = os.getenv("COMPILE") ~= "0"
  local compile_rounds = math.tointeger(tonumber(os.getenv("COMPILE_ROUNDS") or "")) or rounds
  local rows = {}
  print(string.format("\n%s: steps/s (median of %d; compiled: of %d), GFLOP/s; flt = minor page faults per "
                      .. "step, sys = the kernel's share of CPU time; x = bvlua / the faster "
                      .. "of the peer with and without jemalloc", work, rounds,
                      compile and math.min(rounds, compile_rounds) or 0))
  print(string.format("%-8s %4s %5s %6s | %7s %7s %6s %5s | %7s %7s %6s | %7s %7s | %7s %9s",
                      "model", "res", "batch", "mode", "bvlua", "GFLOP/s", "flt", "sys",
                      "eager", "eag+je", "flt", "compile", "cmp+je", "x_eager", "x_compile"))
  for _, case in ipairs(cases) do
    local name, res, batch, mode = table.unpack(case.label)
    local flops = tonumber(sh(case.peer("flops")))
    local function peer(kind, je)
      local env = je and string.format("LD_PRELOAD=%s MALLOC_CONF=%s ", JEMALLOC, q(JE_CONF)) or ""
      return words(sh(env .. case.peer(kind)))
    end
    local runs = {ours = {}, eager = {}, eager_je = {}, compile = {}, compile_je = {}}
    for round = 1, rounds do
      local compile = compile and round <= compile_rounds
      runs.ours[#runs.ours + 1] = words(sh(case.ours))
      runs.eager[#runs.eager + 1] = peer("eager", false)
      runs.eager_je[#runs.eager_je + 1] = peer("eager", true)
      if compile then
        runs.compile[#runs.compile + 1] = peer("compile", false)
        runs.compile_je[#runs.compile_je + 1] = peer("compile", true)
      end
    end
    local function side(r)
      if #r == 0 then return nil end
      local col = function(i)
        local xs = {}
        for k, w in ipairs(r) do xs[k] = tonumber(w[i]) end
        return median(xs)
      end
      local rate = col(1)
      return {steps_s = rate, faults_per_step = col(2), sys_share = col(3),
              gflops = flops * rate * 1e-9}
    end
    local row = {model = name, res = tonumber(res), batch = tonumber(batch), mode = mode,
                 flops_per_step = flops, bvlua = side(runs.ours), eager = side(runs.eager),
                 eager_je = side(runs.eager_je), compile = side(runs.compile),
                 compile_je = side(runs.compile_je)}
    local function best(a, b) return math.max(a and a.steps_s or 0, b and b.steps_s or 0) end
    row.x_eager = ratio(row.bvlua.steps_s, best(row.eager, row.eager_je))
    row.x_compile = compile and ratio(row.bvlua.steps_s, best(row.compile, row.compile_je)) or nil
    rows[#rows + 1] = row
    local function r(s) return s and s.steps_s end
    print(string.format("%-8s %4s %5s %6s | %7s %7s %6s %5s | %7s %7s %6s | %7s %7s | %6sx %8sx",
                        name, res, batch, mode, fmt(r(row.bvlua)), fmt(row.bvlua.gflops, "%.1f"),
                        fmt(row.bvlua.faults_per_step, "%d"), fmt(row.bvlua.sys_share, "%.2f"),
                        fmt(r(row.eager)), fmt(r(row.eager_je)),
                        fmt(row.eager.faults_per_step, "%d"), fmt(r(row.compile)),
                        fmt(r(row.compile_je)), fmt(row.x_eager, "%.2f"),
                        fmt(row.x_compile, "%.2f")))
  end
  return rows
end

-- The train and eval cases: scripts/bench_train.lua against scripts/bench_train_peer.py.
local function model_cases(modes)
  local cases = {}
  for _, m in ipairs(words(os.getenv("MODELS") or
                           "bit26:224:32:2 vits16:224:32:2 vitb16:224:8:2 vitti16:64:32:10")) do
    local name, res, batch, steps = m:match("^(%w+):(%d+):(%d+):(%d+)$")
    if not name then error("bench: MODELS entry '" .. m .. "' is not model:res:batch:steps", 0) end
    local args = table.concat({name, res, batch, steps}, " ")
    for _, mode in ipairs(modes) do
      cases[#cases + 1] = {
        label = {name, res, batch, mode},
        ours = string.format("%s --threads %d run scripts/bench_train.lua %s %s", BVLUA, THREADS,
                             args, mode),
        peer = function(kind)
          return string.format("%s scripts/bench_train_peer.py %s %d %s %s", PY, args, THREADS,
                               kind, mode)
        end}
    end
  end
  return cases
end

function SECTIONS.train()
  result.train = measure_rows("train", model_cases(words(os.getenv("MODES") or "train bf16")))
end
function SECTIONS.eval() result.eval = measure_rows("eval", model_cases({"eval"})) end

-- The tiny PaliGemma (configs/paligemma.lua:variant=tiny's model, 64 px, batch 32, text 8):
-- scripts/bench_paligemma.lua against scripts/bench_paligemma_peer.py, a train step (Adam) and a
-- whole greedy decode of 8 tokens with a KV cache; the train step also under bf16 autocast.
function SECTIONS.paligemma()
  local cases = {}
  for _, work in ipairs({{"train", 10}, {"bf16", 10}, {"decode", 10}}) do
    local w, steps = work[1], work[2]
    cases[#cases + 1] = {
      label = {"pg_tiny", 64, 32, w},
      ours = string.format("%s --threads %d run scripts/bench_paligemma.lua %s %d", BVLUA,
                           THREADS, w, steps),
      peer = function(kind)
        return string.format("%s scripts/bench_paligemma_peer.py %s %d %d %s", PY, w, steps,
                             THREADS, kind)
      end}
  end
  result.paligemma = measure_rows("paligemma", cases)
end

function SECTIONS.pp()
  local dir = os.getenv("BENCH_DIR") or "/tmp/bvlua_bench_jpegs"
  if not bv.fs.exists(dir .. "/files.jsonl") then
    sh(string.format("%s run scripts/bench_pp.lua make %s 300", BVLUA, q(dir)))
  end
  local PP = {resize = "decode|resize(224)|value_range(-1, 1)",
              inception = "decode|inception_crop(224)|flip_lr|value_range(-1, 1)"}
  local has_tf = bv.fs.exists(TF_PY)
  result.pp = {}
  print(string.format("\npp: images/s through the input pipeline (300 generated 500x375 JPEGs, "
                      .. "the median of %d), x = bvlua / peer", rounds))
  print(string.format("%-10s %5s | %8s %8s %11s %8s | %6s %6s %8s", "task", "cores", "bvlua",
                      "PIL", "torchvision", "tf.data", "x_PIL", "x_tv", "x_tfdata"))
  for _, task in ipairs({"resize", "inception"}) do
    for _, cores in ipairs(THREADS > 1 and {1, THREADS} or {1}) do
      local runs = {ours = {}, pil = {}, tv = {}, tf = {}}
      for _ = 1, rounds do
        table.insert(runs.ours, tonumber(sh(string.format("%s --threads 1 run scripts/bench_pp.lua run %s %s %d",
                                                          BVLUA, q(dir), q(PP[task]), cores))))
        table.insert(runs.pil, tonumber(sh(string.format("%s scripts/bench_pp_peer.py %s %s pil %d",
                                                         PY, q(dir), task, cores))))
        table.insert(runs.tv, tonumber(sh(string.format("%s scripts/bench_pp_peer.py %s %s torchvision %d",
                                                        PY, q(dir), task, cores))))
        if has_tf then
          table.insert(runs.tf, tonumber(sh(string.format("%s scripts/bench_pp_tf.py %s %s %d",
                                                          TF_PY, q(dir), task, cores))))
        end
      end
      local row = {task = task, cores = cores, bvlua = median(runs.ours), pil = median(runs.pil),
                   torchvision = median(runs.tv), tfdata = has_tf and median(runs.tf) or nil}
      row.x_pil, row.x_torchvision = ratio(row.bvlua, row.pil), ratio(row.bvlua, row.torchvision)
      row.x_tfdata = ratio(row.bvlua, row.tfdata)
      result.pp[#result.pp + 1] = row
      print(string.format("%-10s %5d | %8.1f %8.1f %11.1f %8s | %5.2fx %5.2fx %7sx", task, cores,
                          row.bvlua, row.pil, row.torchvision, fmt(row.tfdata, "%.1f"), row.x_pil,
                          row.x_torchvision, fmt(row.x_tfdata, "%.2f")))
    end
  end
end

-- The tfds section's dataset: lines_tfds_bench, TFDS_EXAMPLES JPEGs of TFDS_PX x TFDS_PX in
-- TFDS_SHARDS shards, prepared by tensorflow-datasets (scripts/make_tfds_fixture.py --bench) once,
-- under a directory named after its sizes.
local TFDS_EXAMPLES, TFDS_PX, TFDS_SHARDS, TFDS_PASSES = 4096, 256, 8, 2
local function tfds_dataset()
  local dir = string.format("%s/%dx%dpx-%dshards", os.getenv("BENCH_TFDS_DIR") or ".bench/tfds",
                            TFDS_EXAMPLES, TFDS_PX, TFDS_SHARDS)
  if not bv.fs.exists(dir .. "/lines_tfds_bench/1.0.0/dataset_info.json") then
    print(string.format("tfds: preparing lines_tfds_bench in %s with tensorflow-datasets "
                        .. "(once; about a minute)", dir))
    sh(string.format("%s scripts/make_tfds_fixture.py --bench --examples %d --size %d --shards %d "
                     .. "%s >/dev/null", TF_PY, TFDS_EXAMPLES, TFDS_PX, TFDS_SHARDS, q(dir)))
  end
  return dir
end

-- One side's rounds ("examples/s cpu-ms" each) as medians.
local function tfds_side(runs)
  local rate, cpu = {}, {}
  for i, w in ipairs(runs) do rate[i], cpu[i] = tonumber(w[1]), tonumber(w[2]) end
  return {examples_s = median(rate), cpu_ms = median(cpu), per_round = rate}
end

function SECTIONS.tfds()
  if not result.versions.tensorflow_datasets then
    error("bench: the tfds section needs tensorflow-datasets in " .. TF_PY
          .. " (scripts/bench installs it)", 0)
  end
  local dir = tfds_dataset()
  local pp = "decode|resize(224)|value_range(-1, 1)"
  result.tfds = {}
  print(string.format("\ntfds: split 'train' of a TFDS dataset (%d %dx%d JPEGs in %d tfrecord "
                      .. "shards, written by tensorflow-datasets) read in TFDS's order through "
                      .. "'%s' into batches of 32, each example once (as an evaluator reads); "
                      .. "examples/s: per side the fastest of %d passes after an untimed one, the "
                      .. "median of %d rounds (sides alternating); cpu: the process's CPU ms per "
                      .. "example; bvlua: bv.data.inference, one intra-op thread per worker; peer: "
                      .. "tfds.builder().as_dataset (image decoding skipped, as big_vision does) + "
                      .. "tf.data map of big_vision's pp ops' TF calls, a private pool of that "
                      .. "many threads; x = bvlua / peer examples/s; x_cpu = peer / bvlua cpu; "
                      .. "load = the 1-minute load average before the row", TFDS_EXAMPLES,
                      TFDS_PX, TFDS_PX, TFDS_SHARDS, pp, TFDS_PASSES, rounds))
  print(string.format("%5s | %8s %6s | %8s %6s | %6s %6s | %5s", "cores", "bvlua", "cpu", "tfds",
                      "cpu", "x", "x_cpu", "load"))
  for _, cores in ipairs(THREADS > 1 and {1, THREADS} or {1}) do
    local load = tonumber(sh("cut -d' ' -f1 /proc/loadavg"))
    local ours, peer = {}, {}
    for _ = 1, rounds do
      ours[#ours + 1] = words(sh(string.format(
          "%s --threads 1 run scripts/bench_tfds.lua %s lines_tfds_bench train %s %d %d", BVLUA,
          q(dir), q(pp), cores, TFDS_PASSES)))
      peer[#peer + 1] = words(sh(string.format(
          "%s scripts/bench_tfds_peer.py %s lines_tfds_bench train %d %d", TF_PY, q(dir), cores,
          TFDS_PASSES)))
    end
    local row = {cores = cores, pp = pp, examples = TFDS_EXAMPLES, px = TFDS_PX,
                 shards = TFDS_SHARDS, bvlua = tfds_side(ours), tfds = tfds_side(peer),
                 load = load}
    row.x_tfds = ratio(row.bvlua.examples_s, row.tfds.examples_s)
    row.x_cpu = ratio(row.tfds.cpu_ms, row.bvlua.cpu_ms)
    result.tfds[#result.tfds + 1] = row
    print(string.format("%5d | %8.1f %6.2f | %8.1f %6.2f | %5.2fx %5.2fx | %5.2f", cores,
                        row.bvlua.examples_s, row.bvlua.cpu_ms, row.tfds.examples_s,
                        row.tfds.cpu_ms, row.x_tfds, row.x_cpu, load))
  end
end

function SECTIONS.startup()
  local version = {}
  for i = 1, 5 do
    local t = bv.clock()
    sh(BVLUA .. " --version >/dev/null")
    version[i] = bv.clock() - t
  end
  -- The quick config's data drawn first (its prepare), then timed runs of one step each, in a
  -- fresh workdir: from the spawn to the first step's line in the metrics file.
  if not bv.fs.exists("data/lines/train.jsonl") then
    sh(BVLUA .. " run scripts/make_lines.lua data/lines >/dev/null")  -- as the README's job does
  end
  local tmp = sh("mktemp -d")
  local cmd = {BVLUA, "train", "configs/bit_lines.lua:quick", "--config.total_steps=1"}
  sh(table.concat(cmd, " ") .. " --workdir " .. q(tmp .. "/warm") .. " >/dev/null")
  local first, whole = {}, {}
  for i = 1, rounds do
    local workdir = string.format("%s/r%d", tmp, i)
    local argv = {table.unpack(cmd)}
    argv[#argv + 1] = "--workdir=" .. workdir
    local t = bv.clock()
    local pid = bv._proc.spawn(argv, {}, tmp .. "/log")
    local code
    while true do
      code = bv._proc.poll(pid)
      if not first[i] then
        local f = io.open(workdir .. "/big_vision_metrics.txt")
        if f then
          if f:read("a"):find('"step": 1,', 1, true) then first[i] = bv.clock() - t end
          f:close()
        end
      end
      if code then break end
      bv.sleep(0.005)
    end
    whole[i] = bv.clock() - t
    if code ~= 0 or not first[i] then
      error("bench: the timed bit_lines run failed: " .. io.open(tmp .. "/log"):read("a"), 0)
    end
  end
  sh("rm -rf " .. q(tmp))
  result.startup = {version_s = median(version), first_step_s = median(first),
                    one_step_run_s = median(whole)}
  print(string.format("\nstartup (median of %d): bvlua --version %.2f s; bvlua train "
                      .. "configs/bit_lines.lua:quick to the end of step 1: %.2f s (the whole "
                      .. "1-step run: %.2f s)", rounds, result.startup.version_s,
                      result.startup.first_step_s, result.startup.one_step_run_s))
end

function SECTIONS.sharding()
  print("\nsharding: a scanned ViT-B/16 (86M parameters, Adam, remat), 4 steps of 8 images at "
        .. "32x32 in 2 processes; speed and memory against replicate")
  print(string.format("  %-20s %8s %16s %6s %7s", "strategy", "steps/s", "peak MiB r0 r1",
                      "speed", "memory"))
  result.sharding = {}
  local base
  for _, s in ipairs({"replicate", 'zero1(axis="data")', 'fsdp(axis="data")'}) do
    local out = words(sh(string.format("%s launch --nproc 2 run scripts/bench_sharding.lua %s 4 | tail -1",
                                       BVLUA, q(s))))
    local row = {strategy = s, steps_s = tonumber(out[1]),
                 peak_mib = {tonumber(out[2]), tonumber(out[3])}}
    base = base or row
    row.x_speed, row.x_memory = row.steps_s / base.steps_s, row.peak_mib[1] / base.peak_mib[1]
    result.sharding[#result.sharding + 1] = row
    print(string.format("  %-20s %8.3f %8d %7d %6.2f %7.2f", s, row.steps_s, row.peak_mib[1],
                        row.peak_mib[2], row.x_speed, row.x_memory))
  end
  -- replicate's all-reduce after the backward against during it (config.sharding_overlap), on
  -- the unscanned ViT-B/16 (a parameter per block, so the last blocks' gradients are ready
  -- while the first blocks' are still being computed), the two alternating ROUNDS times.
  local steps = 6
  print(string.format("\nsharding, replicate's all-reduce during the backward: the same ViT-B/16 "
                      .. "unscanned, no remat, %d steps; median of %d alternating rounds", steps,
                      rounds))
  print(string.format("  %-22s %8s %16s %6s %7s   %s", "replicate", "steps/s", "peak MiB r0 r1",
                      "speed", "memory", "each round"))
  local runs = {["no-overlap"] = {}, overlap = {}}
  for _ = 1, rounds do
    for _, o in ipairs({"no-overlap", "overlap"}) do
      local out = words(sh(string.format(
        "%s launch --nproc 2 run scripts/bench_sharding.lua replicate %d %s layers | tail -1",
        BVLUA, steps, o)))
      table.insert(runs[o], {steps_s = tonumber(out[1]),
                             peak_mib = {tonumber(out[2]), tonumber(out[3])}})
    end
  end
  result.sharding_overlap = {}
  local off
  for _, o in ipairs({"no-overlap", "overlap"}) do
    local rates, r0, r1 = {}, {}, {}
    for i, run in ipairs(runs[o]) do
      rates[i], r0[i], r1[i] = run.steps_s, run.peak_mib[1], run.peak_mib[2]
    end
    local row = {overlap = o == "overlap", steps_s = median(rates), rounds = rates,
                 peak_mib = {median(r0), median(r1)}}
    off = off or row
    row.x_speed, row.x_memory = row.steps_s / off.steps_s, row.peak_mib[1] / off.peak_mib[1]
    result.sharding_overlap[#result.sharding_overlap + 1] = row
    local each = {}
    for i, x in ipairs(rates) do each[i] = string.format("%.3f", x) end
    print(string.format("  %-22s %8.3f %8d %7d %6.2f %7.2f   %s",
                        o == "overlap" and "during the backward" or "after the backward",
                        row.steps_s, row.peak_mib[1], row.peak_mib[2], row.x_speed, row.x_memory,
                        table.concat(each, " ")))
  end
end

-- bvlua attach's cost to a run nobody attaches to: the same tiny training (ViT mu/4, 16x16
-- images, batch 8) with the listener and with --no-attach, ATTACH_STEPS steps each, alternating
-- ROUNDS times (each side first in every other round); steps/s from the metrics file's uptime between the first and the last logged
-- step (start-up excluded). Then the per-step check alone: listener:pending() timed in a loop.
function SECTIONS.attach()
  local dir = ".bench/attach"
  local steps = tonumber(os.getenv("ATTACH_STEPS") or "") or 600
  bv.fs.mkdirs(dir)
  sh(string.format("%s -e %s", BVLUA, q(string.format([[
local json = require 'bv.json'
local rng, lines = bv.rng(0), {}
for i = 1, 64 do
  local img = (bv.rand({16, 16, 3}, rng) * 255):to('uint8')
  bv.image.write_png(img, '%s/' .. i .. '.png')
  lines[i] = json.encode({image = i .. '.png', label = i %% 4})
end
bv.fs.write_file('%s/train.jsonl', table.concat(lines, '\n'))]], dir, dir))))
  bv.fs.write_file(dir .. "/cfg.lua", string.format([[
return {
  seed = 0, total_steps = %d, num_classes = 4, loss = "softmax_xent",
  input = {data = {name = "bv:jsonl", fname = "%s/train.jsonl", fopen_keys = {image = "%s"}},
           batch_size = 8, pp = 'decode|value_range(-1, 1)|onehot(4, key="label", key_result="labels")|keep("image", "labels")'},
  model_name = "vit", model = {variant = "mu/4", depth = 2},
  optax_name = "scale_by_adam", lr = 1e-3, schedule = {}, log_training_steps = 100,
}
]], steps, dir, dir))
  local function steps_per_s(workdir)
    local rows = require("bv.metrics").read(workdir .. "/big_vision_metrics.txt")
    local first, last
    for _, r in ipairs(rows) do
      if r.uptime then
        first = first or r
        last = r
      end
    end
    return (last.step - first.step) / (last.uptime - first.uptime)
  end
  print(string.format("\nattach: %d training steps of a tiny ViT (mu/4, depth 2, 16x16, batch 8), "
                      .. "with bvlua attach's listener and with --no-attach; median of %d "
                      .. "alternating rounds", steps, rounds))
  local rates = {listener = {}, ["no-attach"] = {}}
  for r = 1, rounds do
    -- Which side goes first alternates too: the first of a pair tends to run slower here.
    local order = r % 2 == 1 and {"listener", "no-attach"} or {"no-attach", "listener"}
    for _, side in ipairs(order) do
      local w = string.format("%s/run-%s-%d", dir, side, r)
      sh("rm -rf " .. q(w))
      sh(string.format("%s --threads %d train %s/cfg.lua --workdir %s %s >/dev/null 2>&1", BVLUA,
                       THREADS, dir, q(w), side == "no-attach" and "--no-attach" or ""))
      table.insert(rates[side], steps_per_s(w))
    end
  end
  local on, off = median(rates.listener), median(rates["no-attach"])
  local each, ratios = {}, {}
  for i = 1, rounds do
    each[i] = string.format("%.1f/%.1f", rates.listener[i], rates["no-attach"][i])
    ratios[i] = rates.listener[i] / rates["no-attach"][i]
  end
  print(string.format("  %-12s %9s\n  %-12s %9.1f\n  %-12s %9.1f\n  listener / no-attach %.3f"
                      .. "   (each round: %s)", "", "steps/s", "listener", on, "--no-attach", off,
                      on / off, table.concat(each, " ")))
  print(string.format("  median of the rounds' ratios %.3f (a cost below the rounds' spread "
                      .. "cannot be told from noise)", median(ratios)))
  local check_us = tonumber(sh(string.format("%s -e %s", BVLUA, q(string.format([[
local l = bv.attach.listen('%s/bench.sock')
local n = 200000
local t0 = bv.clock()
for _ = 1, n do l:pending() end
print((bv.clock() - t0) / n * 1e6)
l:close()]], dir)))))
  print(string.format("  the per-step check alone (listener:pending(), one poll()): %.2f us",
                      check_us))
  result.attach = {steps = steps, listener_steps_s = on, no_attach_steps_s = off,
                   ratio = on / off, median_round_ratio = median(ratios), rounds = rates,
                   check_us = check_us}
end

-- The optimizer update alone (scripts/bench_optim.lua): bvlua's fused update against the plain
-- per-parameter one it replaced (config._reference_update), on each model's whole parameter set;
-- OPTIM_CASES ("pg_tiny:adam:20 ..." as model:optimizer:updates) picks them.
function SECTIONS.optim()
  print(string.format("\noptim: ms per update (median of %d; cpu: the process's CPU time), "
                      .. "reference (the plain per-parameter ops) -> fused; calls = op calls bvlua "
                      .. "makes, allocs = new tensors, flt = minor page faults, per update", rounds))
  print(string.format("%-8s %-9s %6s | %7s %7s %5s | %7s %7s %5s | %10s %8s %7s %9s %7s", "model",
                      "optimizer", "params", "ref ms", "fused", "x", "ref cpu", "fused", "x",
                      "calls", "mul", "div", "allocs", "flt"))
  result.optim = {}
  for _, c in ipairs(words(os.getenv("OPTIM_CASES") or "pg_tiny:adam:20 pg_tiny:adafactor:20 "
                           .. "pg_tiny:momentum:20 pg_tiny:sgd:20 vitb16:adam:3 vitb16:adafactor:3")) do
    local model, opt, n = c:match("^([%w_]+):(%w+):(%d+)$")
    if not model then error("bench: OPTIM_CASES entry '" .. c .. "' is not model:optimizer:n", 0) end
    local function run(impl, what)
      return sh(string.format("%s --threads %d run scripts/bench_optim.lua %s %s %s %s", BVLUA,
                              THREADS, model, opt, impl, what))
    end
    local row = {model = model, optimizer = opt, updates = tonumber(n)}
    local runs = {reference = {}, fused = {}}
    for _ = 1, rounds do
      for _, impl in ipairs({"reference", "fused"}) do
        table.insert(runs[impl], words(run(impl, n)))
      end
    end
    for _, impl in ipairs({"reference", "fused"}) do
      local function col(i, f)
        local xs = {}
        for k, w in ipairs(runs[impl]) do xs[k] = f(tonumber(w[i])) end
        return median(xs)
      end
      local same = function(x) return x end
      row[impl] = json.decode(run(impl, "count"))
      row[impl].ms = col(1, function(x) return 1e3 / x end)
      row[impl].faults, row[impl].cpu_ms = col(2, same), col(4, same)
    end
    local r, f = row.reference, row.fused
    row.x, row.x_cpu = r.ms / f.ms, r.cpu_ms / f.cpu_ms
    result.optim[#result.optim + 1] = row
    local function two(key) return string.format("%d>%d", r[key], f[key]) end
    print(string.format("%-8s %-9s %5.1fM | %7.1f %7.1f %4.2fx | %7.1f %7.1f %4.2fx | %10s %8s %7s "
                        .. "%9s %7s", model, opt, r.elements / 1e6, r.ms, f.ms, row.x, r.cpu_ms,
                        f.cpu_ms, row.x_cpu, two("calls"), two("mul"), two("div"), two("allocs"),
                        two("faults")))
  end
end

-- The bvlua numbers of this run over an earlier run's (--compare), by the same keys.
local function compare(old)
  print(string.format("\nagainst %s (%s, commit %s): new / old, bvlua's own numbers", compare_path,
                      old.date or "?", old.versions and old.versions.commit or "?"))
  local function each(list, key)  -- the rows of an old run by key(row)
    local by = {}
    for _, r in ipairs(list or {}) do by[key(r)] = r end
    return by
  end
  for _, sec in ipairs({"train", "eval", "paligemma"}) do
    local before = each(old[sec], function(r) return r.model .. r.res .. r.batch .. r.mode end)
    for _, r in ipairs(result[sec] or {}) do
      local o = before[r.model .. r.res .. r.batch .. r.mode]
      if o and o.bvlua then
        print(string.format("  %s %s %d %d %s: %.3f -> %.3f steps/s, %.2fx", sec, r.model, r.res,
                            r.batch, r.mode, o.bvlua.steps_s, r.bvlua.steps_s,
                            r.bvlua.steps_s / o.bvlua.steps_s))
      end
    end
  end
  local before = each(old.pp, function(r) return r.task .. r.cores end)
  for _, r in ipairs(result.pp or {}) do
    local o = before[r.task .. r.cores]
    if o then
      print(string.format("  pp %s %d cores: %.1f -> %.1f images/s, %.2fx", r.task, r.cores,
                          o.bvlua, r.bvlua, r.bvlua / o.bvlua))
    end
  end
  before = each(old.tfds, function(r) return r.cores end)
  for _, r in ipairs(result.tfds or {}) do
    local o = before[r.cores]
    if o then
      print(string.format("  tfds %d cores: %.1f -> %.1f examples/s, %.2fx", r.cores,
                          o.bvlua.examples_s, r.bvlua.examples_s,
                          r.bvlua.examples_s / o.bvlua.examples_s))
    end
  end
  if old.startup and result.startup then
    print(string.format("  startup: --version %.2f -> %.2f s, first step %.2f -> %.2f s",
                        old.startup.version_s, result.startup.version_s,
                        old.startup.first_step_s, result.startup.first_step_s))
  end
end

for _, name in ipairs(sections) do
  if not SECTIONS[name] then
    error("bench: unknown section '" .. name .. "' (gemm, train, eval, paligemma, pp, tfds, "
          .. "startup, sharding, optim, attach)", 0)
  end
end
io.stdout:setvbuf("line")
machine()
-- The JSON is rewritten after each section, so that a long run stopped midway keeps what it
-- measured.
json_path = json_path or string.format("runs/bench/bench-%s.json", os.date("!%Y%m%d-%H%M%S"))
bv.fs.mkdirs(json_path:match("^(.*)/[^/]*$") or ".")
for _, name in ipairs(sections) do
  SECTIONS[name]()
  bv.fs.write_file(json_path, json.encode(result, {indent = 2}) .. "\n")
end
print("\nwritten to " .. json_path)
if compare_path then compare(json.decode(bv.fs.read_file(compare_path))) end
