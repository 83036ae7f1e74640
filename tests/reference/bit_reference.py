# An independent BiT (ResNet-v1, GroupNorm, weight standardisation) forward pass in PyTorch,
# written from big_vision's models/bit.py, for the parity test. Reads params and the input from
# an npz (big_vision's names), writes the logits into an npz (key "logits").
#   .venv/bin/python tests/reference/bit_reference.py PARAMS.npz CONFIG_JSON OUT.npz
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

params_path, cfg, out_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
z = np.load(params_path)
P = {k: torch.from_numpy(np.array(z[k])).double() for k in z.files}
x = P.pop("_input").permute(0, 3, 1, 2)  # NCHW
blocks = cfg["blocks"]


def same_pad(v, k, s, value=0.0):
    def amount(n):
        total = max((math.ceil(n / s) - 1) * s + k - n, 0)
        return total // 2, total - total // 2
    t, b = amount(v.shape[2])
    l, r = amount(v.shape[3])
    return F.pad(v, (l, r, t, b), value=value)


def conv(v, name, stride):
    w = P[name + "/kernel"]                                    # HWIO
    w = (w - w.mean(dim=(0, 1, 2))) / (w.std(dim=(0, 1, 2), unbiased=False) + 1e-5)
    w = w.permute(3, 2, 0, 1)
    return F.conv2d(same_pad(v, w.shape[2], stride), w, stride=stride)


def gn(v, name):
    return F.group_norm(v, 32, P[name + "/scale"], P[name + "/bias"], eps=1e-6)


x = F.relu(gn(conv(x, "conv_root", 2), "gn_root"))
x = F.max_pool2d(same_pad(x, 3, 2, value=-math.inf), 3, 2)
for s, n_units in enumerate(blocks):
    for u in range(n_units):
        p = f"block{s + 1}/unit{u + 1}/"
        stride = 2 if (u == 0 and s > 0) else 1
        res = x
        if p + "conv_proj/kernel" in P:
            res = gn(conv(x, p + "conv_proj", stride), p + "gn_proj")
        y = F.relu(gn(conv(x, p + "conv1", 1), p + "gn1"))
        y = F.relu(gn(conv(y, p + "conv2", stride), p + "gn2"))
        y = gn(conv(y, p + "conv3", 1), p + "gn3")
        x = F.relu(res + y)
r = x.mean(dim=(2, 3)) @ P["head/kernel"] + P["head/bias"]
np.savez(out_path, logits=r.numpy())
