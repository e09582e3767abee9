#!/usr/bin/python3
"""What an LM can read from the average of a picture's image rows (docs/target.md).

    scripts/image_rows_probe.py WORLD MMPROJ [--fit 600] [--test 300] [--vlmspec build/vlmspec]

Takes the world's training pictures of shapes scenes with exactly one object, runs `vlmspec embed-image`
with MMPROJ's tower and projector on each (the rows the LM receives), and over the mean of each
picture's rows (what attention spread evenly over the image rows passes on) reports
  - a linear probe (ridge regression on standardised means, --fit pictures, scored on --test others) of
    the object's colour, shape, size and cell and of the background;
  - each attribute's between-class variance as a share of the means' total variance: gradient descent
    learns a readout of the large shares first.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("world")
    ap.add_argument("mmproj")
    ap.add_argument("--fit", type=int, default=600)
    ap.add_argument("--test", type=int, default=300)
    ap.add_argument("--vlmspec", default="build/vlmspec")
    a = ap.parse_args()
    pics = pictures(a.world, a.fit + a.test)
    with tempfile.TemporaryDirectory() as tmp:
        M = mean_rows(a.vlmspec, a.mmproj, pics, tmp)
    fit, test = M[: a.fit], M[a.fit:]
    mu, sd = fit.mean(0), fit.std(0) + 1e-6
    F, T = (fit - mu) / sd, (test - mu) / sd
    C = M - M.mean(0)
    total = (C ** 2).sum(1).mean()
    print("%d + %d one-object pictures of %s, rows of %s" % (a.fit, a.test, a.world, a.mmproj))
    print("%-14s %9s %16s" % ("attribute", "probe", "variance share"))
    for name, get in ATTRS:
        y = np.array([get(s) for _, s in pics])
        classes = sorted(set(y[: a.fit]))
        Y = np.array([[v == c for c in classes] for v in y[: a.fit]], dtype=np.float64)
        W = np.linalg.solve(F.T @ F + 10.0 * np.eye(F.shape[1]), F.T @ Y)
        pred = np.array(classes)[(T @ W).argmax(1)]
        acc = float(np.mean(pred == y[a.fit:]))
        between = sum((y == c).sum() * (C[y == c].mean(0) ** 2).sum() for c in set(y)) / len(y)
        print("%-14s %8.1f%% %15.1f%%" % (name, 100 * acc, 100 * between / total))


if __name__ == "__main__":
    main()
