-- Config keys of the models (config.model per config.model_name), which the native models read
-- (runtime/models/*.cpp, each refusing keys it does not know): see bv.config_keys.
local config_keys = require "bv.config_keys"

local VIT_SIZES = "mu, Ti, S, M, B, L, So400m, H, g, g-opt, G, G-opt, e"

config_keys.declare("model:vit", {doc = "big_vision's Vision Transformer", keys = {
  {"variant", "string", nil, "SIZE/PATCH, e.g. \"B/16\" (sizes: " .. VIT_SIZES .. "); sets "
    .. "width, depth, mlp_dim, num_heads and patch_size"},
  {"num_classes", "int", nil, "the head's outputs; None: no head (the trainer sets it from "
    .. "config.num_classes)"},
  {"patch_size", "list", {16, 16}, "the patch, {h, w}"},
  {"width", "int", 768, "the encoder's width"},
  {"depth", "int", 12, "encoder blocks"},
  {"mlp_dim", "int", nil, "the MLP's hidden size (default 4 * width)"},
  {"num_heads", "int", 12, "attention heads"},
  {"posemb", "string", "learn", "position embeddings: learn or sincos2d"},
  {"rep_size", "int|bool", false, "a pre_logits layer of this size (true: width)"},
  {"dropout", "float", 0, "dropout rate"},
  {"pool_type", "string", "gap", "gap, map, tok, 0 or none"},
  {"head_zeroinit", "bool", true, "the head starts at zero"},
  {"scan", "bool", false, "the encoder's layers stacked in one parameter each"},
  {"remat_policy", "string", "nothing_saveable", "recompute layers in the backward when "
    .. "scanned (none: keep activations)"},
  {"dtype_mm", "string", "float32", "the matmuls' dtype: float32, bfloat16, float16"},
  {"image_size", "list", {224, 224}, "the input image size, {h, w} (trainers set it from the data)"},
}})

config_keys.declare("model:bit", {doc = "big_vision's BiT ResNet-v1", keys = {
  {"depth", "int|list", 50, "26, 50, 101, 152, 200, or a list of units per stage"},
  {"width", "float", 1, "channel multiplier (64 * width must be a multiple of 32)"},
  {"num_classes", "int", nil, "the head's outputs; None: no head"},
}})

config_keys.declare("model:proj.image_text.text_transformer", {
  doc = "the SigLIP/LiT text encoder", keys = {
  {"variant", "string", nil, "a ViT size (" .. VIT_SIZES .. "): width, depth, mlp_dim, num_heads"},
  {"num_classes", "int", nil, "the head's outputs; None: no head"},
  {"width", "int", 512, "the encoder's width"},
  {"depth", "int", 12, "encoder blocks"},
  {"mlp_dim", "int", 2048, "the MLP's hidden size"},
  {"num_heads", "int", 8, "attention heads"},
  {"dropout", "float", 0, "dropout rate"},
  {"vocab_size", "int", 32000, "the embedding's rows"},
  {"pool_type", "string", "last", "last, first, gap, map or max"},
  {"scan", "bool", false, "layers stacked in one parameter each"},
  {"remat_policy", "string", "nothing_saveable", "recompute layers when scanned (none: keep)"},
  {"text_len", "int", 64, "tokens per text"},
}})

config_keys.declare("model:proj.image_text.two_towers", {
  doc = "SigLIP/LiT image and text towers", keys = {
  {"image", "table", {}, "the image tower's options (model:vit)", scope = "model:vit"},
  {"text", "table", {}, "the text tower's options", scope = "model:proj.image_text.text_transformer"},
  {"image_model", "string", "vit", "only vit"},
  {"text_model", "string", "proj.image_text.text_transformer", "only this one"},
  {"out_dim", "int|list", 128, "both towers' output size, or {img, txt} (None: no head)"},
  {"temperature_init", "float", 1.0, "the learned temperature's start"},
  {"bias_init", "float", nil, "a learned bias starting here (SigLIP); None: no bias"},
}})

config_keys.declare("model:ppp.gemma", {doc = "big_vision's Gemma decoder", keys = {
  {"variant", "string", "gemma_2b", "gemma_2b or gemma_7b: width, depth, mlp_dim, heads"},
  {"width", "int", 2048, "the model's width"},
  {"depth", "int", 18, "decoder layers"},
  {"mlp_dim", "int", 16384, "the MLP's hidden size"},
  {"num_heads", "int", 8, "query heads"},
  {"num_kv_heads", "int", 1, "key/value heads"},
  {"head_dim", "int", 256, "per-head size"},
  {"vocab_size", "int", 256000, "the embedding's rows"},
  {"scan", "bool", true, "layers stacked in one parameter each"},
  {"remat_policy", "string", "none", "recompute layers in the backward (any other than none)"},
  {"dropout", "float", 0, "only 0"},
  {"dropout_bdims", "list", nil, "accepted, no effect (no dropout)"},
  {"cache_dtype", "string", nil, "the KV cache's dtype: float32, bfloat16, float16"},
  {"embed_dtype", "string", "float32", "only float32 (config.autocast for bf16)"},
  {"final_logits_softcap", "float", 0, "tanh soft cap of the logits (0: none)"},
  {"attn_logits_softcap", "float", 0, "tanh soft cap of attention logits (0: none)"},
}})

config_keys.declare("model:proj.paligemma.paligemma", {
  doc = "PaliGemma: an image encoder and Gemma with a prefix-LM mask", keys = {
  {"img", "table", {variant = "So400m/14", pool_type = "none", scan = true},
   "the image encoder's options, merged over the default",
   scope = function(_, m) return "model:" .. (m.img_model or "vit") end},
  {"llm", "table", {variant = "gemma_2b", vocab_size = 257152},
   "Gemma's options, merged over the default", scope = "model:ppp.gemma"},
  {"img_model", "string", "vit", "vit or bit"},
  {"llm_model", "string", "ppp.gemma", "the language model"},
}})
