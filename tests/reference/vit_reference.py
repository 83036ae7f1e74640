# An independent ViT forward pass in PyTorch (the torch wheel in .venv), written from big_vision's
# models/vit.py, for the parity tests (tests/lua/model_parity_test.lua, model_outputs_test.lua).
# Reads params and the input from an npz (big_vision's names), writes into an npz the logits and
# the out dict's pre_logits, pre_logits_2d and logits_2d (keys named as big_vision's).
#   .venv/bin/python tests/reference/vit_reference.py PARAMS.npz CONFIG_JSON OUT.npz
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

params_path, cfg, out_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
z = np.load(params_path)
P = {k: torch.from_numpy(np.array(z[k])).double() for k in z.files}
x = P.pop("_input")  # [n, H, W, 3]
heads, depth, pool = cfg["num_heads"], cfg["depth"], cfg["pool_type"]


def ln(v, prefix):
    return F.layer_norm(v, v.shape[-1:], P[prefix + "/scale"], P[prefix + "/bias"], eps=1e-6)


def mha(q_in, kv_in, prefix):
    def proj(v, name):
        k, b = P[f"{prefix}/{name}/kernel"], P[f"{prefix}/{name}/bias"]   # [D, H, Dh], [H, Dh]
        return torch.einsum("nld,dhk->nhlk", v, k) + b[None, :, None, :]
    q, k, v = proj(q_in, "query"), proj(kv_in, "key"), proj(kv_in, "value")
    q = q / np.sqrt(q.shape[-1])
    w = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    o = w @ v                                                            # [n, H, l, Dh]
    return torch.einsum("nhlk,hkd->nld", o, P[prefix + "/out/kernel"]) + P[prefix + "/out/bias"]


def mlp(v, prefix):
    h = v @ P[prefix + "/Dense_0/kernel"] + P[prefix + "/Dense_0/bias"]
    h = F.gelu(h, approximate="tanh")
    return h @ P[prefix + "/Dense_1/kernel"] + P[prefix + "/Dense_1/bias"]


# Patch embedding as a real strided convolution (NCHW), unlike bvlua's matmul over patches.
kernel = P["embedding/kernel"].permute(3, 2, 0, 1)                       # HWIO -> OIHW
ph, pw = kernel.shape[2], kernel.shape[3]
h = F.conv2d(x.permute(0, 3, 1, 2), kernel, P["embedding/bias"], stride=(ph, pw))
n, d = h.shape[0], h.shape[1]
h = h.flatten(2).transpose(1, 2)                                         # [n, tokens, D]
h = h + P["pos_embedding"]
if pool == "tok":
    h = torch.cat([P["cls"].expand(n, 1, d), h], dim=1)
for i in range(depth):
    b = f"Transformer/encoderblock_{i}"
    y = ln(h, b + "/LayerNorm_0")
    h = h + mha(y, y, b + "/MultiHeadDotProductAttention_0")
    h = h + mlp(ln(h, b + "/LayerNorm_1"), b + "/MlpBlock_0")
h = ln(h, "Transformer/encoder_norm")
if pool == "gap":
    r = h.mean(dim=1)
elif pool == "tok":
    r = h[:, 0]
elif pool == "map":
    probe = P["MAPHead_0/probe"].expand(n, 1, d)
    a = mha(probe, h, "MAPHead_0/MultiHeadDotProductAttention_0")
    a = a + mlp(ln(a, "MAPHead_0/LayerNorm_0"), "MAPHead_0/MlpBlock_0")
    r = a[:, 0]
# big_vision's x_2d: the encoded patch tokens (tok's cls token dropped) on the patch grid.
gh, gw = x.shape[1] // ph, x.shape[2] // pw
r2 = (h[:, 1:] if pool == "tok" else h).reshape(n, gh, gw, d)
if "pre_logits/kernel" in P:
    r = torch.tanh(r @ P["pre_logits/kernel"] + P["pre_logits/bias"])
    r2 = torch.tanh(r2 @ P["pre_logits/kernel"] + P["pre_logits/bias"])
out = {"pre_logits": r, "pre_logits_2d": r2}
if "head/kernel" in P:
    out["logits"] = r @ P["head/kernel"] + P["head/bias"]
    out["logits_2d"] = r2 @ P["head/kernel"] + P["head/bias"]
np.savez(out_path, **{k: v.numpy() for k, v in out.items()})
