# Offline only (python3 + numpy), not used by the tests: regenerates the golden values in
# tests/cpp/image_resize_test.cpp.
# Independent reference for bv::image::resize goldens: each TF2 method as a pair of dense
# per-axis weight matrices (out x in), applied as Wy @ X @ Wx^T in float64. Sampling positions are
# computed in float32 like TF; the area weights are exact interval overlaps (no float32 steps).
import numpy as np
f32 = np.float32

def scale_of(n_in, n_out):
    return f32(n_in) / f32(n_out)

def w_nearest(n_in, n_out):
    W = np.zeros((n_out, n_in)); s = scale_of(n_in, n_out)
    for i in range(n_out):
        j = int(np.floor((f32(i) + f32(0.5)) * s)); j = min(max(j, 0), n_in - 1)
        W[i, j] = 1
    return W

def w_bilinear(n_in, n_out):
    W = np.zeros((n_out, n_in)); s = scale_of(n_in, n_out)
    for i in range(n_out):
        src = float((f32(i) + f32(0.5)) * s - f32(0.5))
        lo = int(np.floor(src)); fr = src - lo
        W[i, min(max(lo, 0), n_in - 1)] += 1 - fr
        W[i, min(max(lo + 1, 0), n_in - 1)] += fr
    return W

def keys(x, a=-0.5):
    x = abs(x)
    if x < 1: return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2: return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0

def w_bicubic(n_in, n_out):
    # resize_bicubic(half_pixel_centers): fraction rounded to 1/1024, outside taps dropped, renormalised
    W = np.zeros((n_out, n_in)); s = scale_of(n_in, n_out)
    for i in range(n_out):
        src = (f32(i) + f32(0.5)) * s - f32(0.5)
        base = int(np.floor(src)); d = float(src - f32(base))
        q = round(d * 1024) / 1024  # half-even like lrintf
        ws = {base - 1: keys(1 + q), base: keys(q), base + 1: keys(1 - q), base + 2: keys(2 - q)}
        ws = {j: w for j, w in ws.items() if 0 <= j < n_in}
        tot = sum(ws.values())
        for j, w in ws.items(): W[i, j] = w / tot
    return W

def w_scaled(n_in, n_out, kernel, radius):
    # scale_and_translate with antialias: kernel widened by max(in/out, 1), weights normalised
    W = np.zeros((n_out, n_in))
    inv = f32(1.0 / (f32(n_out) / f32(n_in))); ks = max(float(inv), 1.0)
    for i in range(n_out):
        sample = float((f32(i) + f32(0.5)) * inv)
        ws = {}
        for j in range(n_in):
            w = kernel(abs((j + 0.5 - sample) / ks))
            if w != 0 and abs(j + 0.5 - sample) < radius * ks + 0.5: ws[j] = w
        tot = sum(ws.values())
        for j, w in ws.items(): W[i, j] = w / tot
    return W

def tri(x): return 1 - x if x < 1 else 0.0

def w_area(n_in, n_out):
    W = np.zeros((n_out, n_in)); s = n_in / n_out
    for i in range(n_out):
        for j in range(n_in):
            W[i, j] = max(0.0, min(j + 1, (i + 1) * s) - max(j, i * s)) / s
    return W

def weights(method, aa, n_in, n_out):
    if method == "nearest": return w_nearest(n_in, n_out)
    if method == "area": return w_area(n_in, n_out)
    if method == "bilinear": return w_scaled(n_in, n_out, tri, 1) if aa else w_bilinear(n_in, n_out)
    if method == "bicubic": return w_scaled(n_in, n_out, keys, 2) if aa else w_bicubic(n_in, n_out)

def resize(img, h, w, method, aa):
    img = np.asarray(img, dtype=np.float64)
    if method == "nearest":
        return weights(method, aa, img.shape[0], h) @ img @ weights(method, aa, img.shape[1], w).T
    return weights(method, aa, img.shape[0], h) @ img @ weights(method, aa, img.shape[1], w).T

# TF's own published expectations (tensorflow/python/ops/image_ops_test.py, ResizeImagesV2Test) to
# validate this reference before using it for new goldens.
up = np.array([64, 32, 32, 64, 50, 100], float).reshape(3, 2)
tf_up = {
 "bilinear": [64.0, 56.0, 40.0, 32.0, 56.0, 52.0, 44.0, 40.0, 40.0, 44.0, 52.0, 56.0,
              36.5, 45.625, 63.875, 73.0, 45.5, 56.875, 79.625, 91.0, 50.0, 62.5, 87.5, 100.0],
 "nearest": [64.0, 64.0, 32.0, 32.0, 64.0, 64.0, 32.0, 32.0, 32.0, 32.0, 64.0, 64.0,
             32.0, 32.0, 64.0, 64.0, 50.0, 50.0, 100.0, 100.0, 50.0, 50.0, 100.0, 100.0],
 "area": [64.0, 64.0, 32.0, 32.0, 64.0, 64.0, 32.0, 32.0, 32.0, 32.0, 64.0, 64.0,
          32.0, 32.0, 64.0, 64.0, 50.0, 50.0, 100.0, 100.0, 50.0, 50.0, 100.0, 100.0],
 "bicubic": [70.1453, 59.0252, 36.9748, 25.8547, 59.3195, 53.3386, 41.4789, 35.4981,
             36.383, 41.285, 51.0051, 55.9071, 30.2232, 42.151, 65.8032, 77.731,
             41.6492, 55.823, 83.9288, 98.1026, 47.0363, 62.2744, 92.4903, 107.7284],
}
for m, exp in tf_up.items():
    for aa in (False, True):
        got = resize(up, 6, 4, m, aa).ravel()
        err = np.abs(got - np.array(exp)).max()
        assert err < 1e-4, (m, aa, err, got)
down = np.array([127, 127, 64, 64, 127, 127, 64, 64, 64, 64, 127, 127, 64, 64, 127, 127,
                 50, 50, 100, 100, 50, 50, 100, 100], float).reshape(6, 4)
for m in ("bilinear", "nearest", "area"):  # the bicubic case only runs on GPU in TF
    got = resize(down, 3, 2, m, False).ravel()
    assert np.abs(got - [127, 64, 64, 127, 50, 100]).max() < 1e-5, (m, got)
a6 = np.array([128, 64, 32, 16, 8, 4, 4, 8, 16, 32, 64, 128, 128, 64, 32, 16, 8, 4, 5,
               10, 15, 20, 25, 30, 30, 25, 20, 15, 10, 5, 5, 10, 15, 20, 25, 30], float).reshape(6, 6)
got = resize(a6, 4, 4, "area", False).ravel()
assert np.abs(got - [73, 33, 23, 39, 73, 33, 23, 39, 14, 16, 19, 21, 14, 16, 19, 21]).max() <= 1, got
print("reference matches TF's published values")

def fmt(a):
    return ", ".join(("%.5ff" % v).rstrip("0").replace(".f", ".0f") for v in np.ravel(a))

# The test image: a 4x6 float "ramp with a kink", v = 10*r + c^2 (r, c zero-based).
img = np.array([[10 * r + c * c for c in range(6)] for r in range(4)], float)
print("img", fmt(img))
for m in ("bilinear", "nearest", "bicubic", "area"):
    for aa in (False, True):
        for (h, w) in ((2, 3), (6, 8), (3, 4)):
            print(m, aa, h, w, "{" + fmt(resize(img, h, w, m, aa)) + "}")
