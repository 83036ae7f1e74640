#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora, tests/fuzz/corpus/NAME/ (small files, committed).

    .venv/bin/python tests/fuzz/make_corpus.py [CORPUS_DIR]

Needs numpy (the project venv has it) for the npz seeds, and build/bvlua for the image and
checkpoint seeds (tests/fuzz/make_corpus.lua: bvlua's own encoders and checkpoint writer). Every
seed is deterministic: re-running gives the same bytes, so the committed files only change when
this script does (or bvlua's writers do).
"""
import io
import json
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def jsonl(out):
    write(f"{out}/basic.jsonl",
          '{"image": "cat.jpg", "label": 3, "id": "a"}\n'
          '{"image": "dog.jpg", "label": 5, "texts": ["a dog", "un chien"]}\n'
          '\n'
          '{"image": "/abs/x.png", "label": 0, "box": [[0.1, 0.2], [0.3, 0.4]]}\n')
    write(f"{out}/values.jsonl",
          '{"i": 9223372036854775807, "u": 18446744073709551615, "f": 1e308, "n": null}\n'
          '{"b": true, "l": [true, 1, 2.5], "e": [], "ee": [[], []], "s": "\\u00e9\\n"}\n'
          '{"nested": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]], "big": [1, 18446744073709551615]}\n')
    write(f"{out}/bad.jsonl",
          '{"a": 1\n'
          '[1, 2]\n'
          '{"ragged": [[1], [2, 3]]}\n'
          '{"mixed": [1, "a"]}\n'
          '{"obj": {"x": 1}}\n'
          '{"image": 3}\n'
          '{"image": "http://example.com/a.jpg"}\n'
          + "[" * 300 + "]" * 300 + "\n")
    write(f"{out}/crlf.jsonl", '{"mask": "m.png", "label": -1}\r\n  \t\r\n{"label": 2}\r\n')


def npz(out):
    arrays = {
        "params/w": np.arange(6, dtype="<f4").reshape(2, 3),
        "half": np.array([1.5, -2.0], dtype="<f2"),
        "f64": np.array([[1.0]], dtype="<f8"),
        "i8": np.array([-1, 2, 3], dtype="i1"),
        "u8": np.array([255], dtype="u1"),
        "i16be": np.array([1, 2], dtype=">i2"),
        "i64": np.array(7, dtype="<i8"),
        "u32": np.array([4000000000], dtype="<u4"),
        "u64": np.array([1, 2], dtype="<u8"),
        "b": np.array([True, False]),
        "bf16": np.array([0x3F80, 0x4000], dtype="<u2").view("|V2"),
        "fortran": np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3)),
        "empty": np.zeros((0, 4), dtype="<f4"),
    }
    def savez(fn, **kw):
        buf = io.BytesIO()
        fn(buf, **kw)
        return buf.getvalue()
    write(f"{out}/stored.npz", savez(np.savez, **{k: arrays[k] for k in
                                                   ["params/w", "half", "i64", "bf16", "b"]}))
    write(f"{out}/deflated.npz", savez(np.savez_compressed, **{k: arrays[k] for k in
                                                               ["f64", "i8", "u8", "i16be"]}))
    write(f"{out}/wide.npz", savez(np.savez, **{k: arrays[k] for k in
                                                 ["u32", "u64", "fortran", "empty"]}))
    # A hand-written .npy header numpy would also read (extra spaces, a trailing comma).
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"
    header += " " * (64 - 10 - len(header) - 1) + "\n"
    npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
    npy += np.array([1, 2, 3], dtype="<i4").tobytes()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("hand.npy", (1980, 1, 1, 0, 0, 0)), npy)
    write(f"{out}/hand.npz", buf.getvalue())


def zips(out):
    def make(members, compression, force_zip64=False, comment=b""):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=compression) as z:
            for name, data in members:
                info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
                info.compress_type = compression
                with z.open(info, "w", force_zip64=force_zip64) as f:
                    f.write(data)
            z.comment = comment
        return buf.getvalue()
    text = b"the quick brown fox jumps over the lazy dog\n" * 8
    write(f"{out}/stored.zip", make([("a.txt", b"hello"), ("dir/b.bin", bytes(range(64)))],
                                    zipfile.ZIP_STORED))
    write(f"{out}/deflated.zip", make([("a.txt", text), ("empty", b"")], zipfile.ZIP_DEFLATED))
    write(f"{out}/zip64.zip", make([("x.npy", text[:100])], zipfile.ZIP_STORED, True,
                                   b"a comment"))
    write(f"{out}/zip64_deflated.zip", make([("y", text), ("z", b"z" * 300)],
                                            zipfile.ZIP_DEFLATED, True))


def safetensors(out):
    def make(tensors, metadata=None, pad=True):
        header, data = {}, b""
        if metadata is not None:
            header["__metadata__"] = metadata
        for name, (dtype, shape, raw) in tensors.items():
            header[name] = {"dtype": dtype, "shape": shape,
                            "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
        text = json.dumps(header, separators=(",", ":")).encode()
        if pad:
            text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + data
    write(f"{out}/basic.safetensors", make({
        "params/w": ("F32", [2, 3], np.arange(6, dtype="<f4").tobytes()),
        "opt/count": ("I64", [], struct.pack("<q", 7)),
    }, {"format": "bvlua.checkpoint", "step": "7"}))
    write(f"{out}/dtypes.safetensors", make({
        "bf16": ("BF16", [2], b"\x80\x3f\x00\x40"),
        "f16": ("F16", [1], np.array([1.5], dtype="<f2").tobytes()),
        "f64": ("F64", [1, 1], np.array([2.5], dtype="<f8").tobytes()),
        "b": ("BOOL", [3], b"\x01\x00\x01"),
        "u8": ("U8", [2], b"\xff\x01"),
        "i8": ("I8", [1], b"\xfe"),
        "i16": ("I16", [1], b"\x01\x02"),
        "i32": ("I32", [2], struct.pack("<ii", -1, 5)),
        "empty": ("F32", [0, 3], b""),
    }, pad=False))
    write(f"{out}/empty.safetensors", make({}, {}))


def texts(corpus):
    literal = [
        "[1, 2, 3]", "(1,)", "()", "{'a': 1, \"b\": [None, True, False]}",
        "{a = 1, [2] = 'x', ['k'] = {1, 2}}", "-1.5e-3", "0x1F", "'it''s'",
        "'tab\\t\\x41\\u00e9\\n'", "inf", "nan", "((1, 2), [3, {4: 5}])", "'unterminated",
        "[1, 2", "{1: }", "1_000", "+.5", "[" * 40 + "]" * 40, "\"\\\"\"",
    ]
    for i, s in enumerate(literal):
        write(f"{corpus}/literal/{i:02d}.txt", s)
    pp = [
        "decode|resize(224)|value_range(-1, 1)",
        "decode_jpeg_and_inception_crop(224)|flip_lr|value_range(-1, 1)|onehot(1000, "
        "key='label', key_result='labels')|keep('image', 'labels')",
        "decode(channels=3, precise=True)|resize_small(256, method='bilinear')|central_crop(224)",
        "randaug(2, 15)|copy(inkey='image', outkey='img')|select('img', key_map={'img': 'x'})",
        "tok(key='text', model='gemma', max_len=16)|strfmt('caption {lang}', outkey='prefix')",
        "value_range(vmin=0, vmax=1, in_min=0, in_max=255.0, clip_values=True)",
        "pad_to_shape((4, 4), pad_value=0, key='x')|squeeze_last_dim|concat(['a', 'b'])",
        "resize((224, 224), 'nearest', antialias=False)|mask_tokens()|  |",
        "bad(|x(1, key=2, 3)|y(a==1)|..z|onehot(depth=10, depth=11)",
        "choice(n=1, inkey='texts', outkey='text')|get_cls_token()|drop('a')",
    ]
    for i, s in enumerate(pp):
        write(f"{corpus}/pp/{i:02d}.txt", s)
    config = [
        "res=128,flip\n--config.lr=0.1\n--config.input.batch_size=64\nconfigs/bit_lines.lua",
        "runlocal\n--workdir\nruns/x\n--config.schedule=[('warmup', 5), ('cosine', 95)]\n"
        "--config\nconfigs/x.lua:a=1\n--noconfig.flip\n--dry-run",
        "lr=1e-3,n=4,f=inf\nx.lua\n--config.model.variant=S/16\n--config.flip=yes\n"
        "--config.wd=nan\n--nproc=2\n--backend=gloo\n--device\ncuda:1",
        "name=a=b,,res=\nc.lua\n--config.input.data.split=val\n--config.schedule.2=[1]\n"
        "--config.model.out_dim=[None, 10]\n--config.log={'a': 1}\n--config.seed=+7",
        "\n--help\n--config.total_steps=1.5\n--config.nope=1\n--config.lr.x=1",
        "mode=z\nc.lua\n--config.model.dropout=-0.0\n--config.name=\n--config.input.pp=x,y\n"
        "--debug",
    ]
    for i, s in enumerate(config):
        write(f"{corpus}/config/{i:02d}.txt", s)


def png(out):
    """PNGs bvlua's encoder does not write: palette with tRNS, 16-bit, grey with tRNS."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    def make(w, h, depth, color, rows, extra=b""):
        ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
        raw = b"".join(b"\x00" + r for r in rows)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    opts = lambda c, y, x, hw: bytes([c, y, x, hw - 1])
    plte = chunk(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9]))
    trns = chunk(b"tRNS", bytes([0, 128, 255]))
    write(f"{out}/palette.png", opts(4, 0, 0, 2) + make(
        4, 3, 8, 3, [bytes([(x + y) % 4 for x in range(4)]) for y in range(3)], plte + trns))
    write(f"{out}/rgb16.png", opts(3, 1, 1, 2) + make(
        3, 3, 16, 2, [b"".join(struct.pack(">HHH", 300 * x, 2000 * y, 65535) for x in range(3))
                      for y in range(3)]))
    write(f"{out}/grey_trns.png", opts(2, 0, 1, 3) + make(
        4, 4, 8, 0, [bytes([16 * x + y for x in range(4)]) for y in range(4)],
        chunk(b"tRNS", struct.pack(">H", 17))))
    write(f"{out}/grey1bit.png", opts(0, 0, 0, 8) + make(8, 2, 1, 0, [b"\xa5", b"\x5a"]))


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus")
    jsonl(f"{corpus}/jsonl")
    npz(f"{corpus}/npz")
    zips(f"{corpus}/zip")
    safetensors(f"{corpus}/safetensors")
    texts(corpus)
    png(f"{corpus}/image")
    os.makedirs(f"{corpus}/checkpoint", exist_ok=True)
    bvlua = os.environ.get("BVLUA", os.path.join(ROOT, "build", "bvlua"))
    subprocess.run([bvlua, "run", os.path.join(HERE, "make_corpus.lua"), corpus], check=True,
                   cwd=ROOT)


if __name__ == "__main__":
    main()
