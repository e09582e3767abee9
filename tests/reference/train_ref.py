#!/usr/bin/python3
"""PyTorch reference for vlmspec's trainer (tests/test_train_parity.c).

Builds a tiny LLaVA-style VLM -- a 2-block ViT (class token, position embeddings, pre-LayerNorm,
quick-GELU, a LayerNorm on the last block's patch rows: v.post_ln), the LLaVA projector (mm.0 -> exact GELU -> mm.2) and a 2-layer LLaMA LM (RMSNorm,
grouped-query attention, RoPE on adjacent pairs, SwiGLU) -- from weights drawn here with a fixed
seed, runs one batch (three images in two sequences, text tokens, a loss mask) in float64, and writes
tests/reference/fixtures/train/tiny_vlm.gguf with:
  - the config (keys "vlm.*") and the schedule / optimiser settings (keys "ref.*"),
  - the batch: pixels (tensor "batch.pixels"), tokens / img_row / targets / loss_mask (arrays),
  - the initial weights "w.<name>" (float32: the C test starts from exactly these values),
  - the logits "ref.logits" (B, T, V), the loss, and every gradient "g.<name>",
  - 10 AdamW steps (warmup + cosine schedule, clipping by global norm, decoupled weight decay on
    matrices and embeddings): the loss and gradient norm before each step and the final weights
    "f.<name>".
Tensor names and layouts are the trainer's (src/train/train_model.c): per-layer tensors stacked on a
leading layer axis, matrices (out, in) row-major.

Run with Debian's python3-torch: /usr/bin/python3 tests/reference/train_ref.py
"""
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

# ----------------------------------------------------------------------------------------------
# config (small, non-square everywhere so a transposed matrix cannot go unnoticed)
CFG = dict(image_size=8, patch_size=4, v_width=8, v_ffn=20, v_heads=2, v_blocks=2, v_eps=1e-5, v_post_ln=1,
           vocab=32, width=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn=24, max_seq=16,
           rms_eps=1e-5, rope_base=10000.0)
MEAN = [0.5, 0.5, 0.5]
STD = [0.25, 0.25, 0.25]
OPT = dict(lr_max=1e-2, lr_min=1e-3, warmup=2, total=10, beta1=0.9, beta2=0.95, eps=1e-8,
           weight_decay=0.1, clip=0.0)  # clip is set below from the first gradient norm
N_STEPS = 10
SEED = 20240611

S, P, W, VF, VH, VL = (CFG[k] for k in ("image_size", "patch_size", "v_width", "v_ffn", "v_heads", "v_blocks"))
V, C, L, H, KVH, FF = (CFG[k] for k in ("vocab", "width", "n_layers", "n_heads", "n_kv_heads", "ffn"))
G = S // P
NP = G * G
D = C // H

# (name, shape, init, decay) in the trainer's table order. init: ("mat", fan_in) | ("emb", std) |
# ("bias",) | ("gain",)
SPECS = [
    ("v.patch_embd", (W, 3 * P * P), ("mat", 3 * P * P), True),
    ("v.class_embd", (W,), ("emb", 0.5), False),
    ("v.position_embd", (NP + 1, W), ("emb", 0.5), True),
    ("v.pre_ln.weight", (W,), ("gain",), False),
    ("v.pre_ln.bias", (W,), ("bias",), False),
    ("v.ln1.weight", (VL, W), ("gain",), False),
    ("v.ln1.bias", (VL, W), ("bias",), False),
    ("v.attn_q.weight", (VL, W, W), ("mat", W), True),
    ("v.attn_q.bias", (VL, W), ("bias",), False),
    ("v.attn_k.weight", (VL, W, W), ("mat", W), True),
    ("v.attn_k.bias", (VL, W), ("bias",), False),
    ("v.attn_v.weight", (VL, W, W), ("mat", W), True),
    ("v.attn_v.bias", (VL, W), ("bias",), False),
    ("v.attn_out.weight", (VL, W, W), ("mat", W), True),
    ("v.attn_out.bias", (VL, W), ("bias",), False),
    ("v.ln2.weight", (VL, W), ("gain",), False),
    ("v.ln2.bias", (VL, W), ("bias",), False),
    ("v.fc1.weight", (VL, VF, W), ("mat", W), True),
    ("v.fc1.bias", (VL, VF), ("bias",), False),
    ("v.fc2.weight", (VL, W, VF), ("mat", VF), True),
    ("v.fc2.bias", (VL, W), ("bias",), False),
    ("v.post_ln.weight", (W,), ("gain",), False),
    ("v.post_ln.bias", (W,), ("bias",), False),
    ("mm.0.weight", (C, W), ("mat", W), True),
    ("mm.0.bias", (C,), ("bias",), False),
    ("mm.2.weight", (C, C), ("mat", C), True),
    ("mm.2.bias", (C,), ("bias",), False),
    ("token_embd", (V, C), ("emb", 1.0), True),
    ("attn_norm", (L, C), ("gain",), False),
    ("attn_q", (L, H * D, C), ("mat", C), True),
    ("attn_k", (L, KVH * D, C), ("mat", C), True),
    ("attn_v", (L, KVH * D, C), ("mat", C), True),
    ("attn_output", (L, C, H * D), ("mat", H * D), True),
    ("ffn_norm", (L, C), ("gain",), False),
    ("ffn_gate", (L, FF, C), ("mat", C), True),
    ("ffn_up", (L, FF, C), ("mat", C), True),
    ("ffn_down", (L, C, FF), ("mat", FF), True),
    ("output_norm", (C,), ("gain",), False),
    ("output", (V, C), ("mat", C), True),
]

