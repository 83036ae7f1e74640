-- PaliGemma fine-tuned to answer "count" on the lines data set (big_vision's GPU tutorial):
-- the prefix is "count", the suffix the number of crossings ("0", "1" or "2").
--
--   bvlua run scripts/make_lines.lua data/lines        # (train draws it when missing: prepare)
--   BV_GEMMA_DIR=ckpts bvlua train configs/paligemma.lua --workdir runs/pg       # PaliGemma-3B, GPU
--   bvlua train configs/paligemma.lua:variant=tiny --workdir runs/pg_tiny        # CPU, minutes
--
-- The real model needs $BV_GEMMA_DIR/pt_224.npz (model_init) and gemma_tokenizer.model there.
-- variant=tiny swaps in a small image encoder (a half-width BiT ResNet-26: a small ViT does not
-- learn this task from scratch in minutes), a 2-layer Gemma of width 64 and a SentencePiece
-- model trained before the run (data/lines/tiny_sp.model, by prepare), and trains from scratch:
-- 400 steps of 32 at 64 px, about 2 minutes on 2 cores; measured val/vqa/acc 0.73 (0.68 on
-- another machine; the majority answer is 0.52).
-- Arguments: variant (full or tiny), res (default 224, tiny 64), text_len, freeze_vit,
-- freeze_llm, model_init (a vanity name such as pt_224, or an .npz path).
--
-- Memory (fp32 parameters, from model:param_shapes()): PaliGemma-3B has 2,923,335,408
-- parameters: 11.7 GB of parameters, 11.7 GB of gradients, and for Adafactor's factored state
-- about 5.9 GB more (its momentum in bf16) -- about 30 GB before activations, so full fine-tuning
-- wants an 80 GB GPU or freeze_vit/freeze_llm (frozen parts get no gradients and no state).
-- With N GPUs (--nproc N or torchrun) the fsdp strategy below keeps about 1/N of the parameters,
-- gradients and state on each; set model.llm.remat_policy = "nothing_saveable" so that a Gemma
-- layer's parameters are whole only while it runs (the scanned ViT rematerialises by default).
-- config.autocast = "bfloat16" runs the forward's matmuls in bf16; parameters stay fp32.
local config = require "bv.config"

local LINES_DIR = "data/lines"

-- `stop`: only the first examples of the split (the tutorial trains on 128).
local function lines_data(split, stop)
  return {name = "bv:jsonl", fname = LINES_DIR .. "/" .. split .. ".jsonl",
          fopen_keys = {image = LINES_DIR}, stop = stop}
end

-- A small SentencePiece model with Gemma's special ids, trained by prepare (below).
local TINY_TOKENIZER = LINES_DIR .. "/tiny_sp.model"
local TINY_SPEC = "sp(model='" .. TINY_TOKENIZER .. "')"
-- The model's vocab_size: the pieces train_sentencepiece makes of the lines below. It asks for
-- 64 and, with hard_vocab_limit = false, stops at 43 (prepare checks it; get_config cannot read
-- the model file, which may not exist yet).
local TINY_VOCAB = 43

local function train_tiny_tokenizer()
  local lines = {}
  local words = {"count", "the", "lines", "cross", "how", "many", "times", "red", "blue",
                 "answer", "zero", "one", "two", "image", "question", "number"}
  for i = 1, 200 do
    lines[i] = string.format("%s %s %d %s %d", words[i % #words + 1], words[(i * 7) % #words + 1],
                             i % 3, words[(i * 3) % #words + 1], (i * 5) % 10)
  end
  bv.fs.mkdirs(LINES_DIR)
  bv.text.train_sentencepiece{lines = lines, vocab_size = 64, path = TINY_TOKENIZER,
                              gemma_like = true, hard_vocab_limit = false}
end

-- The files of data the config reads: input.data's and each eval's.
local function data_files(c)
  local files = {}
  local function add(d)
    if type(d) == "table" and type(d.fname) == "string" then files[#files + 1] = d.fname end
  end
  add(c.input and c.input.data)
  for _, e in pairs(c.evals or {}) do add(e.data) end
  return files
end

-- What `bvlua train` runs once, on rank 0, before any data is read (bv.config "Loading"): the
-- lines data set, drawn (about 20 s) when the config reads it and it is missing, and the tiny
-- variant's tokenizer, trained when missing. Existing files are left alone.
local function prepare(c)
  for _, fname in ipairs(data_files(c)) do
    if fname:sub(1, #LINES_DIR + 1) == LINES_DIR .. "/" and not bv.fs.exists(fname) then
      local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
      local cmd = string.format("'%s' run '%s/../scripts/make_lines.lua' %s 1>&2",
                                bv.dist.executable(), here, LINES_DIR)
      io.stderr:write("configs/paligemma.lua: drawing the lines data set into ", LINES_DIR, "\n")
      if not os.execute(cmd) then
        error("paligemma: could not make " .. LINES_DIR .. " (" .. cmd .. ")", 0)
      end
      break
    end
  end
  local tiny = type(c.input.pp) == "string" and c.input.pp:find(TINY_TOKENIZER, 1, true)
  for _, e in pairs(c.evals or {}) do tiny = tiny or e.tokenizer == TINY_SPEC end
  if tiny and not bv.fs.exists(TINY_TOKENIZER) then
    io.stderr:write("configs/paligemma.lua: training the tiny tokenizer ", TINY_TOKENIZER, "\n")
    train_tiny_tokenizer()
    local vocab = bv.text.tokenizer(TINY_SPEC).vocab_size
    if vocab ~= TINY_VOCAB then
      error(string.format("paligemma: the tiny tokenizer has %d pieces; the model is built for %d",
                          vocab, TINY_VOCAB), 0)
    end
  end
end

local function get_config(arg)
  arg = config.parse_arg(arg, {{"variant", "full"}, {"res", 0}, {"text_len", 8},
                               {"freeze_vit", false}, {"freeze_llm", false},
                               {"model_init", "pt_224"}})
  local tiny = arg.variant == "tiny"
  if not tiny and arg.variant ~= "full" then error("paligemma: variant is full or tiny", 0) end
  local res = arg.res > 0 and arg.res or (tiny and 64 or 224)
  local tok = tiny and TINY_SPEC or bv.paligemma.TOKENIZER
  local image = string.format("decode|resize(%d, method='area')|value_range(-1, 1)", res)
  local prompt = 'strfmt("count", outkey="prefix")'
  local train_pp = table.concat({image, prompt, 'strfmt("{label}", outkey="suffix")',
    bv.paligemma.combine_and_keep_train{text_len = arg.text_len, model = tok}}, "|")
  local eval_pp = table.concat({image, prompt, 'strfmt("{label}", outkey="answer")',
    bv.paligemma.combine_and_keep_eval{text_len = arg.text_len, keep = {"answer"}, model = tok}}, "|")

  local c = {}
  c.seed = 0
  c.trainer = "proj.paligemma.train"
  c.input = {data = lines_data("train", 128), batch_size = 16, shuffle_buffer_size = 1000,
             pp = train_pp}
  c.total_examples = 128 * 8  -- the tutorial's 128 examples, 8 epochs

  c.optax_name = "big_vision.scale_by_adafactor"
  c.lr = 1e-5
  c.wd = 0
  c.grad_clip_norm = 1.0
  c.label_smoothing = 0
  local sched = {decay_type = "cosine", warmup_percent = 0.05}
  c.schedule = {{"img/.*", (not arg.freeze_vit) and sched or false},
                {"llm/.*", (not arg.freeze_llm) and sched or false}}

  c.model_name = "proj.paligemma.paligemma"
  c.model = {img = {variant = "So400m/14", pool_type = "none", scan = true},
             llm = {variant = "gemma_2b", vocab_size = 257152, dropout = 0}}
  c.model_init = arg.model_init
  -- big_vision's FSDP setup for PaliGemma: parameters, gradients and optimizer state sharded
  -- over the processes, the scanned stacks a layer per unit (README "Several processes"); one
  -- process is the same as replicate.
  c.mesh = {{"data", -1}}
  c.sharding_strategy = {{".*", 'fsdp(axis="data")'}}
  c.sharding_rules = {{"act_batch", {"data"}}}
  c.log_training_steps = 8
  c.ckpt_steps = 64

  c.evals = {
    ["val/vqa"] = {type = "proj.paligemma.transfers.vqa", pred = "decode",
                   pred_kw = {max_decode_len = arg.text_len}, tokenizer = tok,
                   outfile = "{workdir}/vqa_{split}_{step}.json",
                   data = lines_data("val"), pp = eval_pp, log_percent = 0.5},
    ["val/pplx"] = {type = "proj.paligemma.perplexity", pred = "logits", key = "text",
                    shift_labels = true, data = lines_data("val"), pp = train_pp,
                    log_percent = 0.5},
  }

  if tiny then
    -- From scratch, a small ResNet learns to see the crossings far sooner than a small ViT
    -- (big_vision's PaliGemma takes any image model; its feature map's cells are the tokens).
    c.model = {img_model = "bit", img = {depth = 26, width = 0.5},
               llm = {variant = "gemma_2b", width = 64, depth = 2, mlp_dim = 128, num_heads = 2,
                      num_kv_heads = 1, head_dim = 32, vocab_size = TINY_VOCAB}}
    c.model_init = nil
    -- From scratch, 128 examples are too few to learn counting: the whole split, and a
    -- quarter of val for the evals so they stay quick.
    c.input.data = lines_data("train")
    for _, e in pairs(c.evals) do e.data = lines_data("val", 256) end
    c.input.batch_size = 32
    c.optax_name = "scale_by_adam"
    c.lr = 1e-3
    c.total_examples = nil
    c.total_steps = 400
    c.log_training_steps = 20
    c.ckpt_steps = 100
  end
  return c
end

return {get_config = get_config, prepare = prepare}
