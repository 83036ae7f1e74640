# The tiny PaliGemma benchmark's PyTorch side: the model of configs/paligemma.lua:variant=tiny
# written as plain nn.Modules, computing what runtime/models/{bit,gemma,paligemma}.cpp compute
# (the same ops in the same order: weight-standardised convs with TF's SAME padding, GroupNorm,
# the feature map's cells as image tokens, RMSNorm with 1 + scale, half-split RoPE, multi-query
# attention by the same einsums with the same finite mask fill, GeGLU, tied logits), on the
# venv's torch wheel, eager or under torch.compile (Inductor's C++ code; compiled before timing).
#   .venv/bin/python scripts/bench_paligemma_peer.py WORK STEPS THREADS [eager|compile|flops]
#   -> "steps/s minor-page-faults-per-step kernel-share-of-cpu-time" (as bench_paligemma.lua);
#      flops: the FLOPs of one step (torch.utils.flop_counter: matmuls and convolutions, and for
#      train their backward), which scripts/bench divides by each side's step time
# WORK: train (the prefix-LM loss on text[:, 1:], backward, torch.optim.Adam at lr 1e-3: optax's
#   scale_by_adam, eps outside the root), bf16 (that step with the forward under CPU autocast to
#   bfloat16) or decode (a step is one whole greedy decode of 32
#   prompts: prefill of image + prompt into a preallocated KV cache, then 8 tokens, each the
#   argmax of the last logits with its log-probability, 7 of them by one-token steps that write
#   their keys and values into the cache; no early stop at eos). compile: the model for train;
#   for decode the prefill and the one-token step, each its own compiled function.
#   .venv/bin/python scripts/bench_paligemma_peer.py check DIR
#   -> loads what `bvlua run scripts/bench_paligemma.lua check DIR` wrote (parameters, batches,
#      bvlua's logits, loss, gradients and tokens), runs the peer on them and prints the largest
#      differences: the one-off proof that the two sides are the same model (not timed).
# Parameters keep big_vision's shapes (conv kernels are stored OIHW here, PyTorch's layout; the
# Gemma layers one module each where bvlua stacks them along a leading depth axis).
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_timing import time_steps

BATCH, RES, TEXT_LEN, DECODE_LEN = 32, 64, 8, 8
VOCAB, BOS, EOS, SEP = 43, 2, 1, 3
MASK_VALUE = -2.3819763e38  # big_vision's (and gemma.cpp's) fill for masked attention logits


# ------------------------------------------------------------------------------------------------
# BiT-R26 at half width (runtime/models/bit.cpp)

def same_padding(size, k, s):
    total = max((math.ceil(size / s) - 1) * s + k - size, 0)
    return total // 2, total - total // 2


class StdConv(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k) / math.sqrt(k * k * cin))
        self.stride = stride

    def forward(self, x):
        # Two passes, as bvlua's: ATen's std_mean reduces with an unvectorised Welford.
        c = self.weight - self.weight.mean(dim=(1, 2, 3), keepdim=True)
        w = c / (c.square().mean(dim=(1, 2, 3), keepdim=True).sqrt() + 1e-5)
        k = w.shape[2]
        top, bottom = same_padding(x.shape[2], k, self.stride)
        left, right = same_padding(x.shape[3], k, self.stride)
        if top == bottom and left == right:
            return F.conv2d(x, w, None, self.stride, (top, left))
        return F.conv2d(F.pad(x, (left, right, top, bottom)), w, None, self.stride)


class GroupNorm(nn.Module):
    def __init__(self, c, zero_scale=False):
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(c) if zero_scale else torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        return F.group_norm(x, 32, self.scale, self.bias, 1e-6)


