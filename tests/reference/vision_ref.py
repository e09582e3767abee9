#!/usr/bin/python3
"""Independent reference for vlmspec's vision path: HF CLIP-vision + LLaVA-1.5 projector semantics.

Run with Debian's python3 (torch 1.13, numpy, Pillow):
    /usr/bin/python3 tests/reference/vision_ref.py --make-images      # once: the committed test images
    build-vision/tests/test_vision --write-fixture-models tests/reference/fixtures/vision
    /usr/bin/python3 tests/reference/vision_ref.py                    # writes the reference fixtures

It reads the tiny random mmproj GGUF files vlmspec wrote (with its own small GGUF parser), preprocesses
the test images the way LLaVA does (PIL decode, expand2square with the mean colour, Pillow bicubic resize
as CLIPImageProcessor does, rescale, normalise), runs the ViT and the projector in float64 with torch
ops written here from the HF definitions (no vlmspec code), and writes:
    pixels.vsfx             per image: "<img>.u8" (S, S, 3) the resized square image, "<img>.pixels"
                            (3, S, S) the normalised model input
    ref_<model>.vsfx        per image, computed from that image's reference pixels: "<img>.embed" and
                            "<img>.pre_ln" (T, D), "<img>.block.<i>" (T, D) every block's output (T = 1 +
                            G*G, class token first), "<img>.features" (G*G, D), "<img>.importance" (G*G)
                            the class token's attention to each patch in the last block (mean over
                            heads), "<img>.proj" (G*G, O) the projector output, "<img>.pool2.proj" the
                            projector output after 2 x 2 average pooling (ceil mode) of the patch grid.
VSFX layout (little-endian): b"VSFX", u32 version (1), u32 count, then per array: u32 name length,
name bytes, u32 ndim, u32 dims[ndim], float32 data (row-major, last dim fastest).
"""
import argparse
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
FIXDIR = os.path.join(HERE, "fixtures", "vision")
IMAGES = ["img_a.png", "img_b.jpg"]
MODELS = ["tiny_f32", "tiny_f16", "tiny_gelu_f32"]


