#!/usr/bin/env python3
"""Writes tests/data/tfds/: a tiny TFDS dataset prepared by the real tensorflow-datasets, and
expected.json, what TFDS itself computes and reads from it (tests/lua/tfds_test.lua compares
bvlua's lib/bv/tfds.lua with it; the tests need no TensorFlow).

  python3 -m venv .tfds && .tfds/bin/pip install tensorflow-datasets tensorflow-cpu
  .tfds/bin/python scripts/make_tfds_fixture.py [OUT_DIR]     # default tests/data/tfds
  .bench/tf/bin/python scripts/make_tfds_fixture.py --bench [--examples N] [--size PX]
      [--shards S] OUT_DIR

--bench (scripts/bench's tfds section runs it, in its venv .bench/tf) writes
OUT_DIR/lines_tfds_bench/1.0.0 instead: one split, train, of N (4096) JPEGs of PX x PX (256;
TFDS encodes them: tf.image.encode_jpeg, quality 95), each a line as the fixture's but PX/32
pixels wide on a colour gradient with mild noise (photo-like JPEG sizes), in S (8) shards; no
expected.json.

The dataset, lines_tfds 1.0.0 (tfrecord): 16x16 PNGs of a line (horizontal, vertical or
diagonal) drawn with numpy, features image, label (ClassLabel, 3 names) and id (int64); splits
train (40 examples), validation (10), test (10), each written in 2 shards.

expected.json:
  dataset       name, version, splits {name: shard lengths}, label names
  reads         split expression -> the examples as_dataset(split=..., shuffle_files=False) gives,
                in order: {id, label, image_len, image_crc32} (crc32 of the encoded PNG, zlib's)
  even_reads    "EXPR|N|I" -> the same for tfds.even_splits(EXPR, N)[I]
  absolute      split arithmetic, per set of splits: {splits = {name: shard lengths},
                closest = {expr: result}, pct1_dropremainder = {expr: result}}; a result is
                [[split, from, to]...] (from/to null: the start/end) or {error = msg}
  even_absolute {splits, cases = {"EXPR|N|DROP_REMAINDER": [result per index]}}
  interleave    TFDS's read order (tf.data interleave, cycle_length 16, block_length 16, as
                ReadConfig's defaults with shuffle_files=False) over made-up file instructions:
                {files = [[skip, take]...] (take -1: to the end), lengths, order = [[file, record]...]}
"""
import argparse
import dataclasses
import functools
import json
import operator
import os
import shutil
import tempfile
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402
from tensorflow_datasets.core import splits as splits_lib  # noqa: E402

NAMES = ["horizontal", "vertical", "diagonal"]
SIZES = {"train": 40, "validation": 10, "test": 10}
SIZE = 16


