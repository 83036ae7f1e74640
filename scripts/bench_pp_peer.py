# The pp benchmark's peers: the same work done by PIL and by torchvision (from PyPI, in the
# venv) on the same files. Run by scripts/bench (its pp section); prints images per second.
#   .venv/bin/python scripts/bench_pp_peer.py DIR {resize|inception} {pil|torchvision} PROCESSES
import os, sys, time
from multiprocessing import Pool

import numpy as np

DIR, TASK, LIB, PROCS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def files():
    return sorted(os.path.join(DIR, f) for f in os.listdir(DIR) if f.endswith(".jpg"))


def work_pil(path):
    from PIL import Image
    import random
    img = Image.open(path).convert("RGB")
    if TASK == "inception":
        import torchvision.transforms as T
        img = T.RandomResizedCrop(224, scale=(0.05, 1.0))(img)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
    else:
        img = img.resize((224, 224), Image.BILINEAR)
    x = np.asarray(img, dtype=np.float32)
    return x / 127.5 - 1.0


def work_tv(path):
    import torch
    import torchvision.io as io
    import torchvision.transforms.functional as F
    import torchvision.transforms as T
    img = io.decode_jpeg(io.read_file(path))  # CHW uint8
    if TASK == "inception":
        i, j, h, w = T.RandomResizedCrop.get_params(img, scale=(0.05, 1.0), ratio=(0.75, 1.33))
        img = F.resized_crop(img, i, j, h, w, [224, 224], antialias=False)
        if torch.rand(1).item() < 0.5:
            img = F.hflip(img)
    else:
        img = F.resize(img, [224, 224], antialias=False)
    return img.permute(1, 2, 0).float() / 127.5 - 1.0


def init():
    import torch
    torch.set_num_threads(1)


def main():
    fn = work_pil if LIB == "pil" else work_tv
    paths = files()
    best = float("inf")
    with Pool(PROCS, initializer=init) as pool:
        for _ in range(2):
            start = time.perf_counter()
            for _ in pool.imap(fn, paths, chunksize=8):
                pass
            best = min(best, time.perf_counter() - start)
    print("%.1f" % (len(paths) / best))


if __name__ == "__main__":
    main()