class Unit(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = 4 * mid
        self.proj = None
        if cin != cout or stride != 1:
            self.proj, self.gn_proj = StdConv(cin, cout, 1, stride), GroupNorm(cout)
        self.conv1, self.gn1 = StdConv(cin, mid, 1, 1), GroupNorm(mid)
        self.conv2, self.gn2 = StdConv(mid, mid, 3, stride), GroupNorm(mid)
        self.conv3, self.gn3 = StdConv(mid, cout, 1, 1), GroupNorm(cout, zero_scale=True)

    def forward(self, x):
        residual = x if self.proj is None else self.gn_proj(self.proj(x))
        y = self.gn1(self.conv1(x)).relu_()
        y = self.gn2(self.conv2(y)).relu_()
        y = self.gn3(self.conv3(y))
        return y.add_(residual).relu_()


class BiT(nn.Module):
    def __init__(self, root=32, blocks=(2, 2, 2, 2)):
        super().__init__()
        self.conv_root, self.gn_root = StdConv(3, root, 7, 2), GroupNorm(root)
        units, cin = [], root
        for s, n in enumerate(blocks):
            for u in range(n):
                units.append(Unit(cin, root << s, 2 if (u == 0 and s > 0) else 1))
                cin = 4 * (root << s)
        self.units = nn.ModuleList(units)
        self.blocks = blocks
        self.channels = cin

    def forward(self, image):  # [B, H, W, 3] -> the last feature map [B, h, w, C]
        x = image.permute(0, 3, 1, 2).contiguous()
        x = self.gn_root(self.conv_root(x)).relu_()
        top, bottom = same_padding(x.shape[2], 3, 2)
        left, right = same_padding(x.shape[3], 3, 2)
        x = F.max_pool2d(F.pad(x, (left, right, top, bottom), value=-math.inf), 3, 2)
        for unit in self.units:
            x = unit(x)
        return x.permute(0, 2, 3, 1)


# ------------------------------------------------------------------------------------------------
# Gemma (runtime/models/ppp/gemma.cpp): width 64, 2 layers, 2 query heads, 1 kv head of 32

def rms_norm(x, scale):
    var = (x * x).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + 1e-6) * (1 + scale)


def rope(x, positions):  # x [B, T, N, H], positions [B, T]
    half = x.shape[-1] // 2
    frac = torch.arange(half, dtype=torch.float32) * (2.0 / x.shape[-1])
    timescale = torch.pow(1e4, frac)
    angle = positions.to(torch.float32).unsqueeze(-1) / timescale
    sin, cos = angle.sin().unsqueeze(2), angle.cos().unsqueeze(2)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def lecun(*shape, fan_in):
    return nn.Parameter(torch.randn(*shape) / math.sqrt(fan_in))


class Layer(nn.Module):
    def __init__(self, d, n, k, h, f):
        super().__init__()
        self.n, self.k, self.h = n, k, h
        self.pre_attention_norm = nn.Parameter(torch.zeros(d))
        self.pre_ffw_norm = nn.Parameter(torch.zeros(d))
        self.q_einsum = lecun(n, d, h, fan_in=d)
        self.kv_einsum = lecun(2, k, d, h, fan_in=d)
        self.attn_vec_einsum = lecun(n, h, d, fan_in=n * h)
        self.gating_einsum = lecun(2, d, f, fan_in=d)
        self.linear = lecun(f, d, fan_in=f)

    # x [B, T, D], mask [B, T, S]. With a cache (k, v [B, max_len, K, H]) this call's keys and
    # values go into slots [start, start + T) and the queries attend over [0, start + T).
    def attention(self, x, positions, mask, cache=None, start=0):
        B, T = x.shape[:2]
        N, K, H = self.n, self.k, self.h
        q = torch.einsum("btd,ndh->btnh", x, self.q_einsum)
        k = torch.einsum("btd,kdh->btkh", x, self.kv_einsum[0])
        v = torch.einsum("btd,kdh->btkh", x, self.kv_einsum[1])
        q = rope(q, positions) * (1.0 / math.sqrt(H))
        k = rope(k, positions)
        if cache is not None:
            ck, cv = cache
            ck[:, start:start + T].copy_(k)
            cv[:, start:start + T].copy_(v)
            k, v = ck[:, :start + T], cv[:, :start + T]
        G = N // K
        qg = q.view(B, T, K, G, H)
        logits = torch.einsum("btkgh,bskh->bkgts", qg, k)
        logits = logits.masked_fill(mask.logical_not().view(B, 1, 1, T, -1), MASK_VALUE)
        probs = torch.softmax(logits, -1)
        enc = torch.einsum("bkgts,bskh->btkgh", probs, v).reshape(B, T, N, H)
        return torch.einsum("btnh,nhd->btd", enc, self.attn_vec_einsum)

    def feed_forward(self, x):
        w = self.gating_einsum
        gate = F.gelu(torch.matmul(x, w[0]), approximate="tanh") * torch.matmul(x, w[1])
        return torch.matmul(gate, self.linear)

    def forward(self, x, positions, mask, cache=None, start=0):
        h = x + self.attention(rms_norm(x, self.pre_attention_norm), positions, mask, cache, start)
        return h + self.feed_forward(rms_norm(h, self.pre_ffw_norm))


