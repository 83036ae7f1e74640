# The tfds benchmark's peer: big_vision's input pipeline for a TFDS dataset, on the same files as
# scripts/bench_tfds.lua. Runs in scripts/bench's venv .bench/tf (tensorflow-cpu and
# tensorflow-datasets from PyPI).
#   .bench/tf/bin/python scripts/bench_tfds_peer.py DATA_DIR NAME SPLIT CORES PASSES
# prints "EXAMPLES/S CPU_MS" as scripts/bench_tfds.lua does. The split is read as big_vision's
# datasets/tfds.py reads it for an evaluator: builder.as_dataset(shuffle_files=False,
# ReadConfig(skip_prefetch, no autocache), the image's decoding skipped), then mapped through
# big_vision's pp ops' TF calls for decode|resize(224)|value_range(-1, 1) (tf.io.decode_image;
# tf.image.resize bilinear without antialias, clipped and cast back to uint8; to float in
# [-1, 1]) and batched by 32. Not done: big_vision's tfds_id and its hash (_id), which bvlua does
# not give either. Threads: tf.data's private pool of CORES threads, map parallelism CORES, one
# intra-op thread, as big_vision's pipeline sets its options. One untimed pass first, then the
# fastest of PASSES timed ones; CPU_MS: the process's CPU time (all its threads) per example over
# the timed passes.
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

DATA_DIR, NAME, SPLIT = sys.argv[1], sys.argv[2], sys.argv[3]
CORES, PASSES = int(sys.argv[4]), int(sys.argv[5])
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(CORES)


def pp(example):  # decode|resize(224)|value_range(-1, 1)|keep('image')
    img = tf.io.decode_image(example["image"], channels=3, expand_animations=False)
    img = tf.image.resize(img, (224, 224), method="bilinear", antialias=False)
    img = tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8)
    img = tf.cast(img, tf.float32) / 255.0
    return {"image": -1.0 + img * 2.0}


def dataset():
    builder = tfds.builder(NAME, data_dir=DATA_DIR)
    ds = builder.as_dataset(
        split=SPLIT, shuffle_files=False,
        read_config=tfds.ReadConfig(skip_prefetch=True, try_autocache=False),
        decoders={"image": tfds.decode.SkipDecoding()})
    options = tf.data.Options()
    options.threading.private_threadpool_size = CORES
    options.threading.max_intra_op_parallelism = 1
    options.experimental_optimization.inject_prefetch = False
    return ds.map(pp, num_parallel_calls=CORES).batch(32).prefetch(1).with_options(options)


def one_pass(ds):
    start, count = time.perf_counter(), 0
    for batch in ds:
        count += int(batch["image"].shape[0])
    return time.perf_counter() - start, count


def main():
    ds = dataset()
    _, expected = one_pass(ds)
    best, cpu = float("inf"), time.process_time()
    for _ in range(PASSES):
        t, count = one_pass(ds)
        if count != expected:
            sys.exit(f"bench_tfds_peer: a pass gave {count} examples, the first {expected}")
        best = min(best, t)
    cpu = time.process_time() - cpu
    print("%.1f %.3f" % (expected / best, cpu * 1000 / (expected * PASSES)))


if __name__ == "__main__":
    main()
