#!/usr/bin/python3
"""PyTorch reference for vlmspec's MSD head trainer (src/train/train_msd.c, tests/test_train_msd.c).

Draws a tiny MSD head (fc 2C -> C with bias; one LLaMA block without input norm: GQA attention with
RoPE on adjacent pairs, post-attention RMSNorm, SwiGLU), a frozen LM head and one batch (two sequences:
target input rows with a run of image rows, target features, uniform input noise, a loss mask) with a
fixed seed, computes in float64 the head outputs, the loss
    sum_p w_p [ SmoothL1(o_p, f_{p+1}) + 0.1 * H(softmax(W f_{p+1}), softmax(W o_p)) ],  w = mask / sum(mask)
and every parameter's gradient, once with image rows decoupled (they bypass fc) and once without, and
writes tests/reference/fixtures/train/msd_head.gguf:
  - keys "msd.*" (the shape) and "ref.{dec,cpl}.{loss,feat,xent}" (float64);
  - "lm_head" (V, C), "batch.emb" / "batch.feat" / "batch.noise" (B, T, C), "batch.is_image" and
    "batch.mask" (B, T) as float32;
  - the weights "w.<name>" (float32: the C test starts from exactly these values), the outputs
    "ref.<dec|cpl>.pred" (B, T - 1, C) and gradients "g.<dec|cpl>.<name>" (tensor names of the head file,
    matrices (out, in) row-major).

Run with Debian's python3-torch: /usr/bin/python3 tests/reference/msd_ref.py
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_ref import GT_F32, GT_F64, GT_STR, GT_U32, gguf_write  # noqa: E402

torch.set_default_dtype(torch.float64)

C, H, KVH, FF, V, EPS, BASE = 16, 4, 2, 24, 32, 1e-5, 10000.0
B, T = 2, 12
S, D = T - 1, C // H
SEED = 20261127

NAMES = ["fc.weight", "fc.bias", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
         "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight",
         "blk.0.ffn_down.weight"]
SHAPES = [(C, 2 * C), (C,), (H * D, C), (KVH * D, C), (KVH * D, C), (C, H * D), (C,), (FF, C), (FF, C), (C, FF)]


def rmsnorm(x, g):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * g


def rope(x, pos):
    """x (B, S, heads, D): rotate adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/D)."""
    inv = BASE ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = pos[:, :, None].double() * inv
    rot = torch.polar(torch.ones_like(ang), ang)[:, :, None, :]
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape)


def head(w, emb, feat, noise, is_img, decoupled):
    nxt = emb[:, 1:]
    x = F.linear(torch.cat([nxt, (feat + noise)[:, :-1]], -1), w["fc.weight"], w["fc.bias"])
    if decoupled:
        x = torch.where(is_img[:, 1:, None] > 0, nxt, x)
    pos = torch.arange(S)[None, :].expand(B, S)
    q = rope(F.linear(x, w["blk.0.attn_q.weight"]).view(B, S, H, D), pos)
    k = rope(F.linear(x, w["blk.0.attn_k.weight"]).view(B, S, KVH, D), pos)
    v = F.linear(x, w["blk.0.attn_v.weight"]).view(B, S, KVH, D)
    k = k.repeat_interleave(H // KVH, dim=2)
    v = v.repeat_interleave(H // KVH, dim=2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    a = torch.softmax(((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(~causal, float("-inf")), -1)
    y = (a @ v).transpose(1, 2).reshape(B, S, H * D)
    r = x + F.linear(y, w["blk.0.attn_output.weight"])
    h = rmsnorm(r, w["blk.0.ffn_norm.weight"])
    mlp = F.linear(F.silu(F.linear(h, w["blk.0.ffn_gate.weight"])) * F.linear(h, w["blk.0.ffn_up.weight"]),
                   w["blk.0.ffn_down.weight"])
    return r + mlp


def loss_of(out, feat, mask, lm_head):
    tgt = feat[:, 1:]
    wts = mask[:, :-1] / mask[:, :-1].sum()
    sl1 = F.smooth_l1_loss(out, tgt, reduction="none", beta=1.0).mean(-1)
    lf = (sl1 * wts).sum()
    tp = torch.softmax(tgt @ lm_head.T, -1)
    lq = torch.log_softmax(out @ lm_head.T, -1)
    lx = (-(tp * lq).sum(-1) * wts).sum()
    return lf + 0.1 * lx, lf, lx


def main():
    g = torch.Generator().manual_seed(SEED)
    f32 = lambda t: t.float().double()  # values the C side reads back exactly
    w = {}
    for name, shp in zip(NAMES, SHAPES):
        if name.endswith("ffn_norm.weight"):
            w[name] = f32(1.0 + 0.1 * torch.randn(shp, generator=g))
        else:
            w[name] = f32(0.3 * torch.randn(shp, generator=g))
    lm_head = f32(0.5 * torch.randn(V, C, generator=g))
    emb = f32(torch.randn(B, T, C, generator=g))
    feat = f32(torch.randn(B, T, C, generator=g))
    feat[0, 5] *= 3.0  # some |o - f| beyond SmoothL1's beta
    noise = f32(0.1 * (torch.rand(B, T, C, generator=g) - 0.5))
    is_img = torch.zeros(B, T)
    is_img[0, 3:7] = 1.0
    mask = torch.zeros(B, T)
    mask[0, 6:T - 1] = 1.0
    mask[1, 2:T - 1] = 1.0
    mask[1, 4] = 0.5  # weights need not be 0/1
    kvs = {
        "general.architecture": (GT_STR, "msd-reference"),
        "msd.embedding_length": (GT_U32, C), "msd.attention.head_count": (GT_U32, H),
        "msd.attention.head_count_kv": (GT_U32, KVH), "msd.feed_forward_length": (GT_U32, FF),
        "msd.vocab_size": (GT_U32, V), "msd.attention.layer_norm_rms_epsilon": (GT_F32, EPS),
        "msd.rope.freq_base": (GT_F32, BASE), "ref.B": (GT_U32, B), "ref.T": (GT_U32, T),
    }
    tensors = [("lm_head", lm_head.numpy()), ("batch.emb", emb.numpy()), ("batch.feat", feat.numpy()),
               ("batch.noise", noise.numpy()), ("batch.is_image", is_img.numpy()), ("batch.mask", mask.numpy())]
    tensors += [("w." + n, w[n].numpy()) for n in NAMES]
    for tag, dec in (("dec", True), ("cpl", False)):
        p = {n: t.clone().requires_grad_(True) for n, t in w.items()}
        out = head(p, emb, feat, noise, is_img, dec)
        total, lf, lx = loss_of(out, feat, mask, lm_head)
        total.backward()
        kvs[f"ref.{tag}.loss"] = (GT_F64, total.item())
        kvs[f"ref.{tag}.feat"] = (GT_F64, lf.item())
        kvs[f"ref.{tag}.xent"] = (GT_F64, lx.item())
        tensors.append((f"ref.{tag}.pred", out.detach().numpy()))
        tensors += [(f"g.{tag}.{n}", p[n].grad.numpy()) for n in NAMES]
        print(f"{tag}: loss {total.item():.6f} (feat {lf.item():.6f}, xent {lx.item():.6f})")
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "fixtures", "train", "msd_head.gguf")
    gguf_write(out, kvs, tensors)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