class Gemma(nn.Module):
    def __init__(self, vocab=VOCAB, d=64, depth=2, f=128, n=2, k=1, h=32):
        super().__init__()
        self.width = d
        self.input_embedding = nn.Parameter(torch.randn(vocab, d) / math.sqrt(d))
        self.layers = nn.ModuleList(Layer(d, n, k, h, f) for _ in range(depth))
        self.final_norm = nn.Parameter(torch.zeros(d))

    def embed(self, tokens):
        return F.embedding(tokens, self.input_embedding) * math.sqrt(self.width)

    def stack(self, x, mask, positions, caches=None, start=0):
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, mask, None if caches is None else caches[i], start)
        return rms_norm(x, self.final_norm)

    def logits(self, x):
        return torch.matmul(x, self.input_embedding.t())


# ------------------------------------------------------------------------------------------------
# PaliGemma (runtime/models/proj/paligemma/paligemma.cpp)

def prefix_lm_mask(input_mask, mask_ar):  # big_vision's make_attn_mask
    c = mask_ar.cumsum(1)
    sees = c.unsqueeze(1) <= c.unsqueeze(2)
    valid = input_mask.unsqueeze(1).logical_and(input_mask.unsqueeze(2))
    return sees.logical_and(valid)


class PaliGemma(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = BiT()
        self.head_kernel = lecun(self.img.channels, 64, fan_in=self.img.channels)
        self.head_bias = nn.Parameter(torch.zeros(64))
        self.llm = Gemma()

    def embed(self, image, text, mask_ar, input_mask):
        B = text.shape[0]
        fmap = self.img(image)
        zimg = torch.matmul(fmap.reshape(B, -1, fmap.shape[3]), self.head_kernel) + self.head_bias
        n_img = zimg.shape[1]
        x = torch.cat([zimg, self.llm.embed(text)], 1)
        full_ar = torch.cat([torch.zeros(B, n_img, dtype=torch.long), mask_ar], 1)
        full_mask = torch.cat([torch.ones(B, n_img, dtype=torch.bool), input_mask], 1)
        return x, prefix_lm_mask(full_mask, full_ar), full_mask, n_img

    # Training: text [B, T] (every token real) -> the text positions' logits [B, T, V].
    def forward(self, image, text, mask_ar):
        B, T = text.shape
        input_mask = torch.ones(B, T, dtype=torch.bool)
        x, attn, _, n_img = self.embed(image, text, mask_ar, input_mask)
        positions = torch.arange(n_img + T).expand(B, n_img + T)
        pre = self.llm.stack(x, attn, positions)
        return self.llm.logits(pre[:, n_img:])

    # The prompt into fresh caches [B, L + max_decode_len, K, H] per layer; returns the logits at
    # each row's last real token, the caches, the key mask [B, max_len] and the next positions.
    def prefill(self, image, text, mask_ar, input_mask, max_decode_len):
        B = text.shape[0]
        x, attn, real, _ = self.embed(image, text, mask_ar, input_mask.to(torch.bool))
        L = x.shape[1]
        max_len = L + max_decode_len
        caches = [(torch.zeros(B, max_len, l.k, l.h), torch.zeros(B, max_len, l.k, l.h))
                  for l in self.llm.layers]
        key_mask = torch.zeros(B, max_len, dtype=torch.bool)
        key_mask[:, :L] = real
        positions = (real.long().cumsum(1) - 1).clamp_min(0)
        next_position = real.long().sum(1)
        pre = self.llm.stack(x, attn.logical_and(real.unsqueeze(1)), positions, caches, 0)
        last = (real.long() * torch.arange(1, L + 1)).amax(1) - 1
        picked = pre.gather(1, last.view(B, 1, 1).expand(B, 1, pre.shape[2]))
        return self.llm.logits(picked).squeeze(1), caches, key_mask, next_position

    # One token per row at cache slot `length`: logits [B, V].
    def extend(self, tokens, caches, mask, positions, length):
        x = self.llm.embed(tokens.unsqueeze(1))
        return self.llm.logits(self.llm.stack(x, mask, positions, caches, length)).squeeze(1)


def greedy(logits):  # the sampler: argmax, and its log-probability as bvlua's returns it
    tokens = logits.argmax(-1)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, logp


def decode(model, prompt, prefill=None, extend=None, keep=None):
    prefill, extend = prefill or model.prefill, extend or model.extend
    image, text, mask_ar, input_mask = prompt
    B, T = text.shape
    logits, caches, key_mask, next_position = prefill(image, text, mask_ar, input_mask, DECODE_LEN)
    length = key_mask.shape[1] - DECODE_LEN
    tokens = torch.zeros(B, DECODE_LEN, dtype=torch.long)
    for step in range(DECODE_LEN):
        if keep is not None:
            keep.append(logits)
        tok, _ = greedy(logits)
        tokens[:, step] = tok
        if step == DECODE_LEN - 1:
            break
        key_mask[:, length] = True
        logits = extend(tok, caches, key_mask[:, :length + 1].view(B, 1, length + 1),
                        next_position.view(B, 1).clone(), length)
        next_position += 1
        length += 1
    return tokens


def lm_loss(logits, text, mask_loss):  # runtime/train/losses.cpp's, label_smoothing 0
    logp = torch.log_softmax(logits.float(), -1)
    nll = -logp.gather(-1, text[:, 1:].unsqueeze(-1)).squeeze(-1)
    w = mask_loss[:, 1:].to(torch.float32)
    return ((nll * w).sum(1) / w.sum(1).clamp_min(1)).mean()


# ------------------------------------------------------------------------------------------------
# Random batches shaped as bench_paligemma.lua's (combine_and_keep_train / _eval)

def word():
    return int(torch.randint(SEP + 1, VOCAB, ()))


def train_batch():
    text, ar, loss = [], [], []
    for _ in range(BATCH):
        t, a, l = [BOS], [0], [0]
        for _ in range(int(torch.randint(1, 4, ()))):
            t, a, l = t + [word()], a + [0], l + [0]
        t, a, l = t + [SEP], a + [0], l + [0]
        for _ in range(int(torch.randint(1, 4, ()))):
            t, a, l = t + [word()], a + [1], l + [1]
        t, a, l = t + [EOS], a + [1], l + [1]
        pad = TEXT_LEN + 1 - len(t)
        text.append(t + [0] * pad), ar.append(a + [1] * pad), loss.append(l + [0] * pad)
    return (torch.randn(BATCH, RES, RES, 3), torch.tensor(text), torch.tensor(ar),
            torch.tensor(loss))


def decode_batch():
    text, ar, mask = [], [], []
    for _ in range(BATCH):
        t = [BOS] + [word() for _ in range(int(torch.randint(1, TEXT_LEN - 1, ())))] + [SEP]
        pad = TEXT_LEN - len(t)
        text.append(t + [0] * pad), ar.append([0] * len(t) + [1] * pad)
        mask.append([1] * len(t) + [0] * pad)
    return (torch.randn(BATCH, RES, RES, 3), torch.tensor(text), torch.tensor(ar),
            torch.tensor(mask))


# ------------------------------------------------------------------------------------------------
# check: bvlua's parameters and batches in, the differences out

# A Gemma layer's parameters: this module's attribute, bvlua's name under llm/layers/ (stacked
# along the depth there).
LAYER_NAMES = [("pre_attention_norm", "pre_attention_norm/scale"),
               ("pre_ffw_norm", "pre_ffw_norm/scale"), ("q_einsum", "attn/q_einsum/w"),
               ("kv_einsum", "attn/kv_einsum/w"), ("attn_vec_einsum", "attn/attn_vec_einsum/w"),
               ("gating_einsum", "mlp/gating_einsum"), ("linear", "mlp/linear")]


def load_bvlua(model, params):
    t = {k: torch.from_numpy(v) for k, v in params.items()}
    with torch.no_grad():
        for name, m in model.img.named_modules():
            if isinstance(m, StdConv):
                m.weight.copy_(t[unit_name(name, model.img, "conv")].permute(3, 2, 0, 1))
            elif isinstance(m, GroupNorm):
                m.scale.copy_(t[unit_name(name, model.img, "gn") + "/scale"])
                m.bias.copy_(t[unit_name(name, model.img, "gn") + "/bias"])
        model.head_kernel.copy_(t["img/head/kernel"])
        model.head_bias.copy_(t["img/head/bias"])
        model.llm.input_embedding.copy_(t["llm/embedder/input_embedding"])
        model.llm.final_norm.copy_(t["llm/final_norm/scale"])
        for i, layer in enumerate(model.llm.layers):
            for ours, theirs in LAYER_NAMES:
                getattr(layer, ours).copy_(t["llm/layers/" + theirs][i])


# bvlua's name of a BiT module: units.3.conv2 -> block2/unit2/conv2 (kernel for convs).
def unit_name(name, bit, kind):
    if name in ("conv_root", "gn_root"):
        return "img/" + name + ("/kernel" if kind == "conv" else "")
    _, u, part = name.split(".")
    u, s = int(u), 0
    while u >= bit.blocks[s]:
        u, s = u - bit.blocks[s], s + 1
    part = {"proj": "conv_proj"}.get(part, part)
    return "img/block%d/unit%d/%s%s" % (s + 1, u + 1, part, "/kernel" if kind == "conv" else "")


# bvlua's name of each peer parameter's gradient, and the gradient in bvlua's shape.
def bvlua_grads(model):
    out = {}
    for name, m in model.img.named_modules():
        if isinstance(m, StdConv):
            out[unit_name(name, model.img, "conv")] = m.weight.grad.permute(2, 3, 1, 0)
        elif isinstance(m, GroupNorm):
            out[unit_name(name, model.img, "gn") + "/scale"] = m.scale.grad
            out[unit_name(name, model.img, "gn") + "/bias"] = m.bias.grad
    out["img/head/kernel"], out["img/head/bias"] = model.head_kernel.grad, model.head_bias.grad
    out["llm/embedder/input_embedding"] = model.llm.input_embedding.grad
    out["llm/final_norm/scale"] = model.llm.final_norm.grad
    for ours, theirs in LAYER_NAMES:
        out["llm/layers/" + theirs] = torch.stack([getattr(l, ours).grad for l in model.llm.layers])
    return out


def check(directory):
    import numpy as np
    params = dict(np.load(directory + "/params.npz"))
    batch = {k: torch.from_numpy(v) for k, v in np.load(directory + "/batch.npz").items()}
    want = {k: torch.from_numpy(v) for k, v in np.load(directory + "/out.npz").items()}
    model = PaliGemma()
    n_ours = sum(p.numel() for p in model.parameters())
    n_theirs = sum(v.size for v in params.values())
    assert n_ours == n_theirs, (n_ours, n_theirs)
    load_bvlua(model, params)
    text, mask_ar, mask_loss = batch["text"], batch["mask_ar"], batch["mask_loss"]
    logits = model(batch["image"], text[:, :-1], mask_ar[:, :-1])
    loss = lm_loss(logits, text, mask_loss)
    loss.backward()
    grads = bvlua_grads(model)
    with torch.no_grad():
        keep = []
        prompt = (batch["dec_image"], batch["dec_text"], batch["dec_mask_ar"],
                  batch["dec_input_mask"])
        tokens = decode(model, prompt, keep=keep)
        dec_logits = torch.stack(keep, 1)

    def diff(a, b):
        return (a.detach() - b).abs().max().item()

    print("parameters: %d (bvlua %d)" % (n_ours, n_theirs))
    print("train logits [%s]: max |diff| %.3g (values up to %.3g)"
          % (", ".join(map(str, logits.shape)), diff(logits, want["train_logits"]),
             want["train_logits"].abs().max().item()))
    print("loss: %.7f vs bvlua %.7f, |diff| %.3g" % (loss.item(), want["loss"].item(),
                                                   diff(loss, want["loss"])))
    g_names = sorted(k[len("grad/"):] for k in want if k.startswith("grad/"))
    assert sorted(grads) == g_names, set(grads) ^ set(g_names)
    worst = max(g_names, key=lambda k: diff(grads[k], want["grad/" + k]) /
                (want["grad/" + k].abs().max().item() + 1e-30))
    print("gradients (%d): max |diff| %.3g; the worst relative to its largest value: %s %.3g"
          % (len(g_names), max(diff(grads[k], want["grad/" + k]) for k in g_names), worst,
             diff(grads[worst], want["grad/" + worst]) / want["grad/" + worst].abs().max().item()))
    print("decode logits [%s]: max |diff| %.3g" % (", ".join(map(str, dec_logits.shape)),
                                                  diff(dec_logits, want["decode_logits"])))
    same = (tokens == want["decode_tokens"]).sum().item()
    print("greedy tokens: %d of %d the same, max |diff| %d (%d distinct ids)"
          % (same, tokens.numel(), (tokens - want["decode_tokens"]).abs().max().item(),
             len(set(tokens.flatten().tolist()))))
    # float32 on both sides, the same ATen kernels, but not always the same algorithms (bvlua's
    # inference runs channels-last): differences of a few ulps of the largest value.
    def close(name, got, ref, tol=1e-4):
        scale = max(ref.abs().max().item(), 1e-30)
        if diff(got, ref) > tol * scale:
            sys.exit("check: %s differs: max |diff| %.3g, more than %g of its largest value %.3g"
                     % (name, diff(got, ref), tol, scale))
    close("train logits", logits, want["train_logits"])
    close("loss", loss, want["loss"])
    for k in g_names:
        close("the gradient of " + k, grads[k], want["grad/" + k], 1e-3)
    close("decode logits", dec_logits, want["decode_logits"])
    if same != tokens.numel():
        sys.exit("check: %d of %d greedy tokens differ" % (tokens.numel() - same, tokens.numel()))
    print("check: the same model")


# ------------------------------------------------------------------------------------------------
# The bench

def main():
    if sys.argv[1] == "check":
        torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
        check(sys.argv[2])
        return
    work, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "eager"
    assert work in ("train", "bf16", "decode"), work
    assert mode in ("eager", "compile", "flops"), mode
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    # BENCH_DEVICE=cuda (scripts/gpu_check): every tensor made from here on is made there.
    device = torch.device(os.environ.get("BENCH_DEVICE", "cpu"))
    torch.set_default_device(device)
    model = PaliGemma()
    if work in ("train", "bf16"):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        image, text, mask_ar, mask_loss = train_batch()
        fwd = torch.compile(model) if mode == "compile" else model

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=work == "bf16"):
                logits = fwd(image, text[:, :-1], mask_ar[:, :-1])
            lm_loss(logits, text, mask_loss).backward()
            opt.step()
    else:
        model.requires_grad_(False)
        prompt = decode_batch()
        prefill, extend = model.prefill, model.extend
        if mode == "compile":
            prefill, extend = torch.compile(prefill), torch.compile(extend)

        def step():
            with torch.no_grad():
                decode(model, prompt, prefill, extend)

    if mode == "flops":
        from torch.utils.flop_counter import FlopCounterMode
        counter = FlopCounterMode(display=False)
        with counter:
            step()
        print(counter.get_total_flops())
        return
    step()
    step()  # compile: the first calls compile (decode: the step again once its length varies)
    time_steps(step, steps, torch.cuda.synchronize if device.type == "cuda" else None)


if __name__ == "__main__":
    main()