def draw(i, label, size=SIZE, photo=False):
  """A size x size RGB image: a line of the label's kind, size/32 (at least 1) pixels wide, on a
  noisy background, or with photo=True on a colour gradient with mild noise (the bench's)."""
  rng = np.random.default_rng(i)
  if photo:
    base = rng.uniform(size=3)
    ys = np.linspace(0, 1, size)[:, None, None]
    xs = np.linspace(0, 1, size)[None, :, None]
    img = (ys * base + xs * (1 - base)) * 200 + 20 + rng.normal(0, 6, size=(size, size, 3))
    img = np.clip(img, 0, 255).astype(np.uint8)
  else:
    img = rng.integers(0, 60, size=(size, size, 3), dtype=np.uint8)
  width = max(1, size // 32)
  pos = int(rng.integers(2, size - 1 - width))
  color = rng.integers(150, 256, size=3, dtype=np.uint8)
  if label == 0:
    img[pos:pos + width, :, :] = color
  elif label == 1:
    img[:, pos:pos + width, :] = color
  else:
    for k in range(size):
      img[k, k:k + width, :] = color
  return img


class LinesTfds(tfds.core.GeneratorBasedBuilder):
  """Lines in 16x16 images (bvlua's TFDS test fixture)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "The fixture of tests/lua/tfds_test.lua."}
  DESCRIPTION = "16x16 PNGs of a horizontal, vertical or diagonal line."
  SPLITS = SIZES
  IMAGE_SIZE = SIZE
  ENCODING = "png"
  PHOTO = False

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self,
        description=self.DESCRIPTION,
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(self.IMAGE_SIZE, self.IMAGE_SIZE, 3),
                                         encoding_format=self.ENCODING),
            "label": tfds.features.ClassLabel(names=NAMES),
            "id": np.int64,
        }),
        supervised_keys=("image", "label"),
    )

  def _split_generators(self, dl_manager):
    del dl_manager
    first, out = 0, {}
    for split, n in self.SPLITS.items():
      out[split] = self._generate_examples(first, n)
      first += n
    return out

  def _generate_examples(self, first, n):
    for i in range(first, first + n):
      label = i % 3
      yield i, {"image": draw(i, label, self.IMAGE_SIZE, self.PHOTO), "label": label, "id": i}


class LinesTfdsBench(LinesTfds):
  """Lines in larger JPEGs (scripts/bench's tfds section); main() sets the sizes."""

  RELEASE_NOTES = {"1.0.0": "The dataset of scripts/bench's tfds section."}
  ENCODING = "jpeg"
  PHOTO = True


def make_bench(out_dir, examples, size, shards):
  """Prepares lines_tfds_bench in out_dir (TFDS writes it aside and renames it when complete)."""
  LinesTfdsBench.SPLITS = {"train": examples}
  LinesTfdsBench.IMAGE_SIZE = size
  LinesTfdsBench.DESCRIPTION = (f"{examples} {size}x{size} JPEGs of a horizontal, vertical or "
                                f"diagonal line on a colour gradient, in {shards} shards.")
  builder = LinesTfdsBench(data_dir=out_dir)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(num_shards=shards), file_format="tfrecord")
  print("wrote", os.path.join(out_dir, "lines_tfds_bench"))


def read(builder, split):
  """The examples TFDS reads for `split`, or {error = msg} when it refuses (an empty read)."""
  try:
    ds = builder.as_dataset(split=split, shuffle_files=False,
                            decoders={"image": tfds.decode.SkipDecoding()})
  except ValueError as e:
    return {"error": str(e).strip().splitlines()[-1]}
  out = []
  for ex in tfds.as_numpy(ds):
    img = bytes(ex["image"])
    out.append({"id": int(ex["id"]), "label": int(ex["label"]), "image_len": len(img),
                "image_crc32": zlib.crc32(img)})
  return out


def split_infos(shards):
  return [splits_lib.SplitInfo(name=name, shard_lengths=lengths, num_bytes=0)
          for name, lengths in shards.items()]


def num(v):
  """An instruction boundary as JSON: None stays null; integral floats (pct1) become ints, others
  (pct1 of 12.5%) stay floats."""
  if v is None:
    return None
  return int(v) if float(v).is_integer() else float(v)


def absolute(instruction, shards):
  try:
    abs_instrs = splits_lib._make_absolute_instructions(split_infos(shards), instruction)  # pylint: disable=protected-access
  except (ValueError, NotImplementedError, AssertionError) as e:
    return {"error": str(e).strip().splitlines()[-1]}
  return [[str(a.splitname), num(a.from_), num(a.to)] for a in abs_instrs]


def interleave_order(files, lengths):
  """The (file, record) order tf.data's interleave gives for file instructions `files`, as
  tfds's reader calls it (ReadConfig defaults: cycle_length 16, block_length 16, parallel,
  deterministic)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  idx = [i for i, _ in enumerate(files)]

  def records(i):
    f = tf.gather(tf.constant([list(x) for x in files], tf.int64), i)
    n = tf.gather(tf.constant(lengths, tf.int64), i)
    ds = tf.data.Dataset.range(n).map(lambda r: tf.stack([i, r]))
    ds = ds.skip(f[0])
    return ds.take(f[1])

  ds = tf.data.Dataset.from_tensor_slices(tf.constant(idx, tf.int64)).interleave(
      records, cycle_length=16, block_length=16, num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=True)
  return [[int(a), int(b)] for a, b in ds.as_numpy_iterator()]


INTERLEAVE_CASES = [
    ([[0, -1], [0, -1]], [20, 20]),
    ([[3, -1], [0, 5]], [20, 20]),
    ([[0, -1]] * 20, [17] * 20),
    ([[0, -1]] * 18, [5, 40, 16, 1, 33, 2, 16, 17, 9, 50, 3, 3, 32, 7, 1, 20, 40, 4]),
    ([[2, 30]] + [[0, -1]] * 17 + [[0, 3]], [40] * 19),
    ([[0, -1]] * 3, [100, 1, 50]),
]


def with_rounding(expr, rounding):
  """TFDS's own parse of `expr`, with `rounding` for its percent slices (only
  tfds.core.ReadInstruction takes a rounding; a split string always rounds to the closest)."""
  if rounding == "closest":
    return expr
  parts = [splits_lib._str_to_relative_instruction(s)  # pylint: disable=protected-access
           for s in splits_lib._ADDITION_SEP_RE.split(expr)]  # pylint: disable=protected-access
  parts = [dataclasses.replace(p, rounding=rounding) for p in parts]
  return functools.reduce(operator.add, parts)


# Split arithmetic: expressions x split sizes (shard lengths), TFDS's results.
EXPRS = [
    "train", "train[:99%]", "train[99%:]", "train[10:20]", "train[:-1000]", "train[-1000:]",
    "train+validation", "train + validation", "validation[:3]+train[35:]", "train[:50%]",
    "train[50%:]", "train[:10%]", "train[:30%]", "train[:33%]", "train[33%:66%]",
    "train[-33%:]", "train[:12.5%]", "train[:-1%]", "train[1%:-1%]", "train[:0%]",
    "train[:100%]", "train[-100%:]", "train[:101%]", "train[10%:20]", "train[10:20%]",
    "train[:-0]", "train[0:0]", "train[1_0:2_0]", "train[10:5]", "train[-5:-10]",
    "train[:50.5%]", "train[:-50.5%]", "train[0.5%:]", "train[0shard]", "train[1shard]",
    "train[:1shard]", "train[1shard:]", "train[-1shard:]", "train[:-1shard]", "train[5]",
    "train[]", "train[:]", "train[ 10:20]", "train[10:20:30]", "train[a:b]", "nope",
    "all", "all[:50%]", "train[%]", "train[--5:]", "train[5.5:]", "train[1e2:]",
    "train[-7:]", "train[:7]", "train[7:]", "train[-8:]", "train[:8]",
]
SHARDS = [
    {"train": [7], "validation": [3]},
    {"train": [40], "validation": [10]},
    {"train": [50, 49], "validation": [1]},
    {"train": [100], "validation": [5]},
    {"train": [34, 33, 34], "validation": [0, 4]},
    {"train": [1001], "validation": [99]},
    {"train": [3, 0, 4], "validation": [11]},
    {"train": [5000, 5000, 2345], "validation": [2]},
    {"train": [0], "validation": [5]},
]
PCT1_EXPRS = ["train[:50%]", "train[50%:]", "train[:99%]", "train[-33%:]", "train[:-1%]",
              "train[:12.5%]", "train[10:20]", "train[:33%]+validation[:50%]"]
EVEN_EXPRS = ["train", "train[:99%]", "train[3:]", "train+validation",
              "train[:50%]+validation", "train[10:20]", "validation[:3]+train[35:]"]


def main():
  parser = argparse.ArgumentParser(description="Writes bvlua's TFDS fixture (or --bench dataset).")
  parser.add_argument("out_dir", nargs="?", default=os.path.join(
      os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tfds"))
  parser.add_argument("--bench", action="store_true", help="write lines_tfds_bench instead")
  bench = {"examples": (4096, "train examples"), "size": (256, "image side in pixels"),
           "shards": (8, "shards")}
  for name, (default, what) in bench.items():
    parser.add_argument("--" + name, type=int, help=f"--bench: {what} (default {default})")
  args = parser.parse_args()
  out_dir = os.path.abspath(args.out_dir)
  given = [name for name in bench if getattr(args, name) is not None]
  if given and not args.bench:
    parser.error(f"--{given[0]} sizes the --bench dataset; the fixture's sizes are fixed")
  if args.bench:
    sizes = {name: default if getattr(args, name) is None else getattr(args, name)
             for name, (default, _) in bench.items()}
    for name, v in sizes.items():
      if v < 1:
        parser.error(f"--{name} must be at least 1, got {v}")
    make_bench(out_dir, **sizes)
    return
  with tempfile.TemporaryDirectory() as tmp:
    builder = LinesTfds(data_dir=tmp)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=2),
        file_format="tfrecord")
    prepared = os.path.join(tmp, "lines_tfds")
    dest = os.path.join(out_dir, "lines_tfds")
    if os.path.exists(dest):
      shutil.rmtree(dest)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copytree(prepared, dest)
    # Read from the copy, as tests read it.
    builder = tfds.builder("lines_tfds", data_dir=out_dir)

    info = builder.info
    expected = {
        "dataset": {
            "name": info.name, "version": str(info.version),
            "splits": {s: list(v.shard_lengths) for s, v in info.splits.items()},
            "label_names": info.features["label"].names,
        },
        "reads": {},
        "even_reads": {},
    }
    read_exprs = ["train", "train[:50%]", "train[:99%]", "train[99%:]", "train[10:20]",
                  "train[:-10]", "train[-10:]", "train+validation", "validation[:3]+train[35:]",
                  "test", "validation[1shard]", "train[15:25]", "all"]
    for expr in read_exprs:
      expected["reads"][expr] = read(builder, expr)
    for expr in ["train", "train[:99%]", "train+validation", "train[15:25]", "validation[:1]"]:
      for n in (2, 3):
        for i, sub in enumerate(tfds.even_splits(expr, n)):
          expected["even_reads"][f"{expr}|{n}|{i}"] = read(builder, sub)

    expected["absolute"], expected["even_absolute"] = [], []
    for shards in SHARDS:
      closest = {expr: absolute(expr, shards) for expr in EXPRS}
      pct1 = {}
      for expr in PCT1_EXPRS:
        pct1[expr] = absolute(with_rounding(expr, "pct1_dropremainder"), shards)
      expected["absolute"].append({"splits": shards, "closest": closest,
                                   "pct1_dropremainder": pct1})
      even = {}
      for expr in EVEN_EXPRS:
        for n in (1, 2, 3, 4, 7):
          for drop in (False, True):
            even[f"{expr}|{n}|{str(drop).lower()}"] = [
                absolute(s, shards) for s in tfds.even_splits(expr, n, drop_remainder=drop)]
      expected["even_absolute"].append({"splits": shards, "cases": even})
    expected["interleave"] = [{"files": f, "lengths": n, "order": interleave_order(f, n)}
                              for f, n in INTERLEAVE_CASES]

    with open(os.path.join(out_dir, "expected.json"), "w") as f:
      json.dump(expected, f, indent=None, separators=(",", ":"))
      f.write("\n")
  print("wrote", out_dir)


if __name__ == "__main__":
  main()
