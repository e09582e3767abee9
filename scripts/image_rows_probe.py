#!/usr/bin/python3
"""What an LM can read from the average of a picture's image rows (docs/target.md).

    scripts/image_rows_probe.py WORLD MMPROJ [--fit 600] [--test 300] [--vlmspec build/vlmspec]
    scripts/image_rows_probe.py WORLD MMPROJ --patches 150 [--vlmspec build/vlmspec]

Takes the world's training pictures of shapes scenes with exactly one object, runs `vlmspec embed-image`
with MMPROJ's tower and projector on each (the rows the LM receives), and over the mean of each
picture's rows (what attention spread evenly over the image rows passes on) reports
  - a linear probe (ridge regression on standardised means, --fit pictures, scored on --test others) of
    the object's colour, shape, size and cell and of the background;
  - each attribute's between-class variance as a share of the means' total variance: gradient descent
    learns a readout of the large shares first.
With --patches N it probes each patch instead, on N shapes pictures of the world's test split (any
number of objects): the colour of the object a patch shows (the palette colour of most of its pixels
that lie near one; patches with fewer than 12 such pixels of 64 are left out), read linearly from the
tower's patch features and from the projected rows (70/30 split of the patches). A projector that keeps
what the tower knows scores the same on both; the patch-level loss shows what a lookup of one object
(attention on its patches) can still read. Needs python3-pil for the pixels.
Needs numpy (Debian python3-numpy; run with /usr/bin/python3).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ATTRS = [
    ("object colour", lambda s: s["objects"][0]["color"]),
    ("object shape", lambda s: s["objects"][0]["shape"]),
    ("object size", lambda s: s["objects"][0]["size"]),
    ("object cell", lambda s: s["objects"][0]["cell"]),
    ("background", lambda s: s["bg"]),
]


def pictures(world, n):
    out = []
    with open(os.path.join(world, "train.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            for img, sc in zip(d["images"], d["scenes"]):
                if sc["kind"] == "shapes" and len(sc["objects"]) == 1:
                    out.append((os.path.join(world, img), sc))
            if len(out) >= n:
                break
    if len(out) < n:
        sys.exit("%s: %d one-object shapes pictures, %d wanted" % (world, len(out), n))
    return out[:n]


def mean_rows(vlmspec, mmproj, pics, tmp):
    M = []
    for img, _ in pics:
        prefix = os.path.join(tmp, "e")
        subprocess.run([vlmspec, "embed-image", "--mmproj", mmproj, "--image", img, "-o", prefix, "-t", "1"],
                       check=True, capture_output=True)
        with open(prefix + ".json") as f:
            width = json.load(f)["width"]
        M.append(np.fromfile(prefix + ".f32", dtype=np.float32).reshape(-1, width).mean(0))
    return np.array(M, dtype=np.float64)


PALETTE = np.array([[215, 38, 38], [243, 137, 18], [232, 200, 20], [38, 158, 58], [36, 84, 220],
                    [138, 56, 190], [240, 118, 178], [128, 78, 36], [24, 24, 24]], dtype=np.float64)


def ridge_accuracy(X, y, split):
    """Held-out accuracy of a ridge classifier on standardised X (fit on the first split rows)."""
    mu, sd = X[:split].mean(0), X[:split].std(0) + 1e-6
    F, T = (X[:split] - mu) / sd, (X[split:] - mu) / sd
    classes = sorted(set(y[:split]))
    Y = np.array([[v == c for c in classes] for v in y[:split]], dtype=np.float64)
    W = np.linalg.solve(F.T @ F + 10.0 * np.eye(F.shape[1]), F.T @ Y)
    return float(np.mean(np.array(classes)[(T @ W).argmax(1)] == y[split:]))


def patch_probe(a):
    from PIL import Image
    feats, rows, labels = [], [], []
    n = 0
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(a.world, "test.jsonl")) as f:
        prefix = os.path.join(tmp, "e")
        for line in f:
            d = json.loads(line)
            if n >= a.patches:
                break
            if d["scenes"][0]["kind"] != "shapes":
                continue
            img = os.path.join(a.world, d["images"][0])
            subprocess.run([a.vlmspec, "embed-image", "--mmproj", a.mmproj, "--image", img, "-o", prefix,
                            "--features", "-t", "1"], check=True, capture_output=True)
            with open(prefix + ".json") as jf:
                desc = json.load(jf)
            gh, gw = desc["grid"]
            R = np.fromfile(prefix + ".f32", dtype=np.float32).reshape(gh * gw, -1)
            V = np.fromfile(prefix + ".features.f32", dtype=np.float32).reshape(gh * gw, -1)
            px = np.asarray(Image.open(img).convert("RGB"), dtype=np.float64)
            if px.shape[0] != px.shape[1] or px.shape[0] % gh:
                sys.exit("%s: %dx%d pixels do not tile the tower's %dx%d grid (resized pictures are not "
                         "supported)" % (img, px.shape[1], px.shape[0], gw, gh))
            P = px.shape[0] // gh
            for i in range(gh * gw):
                r, c = divmod(i, gw)
                p = px[r * P:(r + 1) * P, c * P:(c + 1) * P].reshape(-1, 3)
                dist = ((p[:, None, :] - PALETTE[None]) ** 2).sum(-1)
                near = dist.min(1) < 300
                if near.sum() < 12 * P * P // 64:
                    continue
                labels.append(np.bincount(dist.argmin(1)[near], minlength=len(PALETTE)).argmax())
                feats.append(V[i])
                rows.append(R[i])
            n += 1
    y = np.array(labels)
    split = len(y) * 7 // 10
    print("%d patches showing an object in %d shapes pictures of %s's test split, %s" % (len(y), n, a.world,
                                                                                         a.mmproj))
    print("object colour per patch: tower features %.1f%%, projected rows %.1f%%" % (
        100 * ridge_accuracy(np.array(feats, dtype=np.float64), y, split),
        100 * ridge_accuracy(np.array(rows, dtype=np.float64), y, split)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("world")
    ap.add_argument("mmproj")
    ap.add_argument("--fit", type=int, default=600)
    ap.add_argument("--test", type=int, default=300)
    ap.add_argument("--patches", type=int, default=0)
    ap.add_argument("--vlmspec", default="build/vlmspec")
    a = ap.parse_args()
    if a.patches > 0:
        patch_probe(a)
        return
    pics = pictures(a.world, a.fit + a.test)
    with tempfile.TemporaryDirectory() as tmp:
        M = mean_rows(a.vlmspec, a.mmproj, pics, tmp)
    C = M - M.mean(0)
    total = (C ** 2).sum(1).mean()
    print("%d + %d one-object pictures of %s, rows of %s" % (a.fit, a.test, a.world, a.mmproj))
    print("%-14s %9s %16s" % ("attribute", "probe", "variance share"))
    for name, get in ATTRS:
        y = np.array([get(s) for _, s in pics])
        acc = ridge_accuracy(M, y, a.fit)
        between = sum((y == c).sum() * (C[y == c].mean(0) ** 2).sum() for c in set(y)) / len(y)
        print("%-14s %8.1f%% %15.1f%%" % (name, 100 * acc, 100 * between / total))


if __name__ == "__main__":
    main()
