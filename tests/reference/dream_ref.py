#!/usr/bin/python3
"""PyTorch reference for vlmspec's DREAM trainer (src/train/train_dream.c, tests/test_train_dream.c).

Draws a tiny DREAM draft model (block 1: a LLaMA block with input norm, GQA attention with RoPE on
adjacent pairs, SwiGLU; block 2: queries from the draft rows, keys and values from the target features
of earlier rows, per-head RMSNorm of q and k, no RoPE, both branches gated by tanh(g); block 3 as block 1;
the final RMSNorm), a frozen LM head and one batch (two sequences: input rows, target features, uniform
feature noise, intermediate targets, a loss mask) with a fixed seed, computes in float64 the draft
features d, block 2's outputs x2, the loss
    sum_p w_p [ 0.2 SmoothL1(d_p, f_p) + 0.2 SmoothL1(x2_p, m_p) + KL(softmax(W f_p) || softmax(W d_p)) ]
(w = mask / sum(mask)) and every parameter's gradient, and writes
tests/reference/fixtures/train/dream_head.gguf:
  - keys "dream.*" (the shape) and "ref.{loss,feat,mid,kl}" (float64);
  - "lm_head" (V, C), "batch.emb" / "batch.feat" / "batch.noise" / "batch.mid" (B, T, C), "batch.mask"
    (B, T) as float32;
  - the weights "w.<name>" (float32: the C test starts from exactly these values), the outputs "ref.pred"
    and "ref.mid_out" (B, T, C) and the gradients "g.<name>" (tensor names of a DREAM file, matrices
    (out, in) row-major).

Run with Debian's python3-torch: /usr/bin/python3 tests/reference/dream_ref.py
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_ref import GT_F32, GT_F64, GT_STR, GT_U32, gguf_write  # noqa: E402

torch.set_default_dtype(torch.float64)

C, H, KVH, FF, V, EPS, BASE = 16, 4, 2, 24, 32, 1e-5, 10000.0
B, T = 2, 10
D = C // H
SEED = 20261128

BLOCK = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
         "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]
BLOCK_SHAPES = [(C,), (H * D, C), (KVH * D, C), (KVH * D, C), (C, H * D), (C,), (FF, C), (FF, C), (C, FF)]
XBLOCK = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
          "attn_q_norm.weight", "attn_k_norm.weight", "attn_tanh_gate", "ffn_norm.weight", "ffn_gate.weight",
          "ffn_up.weight", "ffn_down.weight", "ffn_tanh_gate"]
XBLOCK_SHAPES = [(C,), (H * D, C), (KVH * D, C), (KVH * D, C), (C, H * D), (D,), (D,), (1,), (C,), (FF, C),
                 (FF, C), (C, FF), (1,)]
NAMES = (["blk.0." + n for n in BLOCK] + ["xblk." + n for n in XBLOCK] + ["blk.1." + n for n in BLOCK] +
         ["final_norm.weight"])
SHAPES = BLOCK_SHAPES + XBLOCK_SHAPES + BLOCK_SHAPES + [(C,)]


def rmsnorm(x, g):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * g


def rope(x, pos):
    """x (B, T, heads, D): rotate adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/D)."""
    inv = BASE ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = pos[:, :, None].double() * inv
    rot = torch.polar(torch.ones_like(ang), ang)[:, :, None, :]
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], D // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape)


def mlp(w, pre, h):
    return F.linear(F.silu(F.linear(h, w[pre + "ffn_gate.weight"])) * F.linear(h, w[pre + "ffn_up.weight"]),
                    w[pre + "ffn_down.weight"])


def block(w, pre, x):
    pos = torch.arange(T)[None, :].expand(B, T)
    h = rmsnorm(x, w[pre + "attn_norm.weight"])
    q = rope(F.linear(h, w[pre + "attn_q.weight"]).view(B, T, H, D), pos)
    k = rope(F.linear(h, w[pre + "attn_k.weight"]).view(B, T, KVH, D), pos)
    v = F.linear(h, w[pre + "attn_v.weight"]).view(B, T, KVH, D)
    k = k.repeat_interleave(H // KVH, dim=2)
    v = v.repeat_interleave(H // KVH, dim=2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    a = torch.softmax(((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(~causal, float("-inf")), -1)
    y = (a @ v).transpose(1, 2).reshape(B, T, H * D)
    r = x + F.linear(y, w[pre + "attn_output.weight"])
    return r + mlp(w, pre, rmsnorm(r, w[pre + "ffn_norm.weight"]))


def cross(w, x, kin):
    p = "xblk."
    q = rmsnorm(F.linear(rmsnorm(x, w[p + "attn_norm.weight"]), w[p + "attn_q.weight"]).view(B, T, H, D),
                w[p + "attn_q_norm.weight"])
    k = rmsnorm(F.linear(kin, w[p + "attn_k.weight"]).view(B, T, KVH, D), w[p + "attn_k_norm.weight"])
    v = F.linear(kin, w[p + "attn_v.weight"]).view(B, T, KVH, D)
    k = k.repeat_interleave(H // KVH, dim=2)
    v = v.repeat_interleave(H // KVH, dim=2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))
    before = torch.ones(T, T, dtype=torch.bool).tril(-1)  # query t sees the features of rows j < t
    s = ((q @ k.transpose(-1, -2)) / math.sqrt(D)).masked_fill(~before, float("-inf"))
    a = torch.softmax(s[:, :, 1:, :], -1)  # row 0 sees nothing: its branch output is 0
    y = torch.cat([torch.zeros(B, H, 1, D), a @ v], 2).transpose(1, 2).reshape(B, T, H * D)
    x2 = x + torch.tanh(w[p + "attn_tanh_gate"]) * F.linear(y, w[p + "attn_output.weight"])
    return x2 + torch.tanh(w[p + "ffn_tanh_gate"]) * mlp(w, p, rmsnorm(x2, w[p + "ffn_norm.weight"]))


def model(w, emb, kin):
    x1 = block(w, "blk.0.", emb)
    x2 = cross(w, x1, kin)
    x3 = block(w, "blk.1.", x2)
    return rmsnorm(x3, w["final_norm.weight"]), x2


def main():
    g = torch.Generator().manual_seed(SEED)
    f32 = lambda t: t.float().double()  # values the C side reads back exactly
    w = {}
    for name, shp in zip(NAMES, SHAPES):
        if name.endswith("norm.weight"):
            w[name] = f32(1.0 + 0.1 * torch.randn(shp, generator=g))
        elif name.endswith("tanh_gate"):
            w[name] = f32(0.5 * torch.randn(shp, generator=g))
        else:
            w[name] = f32(0.3 * torch.randn(shp, generator=g))
    lm_head = f32(0.5 * torch.randn(V, C, generator=g))
    emb = f32(torch.randn(B, T, C, generator=g))
    feat = f32(torch.randn(B, T, C, generator=g))
    feat[0, 5] *= 3.0  # some |d - f| beyond SmoothL1's beta
    noise = f32(0.1 * (torch.rand(B, T, C, generator=g) - 0.5))
    mid = f32(torch.randn(B, T, C, generator=g))
    mask = torch.zeros(B, T)
    mask[0, 4:T] = 1.0
    mask[1, 1:T] = 1.0
    mask[1, 3] = 0.5  # weights need not be 0/1
    kvs = {
        "general.architecture": (GT_STR, "dream-reference"),
        "dream.embedding_length": (GT_U32, C), "dream.attention.head_count": (GT_U32, H),
        "dream.attention.head_count_kv": (GT_U32, KVH), "dream.feed_forward_length": (GT_U32, FF),
        "dream.vocab_size": (GT_U32, V), "dream.attention.layer_norm_rms_epsilon": (GT_F32, EPS),
        "dream.rope.freq_base": (GT_F32, BASE), "ref.B": (GT_U32, B), "ref.T": (GT_U32, T),
    }
    tensors = [("lm_head", lm_head.numpy()), ("batch.emb", emb.numpy()), ("batch.feat", feat.numpy()),
               ("batch.noise", noise.numpy()), ("batch.mid", mid.numpy()), ("batch.mask", mask.numpy())]
    tensors += [("w." + n, w[n].numpy()) for n in NAMES]
    p = {n: t.clone().requires_grad_(True) for n, t in w.items()}
    d, x2 = model(p, emb, feat + noise)
    wts = mask / mask.sum()
    lf = (F.smooth_l1_loss(d, feat, reduction="none", beta=1.0).mean(-1) * wts).sum()
    lm = (F.smooth_l1_loss(x2, mid, reduction="none", beta=1.0).mean(-1) * wts).sum()
    lt = torch.log_softmax(feat @ lm_head.T, -1)
    lq = torch.log_softmax(d @ lm_head.T, -1)
    lk = ((lt.exp() * (lt - lq)).sum(-1) * wts).sum()
    total = 0.2 * lf + 0.2 * lm + lk
    total.backward()
    for key, val in (("loss", total), ("feat", lf), ("mid", lm), ("kl", lk)):
        kvs["ref." + key] = (GT_F64, val.item())
    tensors += [("ref.pred", d.detach().numpy()), ("ref.mid_out", x2.detach().numpy())]
    tensors += [("g." + n, p[n].grad.numpy()) for n in NAMES]
    print(f"loss {total.item():.6f} (feat {lf.item():.6f}, mid {lm.item():.6f}, kl {lk.item():.6f})")
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "fixtures", "train", "dream_head.gguf")
    gguf_write(out, kvs, tensors)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