# Gradients that are zero in exact arithmetic: a bias added to every key shifts all of a query's
# attention scores equally, which softmax ignores. The C test checks these by magnitude.
ZERO_GRAD = ["v.attn_k.bias"]


def init_weights(rng):
    w = {}
    for name, shape, init, _ in SPECS:
        if init[0] == "mat":
            a = rng.standard_normal(shape) / math.sqrt(init[1])
        elif init[0] == "emb":
            a = rng.standard_normal(shape) * init[1]
        elif init[0] == "bias":
            a = rng.standard_normal(shape) * 0.1
        else:
            a = 1.0 + rng.standard_normal(shape) * 0.1
        w[name] = a.astype(np.float32)  # the C side holds float32: start both from these values
    return w


# ----------------------------------------------------------------------------------------------
# batch: sequence 0 = BOS, image 0, text, image 1, text; sequence 1 = BOS, image 2, text, padding
B, T, NI = 2, 16, 3


def make_batch(rng):
    pixels = rng.standard_normal((NI, 3, S, S)).astype(np.float32)
    tokens = np.full((B, T), -1, np.int32)
    img_row = np.full((B, T), -1, np.int32)
    layout = [
        [("t", 1), ("i", 0), ("t", 2), ("i", 1), ("t", 5)],
        [("t", 1), ("i", 2), ("t", 6), ("pad", 5)],
    ]
    mask = np.zeros((B, T), np.float32)
    for b, segs in enumerate(layout):
        t = 0
        for kind, n in segs:
            if kind == "i":
                for p in range(NP):
                    img_row[b, t] = n * NP + p
                    t += 1
            else:
                for _ in range(n):
                    tokens[b, t] = rng.integers(0, V) if kind == "t" else 0
                    t += 1
        assert t == T
    # targets: the next row's token; counted where the next row is a real text token (not padding)
    targets = np.zeros((B, T), np.int32)
    for b, segs in enumerate(layout):
        n_real = T - (5 if b == 1 else 0)
        for t in range(T - 1):
            if t + 1 < n_real and tokens[b, t + 1] >= 0:
                targets[b, t] = tokens[b, t + 1]
                mask[b, t] = 1.0
    return pixels, tokens, img_row, targets, mask


