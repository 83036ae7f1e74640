# The training-step benchmark's PyTorch side: the same step (forward, softmax cross-entropy,
# backward, SGD update) as a Python loop on the venv's torch wheel and torchvision, eager or with
# the model under torch.compile (Inductor's C++ code on the CPU; compiled before timing starts).
#   .venv/bin/python scripts/bench_train_peer.py MODEL RES BATCH STEPS THREADS [eager|compile|flops] [train|bf16|eval]
#   -> "steps/s minor-page-faults-per-step kernel-share-of-cpu-time" (as scripts/bench_train.lua);
#      flops: the FLOPs of one step (torch.utils.flop_counter: matmuls and convolutions,
#      forward and backward), which scripts/bench divides by each side's step time
# bf16: the step under torch.autocast("cpu", torch.bfloat16); eval: the forward pass alone
# under torch.no_grad. BENCH_DEVICE=cuda (scripts/gpu_check): on the GPU, the clock stopped
# after torch.cuda.synchronize().
# bit26: torchvision's ResNet with [2, 2, 2, 2] bottlenecks, GroupNorm(32) and weight-standardised
# convolutions (as BiT; PyTorch's symmetric padding instead of TF's SAME); vit*: torchvision's
# VisionTransformer with ViT-Ti / S / B sizes.
import os
import sys

import torch
import torch.nn as nn
import torchvision.models.resnet as resnet
from torchvision.models.vision_transformer import VisionTransformer

from bench_timing import time_steps

name, res, batch, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
mode = sys.argv[6] if len(sys.argv) > 6 else "eager"
work = sys.argv[7] if len(sys.argv) > 7 else "train"
assert mode in ("eager", "compile", "flops"), mode
assert work in ("train", "bf16", "eval"), work
torch.set_num_threads(threads)
device = torch.device(os.environ.get("BENCH_DEVICE", "cpu"))
torch.manual_seed(0)
class StdConv2d(nn.Conv2d):
    def forward(self, x):
        # Two passes, as bvlua's: ATen's std/std_mean reduce with an unvectorised Welford.
        c = self.weight - self.weight.mean(dim=(1, 2, 3), keepdim=True)
        s = c.square().mean(dim=(1, 2, 3), keepdim=True).sqrt()
        return nn.functional.conv2d(x, c / (s + 1e-5), None, self.stride, self.padding)


if name == "bit26":
    nn.Conv2d = StdConv2d  # torchvision's ResNet builds its convolutions from nn.Conv2d
    resnet.nn.Conv2d = StdConv2d
    model = resnet.ResNet(resnet.Bottleneck, [2, 2, 2, 2], num_classes=1000,
                          norm_layer=lambda c: nn.GroupNorm(32, c))
else:
    width, heads = {"vitti16": (192, 3), "vits16": (384, 6), "vitb16": (768, 12)}[name]
    model = VisionTransformer(image_size=res, patch_size=16, num_layers=12, num_heads=heads,
                              hidden_dim=width, mlp_dim=4 * width, num_classes=1000)
model = model.to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if mode == "compile":
    model = torch.compile(model)
images = torch.randn(batch, 3, res, res, device=device)
labels = torch.randint(0, 1000, (batch,), device=device)


def step():
    if work == "eval":
        with torch.no_grad():
            model(images)
        return
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=work == "bf16"):
        loss = nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()


if mode == "flops":
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    print(counter.get_total_flops())
    sys.exit(0)


step()
step()  # compile: the first calls compile the forward and the backward
time_steps(step, steps, torch.cuda.synchronize if device.type == "cuda" else None)