# ---------------------------------------------------------------------------------------------------
# GGUF (minimal reader for what vlmspec writes: scalar, string and array metadata; F32/F16 tensors)

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.p:self.p + n].decode("utf-8")
        self.p += n
        return s

    def value(self, t):
        if t in _SCALAR:
            return self.take(_SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("<i")
            n = self.take("<Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d" % t)


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(path + ": not a GGUF file")
    r.p = 4
    version = r.take("<I")
    n_tensors = r.take("<q")
    n_kv = r.take("<q")
    assert version in (2, 3)
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("<i"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<q") for _ in range(nd)]
        typ = r.take("<i")
        off = r.take("<Q")
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", 32)
    base = (r.p + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        n = int(np.prod(ne))
        if typ == 0:
            a = np.frombuffer(data, dtype="<f4", count=n, offset=base + off)
        elif typ == 1:
            a = np.frombuffer(data, dtype="<f2", count=n, offset=base + off)
        else:
            raise ValueError("%s: tensor %s has type %d (reference reads F32/F16 only)" % (path, name, typ))
        # ne[0] varies fastest: the numpy shape is ne reversed
        tensors[name] = torch.from_numpy(a.astype(np.float64).reshape(list(reversed(ne))))
    return kv, tensors


# ---------------------------------------------------------------------------------------------------
# Preprocessing (LLaVA-1.5: expand2square with the mean colour, then CLIPImageProcessor)

def expand2square(img, background):
    w, h = img.size
    if w == h:
        return img
    if w > h:
        out = Image.new(img.mode, (w, w), background)
        out.paste(img, (0, (w - h) // 2))
        return out
    out = Image.new(img.mode, (h, h), background)
    out.paste(img, ((h - w) // 2, 0))
    return out


def preprocess(path, size, mean, std):
    img = Image.open(path).convert("RGB")
    img = expand2square(img, tuple(int(m * 255) for m in mean))
    # CLIPImageProcessor: resize the shortest edge to `size` (bicubic), centre-crop size x size
    w, h = img.size
    if min(w, h) != size:
        short, long_ = (w, h) if w <= h else (h, w)
        new_short, new_long = size, int(size * long_ / short)
        nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
        img = img.resize((nw, nh), resample=Image.BICUBIC)
    w, h = img.size
    left, top = (w - size) // 2, (h - size) // 2
    img = img.crop((left, top, left + size, top + size))
    u8 = np.asarray(img, dtype=np.uint8)
    x = u8.astype(np.float64) / 255.0
    x = (x - np.array(mean, dtype=np.float64)) / np.array(std, dtype=np.float64)
    return u8, x.transpose(2, 0, 1).copy()


# ---------------------------------------------------------------------------------------------------
# Model

def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


def forward(kv, T, pixels):
    D = kv["clip.vision.embedding_length"]
    P = kv["clip.vision.patch_size"]
    H = kv["clip.vision.attention.head_count"]
    L = kv["clip.vision.block_count"]
    eps = kv["clip.vision.attention.layer_norm_epsilon"]
    act = (lambda t: F.gelu(t)) if kv.get("clip.use_gelu", False) else quick_gelu
    dh = D // H
    out = {}
    px = torch.from_numpy(pixels)[None]                       # (1, 3, S, S)
    x = F.conv2d(px, T["v.patch_embd.weight"], stride=P)      # (1, D, G, G)
    G = x.shape[-1]
    x = x.flatten(2).transpose(1, 2)[0]                       # (G*G, D), patch (r, c) at r*G + c
    x = torch.cat([T["v.class_embd"][None], x], 0) + T["v.position_embd.weight"]
    out["embed"] = x
    x = F.layer_norm(x, (D,), T["v.pre_ln.weight"], T["v.pre_ln.bias"], eps)
    out["pre_ln"] = x
    n = x.shape[0]
    for i in range(L):
        b = "v.blk.%d." % i
        # MLP naming: llama.cpp's rule - ffn_down with rows of D values is the first matrix
        if T[b + "ffn_down.weight"].shape[-1] == D:
            fc1, fc2 = "ffn_down", "ffn_up"
        else:
            fc1, fc2 = "ffn_up", "ffn_down"
        h = F.layer_norm(x, (D,), T[b + "ln1.weight"], T[b + "ln1.bias"], eps)
        q = F.linear(h, T[b + "attn_q.weight"], T[b + "attn_q.bias"]).view(n, H, dh).transpose(0, 1)
        k = F.linear(h, T[b + "attn_k.weight"], T[b + "attn_k.bias"]).view(n, H, dh).transpose(0, 1)
        v = F.linear(h, T[b + "attn_v.weight"], T[b + "attn_v.bias"]).view(n, H, dh).transpose(0, 1)
        probs = torch.softmax((q * dh ** -0.5) @ k.transpose(1, 2), dim=-1)   # (H, n, n)
        a = (probs @ v).transpose(0, 1).reshape(n, D)
        x = x + F.linear(a, T[b + "attn_out.weight"], T[b + "attn_out.bias"])
        h = F.layer_norm(x, (D,), T[b + "ln2.weight"], T[b + "ln2.bias"], eps)
        h = F.linear(act(F.linear(h, T[b + fc1 + ".weight"], T[b + fc1 + ".bias"])), T[b + fc2 + ".weight"],
                     T[b + fc2 + ".bias"])
        x = x + h
        out["block.%d" % i] = x
        if i == L - 1:
            out["importance"] = probs[:, 0, 1:].mean(0)
    feats = x[1:]
    out["features"] = feats

    def project(f):
        return F.linear(F.gelu(F.linear(f, T["mm.0.weight"], T["mm.0.bias"])), T["mm.2.weight"], T["mm.2.bias"])

    out["proj"] = project(feats)
    grid = feats.transpose(0, 1).reshape(1, D, G, G)
    pooled = F.avg_pool2d(grid, kernel_size=2, stride=2, ceil_mode=True)[0]   # (D, g, g)
    g = pooled.shape[-1]
    # cross-check the edge windows' divisor with an explicit loop
    chk = np.zeros((D, g, g))
    fg = grid[0].numpy()
    for r in range(g):
        for c in range(g):
            chk[:, r, c] = fg[:, 2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(D, -1).mean(1)
    assert np.allclose(chk, pooled.numpy(), atol=1e-12), "avg_pool2d ceil-mode edge handling"
    out["pool2.proj"] = project(pooled.reshape(D, g * g).transpose(0, 1))
    return out


# ---------------------------------------------------------------------------------------------------
# Fixtures

def write_vsfx(path, arrays):
    with open(path, "wb") as f:
        f.write(b"VSFX")
        f.write(struct.pack("<II", 1, len(arrays)))
        for name, a in arrays:
            a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", a.ndim))
            f.write(struct.pack("<%dI" % a.ndim, *a.shape))
            f.write(a.tobytes())


def make_images():
    """The committed test images: odd sizes, one landscape PNG (upscaled by the model's resize), one
    portrait-ish JPEG (downscaled), smooth content plus edges; plus BMP / PPM / PGM copies of the PNG and
    tiny seeds for the fuzz corpus."""
    rng = np.random.RandomState(7)
    h, w = 17, 23
    yy, xx = np.mgrid[0:h, 0:w]
    a = np.zeros((h, w, 3))
    a[..., 0] = 255 * xx / (w - 1)
    a[..., 1] = 255 * yy / (h - 1)
    a[..., 2] = 128 + 100 * np.sin(xx / 3.0) * np.cos(yy / 4.0)
    a[(xx - 15) ** 2 + (yy - 6) ** 2 < 16] = [250, 20, 30]
    a += rng.uniform(-20, 20, a.shape)
    a = np.clip(a, 0, 255).astype(np.uint8)
    Image.fromarray(a).save(os.path.join(FIXDIR, "img_a.png"))
    Image.fromarray(a).save(os.path.join(FIXDIR, "img_a.bmp"))
    Image.fromarray(a).save(os.path.join(FIXDIR, "img_a.ppm"))
    Image.fromarray(a).convert("L").save(os.path.join(FIXDIR, "img_a_grey.pgm"))
    Image.fromarray(a).convert("L").save(os.path.join(FIXDIR, "img_a_grey.png"))
    h, w = 35, 47
    yy, xx = np.mgrid[0:h, 0:w]
    b = np.zeros((h, w, 3))
    b[..., 0] = 60 + 150 * np.exp(-((xx - 30) ** 2 + (yy - 12) ** 2) / 120.0)
    b[..., 1] = 200 - 3 * yy
    b[..., 2] = 90 + 60 * np.cos(xx / 7.0)
    b = np.clip(b, 0, 255).astype(np.uint8)
    Image.fromarray(b).save(os.path.join(FIXDIR, "img_b.jpg"), quality=95, subsampling=0)
    # fuzz seeds: very small images in each format
    corpus = os.path.join(HERE, "..", "..", "fuzz", "corpus", "fuzz_image")
    os.makedirs(corpus, exist_ok=True)
    s = Image.fromarray(a[:6, :9])
    s.save(os.path.join(corpus, "seed.png"))
    s.save(os.path.join(corpus, "seed.bmp"))
    s.save(os.path.join(corpus, "seed.ppm"))
    s.convert("L").save(os.path.join(corpus, "seed.pgm"))
    s.save(os.path.join(corpus, "seed.jpg"), quality=80)
    s.save(os.path.join(corpus, "seed_prog.jpg"), quality=60, progressive=True)
    Image.fromarray(a[:5, :7]).convert("RGBA").save(os.path.join(corpus, "seed_rgba.png"))
    print("wrote images to", FIXDIR, "and", corpus)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--make-images", action="store_true", help="(re)create the committed test images")
    ap.add_argument("--dir", default=FIXDIR, help="fixture directory (default: %(default)s)")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    if args.make_images:
        make_images()
        return 0
    cfgs = {}
    for m in MODELS:
        kv, T = read_gguf(os.path.join(args.dir, m + ".gguf"))
        assert kv["general.architecture"] == "clip" and kv["clip.projector_type"] == "mlp"
        cfgs[m] = (kv, T)
    kv0 = cfgs[MODELS[0]][0]
    S, mean, std = kv0["clip.vision.image_size"], kv0["clip.vision.image_mean"], kv0["clip.vision.image_std"]
    for m in MODELS:  # one pixel file serves every model: same size / mean / std
        kv = cfgs[m][0]
        assert kv["clip.vision.image_size"] == S and kv["clip.vision.image_mean"] == mean
        assert kv["clip.vision.image_std"] == std
    pix_arrays, pixels = [], {}
    for img in IMAGES:
        u8, x = preprocess(os.path.join(args.dir, img), S, mean, std)
        pixels[img] = x
        pix_arrays += [(img + ".u8", u8), (img + ".pixels", x)]
    write_vsfx(os.path.join(args.dir, "pixels.vsfx"), pix_arrays)
    for m in MODELS:
        kv, T = cfgs[m]
        arrays = []
        with torch.no_grad():
            for img in IMAGES:
                # the model sees the float32 pixels the fixture stores, as the C test will
                out = forward(kv, T, pixels[img].astype(np.float32).astype(np.float64))
                for k, v in out.items():
                    arrays.append((img + "." + k, v.numpy()))
        write_vsfx(os.path.join(args.dir, "ref_%s.vsfx" % m), arrays)
        print("wrote", "ref_%s.vsfx" % m, "(%d arrays)" % len(arrays))
    return 0


if __name__ == "__main__":
    sys.exit(main())