# ----------------------------------------------------------------------------------------------
# the model (float64, written independently of the C code with torch's own ops)
def vision(w, px):
    x = F.conv2d(px, w["v.patch_embd"].view(W, 3, P, P), stride=P)  # (NI, W, G, G)
    x = x.flatten(2).transpose(1, 2)                                 # (NI, NP, W), raster order
    x = torch.cat([w["v.class_embd"].expand(px.shape[0], 1, W), x], 1) + w["v.position_embd"]
    x = F.layer_norm(x, (W,), w["v.pre_ln.weight"], w["v.pre_ln.bias"], CFG["v_eps"])
    dv = W // VH
    for l in range(VL):
        h = F.layer_norm(x, (W,), w["v.ln1.weight"][l], w["v.ln1.bias"][l], CFG["v_eps"])
        q = F.linear(h, w["v.attn_q.weight"][l], w["v.attn_q.bias"][l])
        k = F.linear(h, w["v.attn_k.weight"][l], w["v.attn_k.bias"][l])
        v = F.linear(h, w["v.attn_v.weight"][l], w["v.attn_v.bias"][l])
        n, t, _ = q.shape
        q, k, v = (z.view(n, t, VH, dv).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dv), -1)
        y = (a @ v).transpose(1, 2).reshape(n, t, W)
        x = x + F.linear(y, w["v.attn_out.weight"][l], w["v.attn_out.bias"][l])
        h = F.layer_norm(x, (W,), w["v.ln2.weight"][l], w["v.ln2.bias"][l], CFG["v_eps"])
        h = F.linear(h, w["v.fc1.weight"][l], w["v.fc1.bias"][l])
        h = h * torch.sigmoid(1.702 * h)  # quick-GELU
        x = x + F.linear(h, w["v.fc2.weight"][l], w["v.fc2.bias"][l])
    f = x[:, 1:]                                                      # drop the class token
    f = F.layer_norm(f, (W,), w["v.post_ln.weight"], w["v.post_ln.bias"], CFG["v_eps"])
    h = F.gelu(F.linear(f, w["mm.0.weight"], w["mm.0.bias"]))          # exact (erf) GELU
    return F.linear(h, w["mm.2.weight"], w["mm.2.bias"])              # (NI, NP, C)


def rmsnorm(x, g):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + CFG["rms_eps"]) * g


def rope(x, pos):
    """x (B, T, heads, D): rotate adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/D)."""
    inv = CFG["rope_base"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = pos[:, :, None].double() * inv                             # (B, T, D/2)
    rot = torch.polar(torch.ones_like(ang), ang)[:, :, None, :]      # e^{i ang}
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape)


