-- PaliGemma-3B fine-tuned as VQA on the 128 lines examples of big_vision's GPU tutorial (its
-- lines_paligemma.py, with the tutorial's settings): the prompt is "count", the answer the
-- number of crossings. configs/paligemma.lua is the same model with settings for our CPUs; this
-- file starts from it and sets what the tutorial sets.
--
--   BV_GEMMA_DIR=ckpts bvlua train configs/lines/paligemma.lua --workdir runs/pg   # a GPU (32 GB)
--   BV_GEMMA_DIR=ckpts bvlua train configs/lines/paligemma.lua --workdir runs/pg --config.lr 3e-5
--   bvlua train configs/lines/paligemma.lua:runlocal --workdir runs/pl     # the CPU: a minute
--
-- $BV_GEMMA_DIR holds pt_224.npz (model_init) and gemma_tokenizer.model. Arguments:
-- freeze_vit, freeze_llm (as the tutorial's), runlocal (configs/paligemma.lua's tiny variant for
-- a few steps, from scratch; nothing to download). The data set is drawn into data/lines the
-- first time. eval/acc writes {workdir}/vqa_eval_{step}.json: question_id, answer and gts of
-- every example, what the tutorial's plotting code reads. The tutorial measured eval/acc 92.6%
-- at the end (94.3% with lr 3e-5), about 12 minutes on one A40.
local config = require "bv.config"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "configs/lines"
local base = dofile(here .. "/../paligemma.lua")

local function get_config(arg)
  arg = config.parse_arg(arg, {freeze_vit = false, freeze_llm = false, runlocal = false})
  local c = base.get_config(string.format("variant=%s,freeze_vit=%s,freeze_llm=%s",
                                          arg.runlocal and "tiny" or "full", arg.freeze_vit,
                                          arg.freeze_llm))
  -- The tutorial's settings.
  c.input.batch_size = 32
  c.total_examples = nil
  c.total_epochs = 15
  c.wd = 3e-7
  c.log_training_steps = 1
  c.ckpt_percent = 0.25  -- a workdir that holds a checkpoint resumes; the REPL can look at it
  c.ckpt_steps = nil
  local vqa, pplx = c.evals["val/vqa"], c.evals["val/pplx"]
  -- The example's id travels as question_id, so the outfile names every example.
  local tok = vqa.tokenizer
  local res = arg.runlocal and 64 or 224
  vqa.pp = table.concat({string.format("decode|resize(%d, method='area')|value_range(-1, 1)", res),
    'strfmt("count", outkey="prefix")', 'strfmt("{label}", outkey="answer")',
    'copy(inkey="id", outkey="question_id")',
    bv.paligemma.combine_and_keep_eval{text_len = 8, keep = {"answer", "question_id"},
                                       model = tok}}, "|")
  vqa.outfile = "{workdir}/vqa_eval_{step}.json"
  vqa.log_percent, vqa.skip_first = 1 / 8, true
  pplx.log_percent = 1 / 8
  c.evals = {["eval/acc"] = vqa, ["val/pplx"] = pplx}

  if arg.runlocal then
    c.input.batch_size = 8
    c.total_epochs = nil
    c.total_steps = 8
    c.log_training_steps = 2
    c.input.data.stop = 128
    for _, e in pairs(c.evals) do e.data.stop = 16 end
  end
  return c
end

-- The Gemma tokenizer is checked first: without it the data workers would fail to start.
local function prepare(c)
  local me = config.tree_path("configs/lines/paligemma.lua")
  bv.paligemma.check_tokenizer(c, "bvlua train " .. me .. " --workdir runs/pg",
                               "bvlua train " .. me .. ":runlocal --workdir runs/pl")
  base.prepare(c)
end

return {get_config = get_config, prepare = prepare}
