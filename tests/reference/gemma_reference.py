# An independent Gemma forward pass in PyTorch, written from big_vision's models/ppp/gemma.py,
# for the parity test. Reads scanned params (big_vision's names) and the tokens from an npz,
# writes the logits into an npz (key "logits").
#   .venv/bin/python tests/reference/gemma_reference.py PARAMS.npz CONFIG_JSON OUT.npz
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

params_path, cfg, out_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
z = np.load(params_path)
P = {k: torch.from_numpy(np.array(z[k])) for k in z.files}
tokens = P.pop("_tokens").long()
P = {k: v.double() for k, v in P.items()}
B, T = tokens.shape
D, N, K, H = cfg["width"], cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]


def rms(x, scale):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * (1 + scale)


def rope(x):  # [B, T, heads, H]; positions 0..T-1
    half = H // 2
    inv = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) * 2 / H))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]   # [T, half]
    s, c = ang.sin()[None, :, None, :], ang.cos()[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


emb = P["embedder/input_embedding"]
x = emb[tokens] * np.sqrt(D)
causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
for i in range(cfg["depth"]):
    L = {k[len("layers/"):]: v[i] for k, v in P.items() if k.startswith("layers/")}
    y = rms(x, L["pre_attention_norm/scale"])
    q = torch.einsum("btd,ndh->btnh", y, L["attn/q_einsum/w"])
    k = torch.einsum("btd,kdh->btkh", y, L["attn/kv_einsum/w"][0])
    v = torch.einsum("btd,kdh->btkh", y, L["attn/kv_einsum/w"][1])
    q, k = rope(q) * H ** -0.5, rope(k)
    # each query head n uses kv head n // (N // K)
    k = k.repeat_interleave(N // K, dim=2)
    v = v.repeat_interleave(N // K, dim=2)
    logits = torch.einsum("btnh,bsnh->bnts", q, k).masked_fill(~causal, float("-inf"))
    a = torch.einsum("bnts,bsnh->btnh", logits.softmax(-1), v)
    x = x + torch.einsum("btnh,nhd->btd", a, L["attn/attn_vec_einsum/w"])
    y = rms(x, L["pre_ffw_norm/scale"])
    g = L["mlp/gating_einsum"]
    x = x + (F.gelu(y @ g[0], approximate="tanh") * (y @ g[1])) @ L["mlp/linear"]
x = rms(x, P["final_norm/scale"])
np.savez(out_path, logits=(x @ emb.T).numpy())