def lm(w, rows):
    """rows (B, T, C) input embeddings -> logits (B, T, V)."""
    x = rows
    pos = torch.arange(T)[None, :].expand(B, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = rmsnorm(x, w["attn_norm"][l])
        q = F.linear(h, w["attn_q"][l]).view(B, T, H, D)
        k = F.linear(h, w["attn_k"][l]).view(B, T, KVH, D)
        v = F.linear(h, w["attn_v"][l]).view(B, T, KVH, D)
        q, k = rope(q, pos), rope(k, pos)
        k = k.repeat_interleave(H // KVH, dim=2)                       # query head h -> kv head h // (H/KVH)
        v = v.repeat_interleave(H // KVH, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))                 # (B, heads, T, D)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
        y = (a @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + F.linear(y, w["attn_output"][l])
        h = rmsnorm(x, w["ffn_norm"][l])
        x = x + F.linear(F.silu(F.linear(h, w["ffn_gate"][l])) * F.linear(h, w["ffn_up"][l]), w["ffn_down"][l])
    return F.linear(rmsnorm(x, w["output_norm"]), w["output"])


def forward(w, batch):
    pixels, tokens, img_row, targets, mask = batch
    img = vision(w, pixels).reshape(NI * NP, C)
    tok = tokens.clamp(min=0)
    rows = torch.where((img_row >= 0)[..., None], img[img_row.clamp(min=0)], w["token_embd"][tok])
    logits = lm(w, rows)
    ce = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(-1).long(), reduction="none")
    loss = (ce * mask.reshape(-1)).sum() / mask.sum()
    return logits, loss


def lr_at(step):
    if step < OPT["warmup"]:
        return OPT["lr_max"] * (step + 1) / OPT["warmup"]
    span = OPT["total"] - 1 - OPT["warmup"]
    if step >= OPT["total"] - 1:
        return OPT["lr_min"]
    prog = (step - OPT["warmup"]) / span
    return OPT["lr_min"] + 0.5 * (OPT["lr_max"] - OPT["lr_min"]) * (1 + math.cos(math.pi * prog))


# ----------------------------------------------------------------------------------------------
# minimal GGUF v3 writer (the format in docs/formats.md, 'GGUF container')
GT_U32, GT_I32, GT_F32, GT_STR, GT_ARR, GT_F64 = 4, 5, 6, 8, 9, 12


def gguf_write(path, kvs, tensors):
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, (typ, val) in kvs.items():
        out += s(key) + struct.pack("<i", typ)
        if typ == GT_U32:
            out += struct.pack("<I", val)
        elif typ == GT_F32:
            out += struct.pack("<f", val)
        elif typ == GT_F64:
            out += struct.pack("<d", val)
        elif typ == GT_STR:
            out += s(val)
        elif typ == GT_ARR:
            et, arr = val
            fmt = {GT_I32: "<i", GT_F32: "<f", GT_F64: "<d"}[et]
            out += struct.pack("<iQ", et, len(arr)) + b"".join(struct.pack(fmt, x) for x in arr)
        else:
            raise ValueError(typ)
    offset = 0
    blobs = []
    for name, arr in tensors:
        a = np.ascontiguousarray(arr, dtype=np.float32)
        ne = list(reversed(a.shape))
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", n) for n in ne)
        out += struct.pack("<iQ", 0, offset)  # F32
        blob = a.tobytes()
        blobs.append(blob)
        offset += (len(blob) + 31) // 32 * 32
    out += b"\0" * ((-len(out)) % 32)
    for blob in blobs:
        out += blob + b"\0" * ((-len(blob)) % 32)
    with open(path, "wb") as f:
        f.write(out)


def main():
    rng = np.random.default_rng(SEED)
    w0 = init_weights(rng)
    pixels, tokens, img_row, targets, mask = make_batch(rng)
    batch = (torch.from_numpy(pixels).double(), torch.from_numpy(tokens).long(), torch.from_numpy(img_row).long(),
             torch.from_numpy(targets).long(), torch.from_numpy(mask).double())

    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in w0.items()}
    logits, loss = forward(params, batch)
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in params.items()}
    gnorm0 = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    OPT["clip"] = round(0.6 * gnorm0, 3)  # clipping is active in the first steps

    # 10 AdamW steps from the same start
    for p in params.values():
        p.grad = None
    decay = [params[n] for n, _, _, d in SPECS if d]
    no_decay = [params[n] for n, _, _, d in SPECS if not d]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr_max"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    losses, norms = [], []
    for step in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = forward(params, batch)
        l.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), OPT["clip"])))
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.step()
        losses.append(float(l))
    print(f"loss {float(loss):.6f}  grad norm {gnorm0:.4f}  clip {OPT['clip']}")
    print("AdamW losses:", " ".join(f"{x:.5f}" for x in losses))
    print("grad norms:  ", " ".join(f"{x:.4f}" for x in norms))

    kvs = {
        "general.architecture": (GT_STR, "vlmspec-train-fixture"),
        "general.description": (GT_STR, "tests/reference/train_ref.py: tiny VLM, one batch, float64 reference"),
    }
    for k, v in CFG.items():
        kvs["vlm." + k] = (GT_F32, float(v)) if isinstance(v, float) else (GT_U32, int(v))
    kvs["vlm.image_mean"] = (GT_ARR, (GT_F32, MEAN))
    kvs["vlm.image_std"] = (GT_ARR, (GT_F32, STD))
    for k, v in OPT.items():
        kvs["ref." + k] = (GT_F64, float(v))
    kvs["ref.n_steps"] = (GT_U32, N_STEPS)
    kvs["ref.loss"] = (GT_F64, float(loss))
    kvs["ref.adam_losses"] = (GT_ARR, (GT_F64, losses))
    kvs["ref.grad_norms"] = (GT_ARR, (GT_F64, norms))
    kvs["ref.zero_grad"] = (GT_STR, ",".join(ZERO_GRAD))
    kvs["batch.B"] = (GT_U32, B)
    kvs["batch.T"] = (GT_U32, T)
    kvs["batch.n_images"] = (GT_U32, NI)
    kvs["batch.tokens"] = (GT_ARR, (GT_I32, tokens.reshape(-1).tolist()))
    kvs["batch.img_row"] = (GT_ARR, (GT_I32, img_row.reshape(-1).tolist()))
    kvs["batch.targets"] = (GT_ARR, (GT_I32, targets.reshape(-1).tolist()))
    kvs["batch.loss_mask"] = (GT_ARR, (GT_F32, mask.reshape(-1).tolist()))
    tensors = [("batch.pixels", pixels), ("ref.logits", logits.detach().numpy())]
    tensors += [("w." + n, w0[n]) for n, _, _, _ in SPECS]
    tensors += [("g." + n, grads[n].numpy()) for n, _, _, _ in SPECS]
    tensors += [("f." + n, params[n].detach().numpy()) for n, _, _, _ in SPECS]
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "fixtures", "train", "tiny_vlm.gguf")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    gguf_write(out, kvs, tensors)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
