# The pp benchmark's tf.data peer: the pipeline big_vision runs (tf.data with tf.image ops, its
# pp ops' TF calls) on the same files as scripts/bench_pp.lua. Runs in its own venv
# (.bench/tf, tensorflow-cpu from PyPI; scripts/bench makes it) so that TensorFlow's pins never
# touch the project's venv.
#   .bench/tf/bin/python scripts/bench_pp_tf.py DIR {resize|inception} CORES -> "images/s"
# CORES: tf.data's private thread pool and map parallelism, one intra-op thread.
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

DIR, TASK, CORES = sys.argv[1], sys.argv[2], int(sys.argv[3])
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(CORES)


def resize(data):  # decode|resize(224)|value_range(-1, 1)
    img = tf.io.decode_jpeg(data, channels=3)
    img = tf.image.resize(img, (224, 224), method="bilinear")
    return tf.cast(img, tf.float32) / 127.5 - 1.0


def inception(data):  # decode|inception_crop(224)|flip_lr|value_range(-1, 1)
    img = tf.io.decode_jpeg(data, channels=3)
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(img), tf.zeros([0, 0, 4], tf.float32), area_range=(0.05, 1.0),
        min_object_covered=0, use_image_if_no_bounding_boxes=True)
    crop = tf.slice(img, begin, size)
    crop.set_shape([None, None, 3])
    crop = tf.image.resize(crop, (224, 224), method="bilinear")
    crop = tf.image.random_flip_left_right(crop)
    return tf.cast(crop, tf.float32) / 127.5 - 1.0


def main():
    paths = sorted(os.path.join(DIR, f) for f in os.listdir(DIR) if f.endswith(".jpg"))
    fn = resize if TASK == "resize" else inception
    options = tf.data.Options()
    options.threading.private_threadpool_size = CORES
    options.threading.max_intra_op_parallelism = 1
    ds = (tf.data.Dataset.from_tensor_slices(paths).map(tf.io.read_file)
          .map(fn, num_parallel_calls=CORES).batch(32).with_options(options))
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        for _ in ds:
            pass
        best = min(best, time.perf_counter() - start)
    print("%.1f" % (len(paths) / best))


if __name__ == "__main__":
    main()
