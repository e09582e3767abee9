#!/usr/bin/env python3
"""How fast does the target's LM learn to look things up? A PyTorch mirror of vlmspec's LM for sweeps
on a GPU (docs/target.md, "What makes the lookup learnable"). Research aid: nothing in vlmspec depends
on it, and the shipped models are trained by `vlmspec train` alone.

The model is the LM of `vlmspec train target` (LLaMA block: RMSNorm eps 1e-5, RoPE base 1e4 on
adjacent pairs, grouped-query attention, SwiGLU, untied output; N(0, 0.02) initialisation with the
attention and MLP output matrices scaled by 1/sqrt(2 layers); AdamW b1 0.9 b2 0.95, weight decay 0.1
on matrices and embeddings, clipping at 1, linear warm-up; its 4 x 256 shape has exactly the 4,000,000
LM parameters vlmspec counts). It trains on the rows `vlmspec data rows` writes, loss on the answer rows
(weight 1) and --full W on the other text rows (vlmspec's --prompt-loss W). With --world WORLD --mmproj
MMPROJ the world may have pictures: the mmproj's vision tower (CLIP ViT with pre- and post-LayerNorm,
quick GELU, as vlmspec's engine runs it) is kept frozen and run once over every picture of the split
(`features` caches its patch rows, float16, in OUT_DIR), and a projector as `train target` makes it
(Linear, exact GELU, Linear, to the LM's width; N(0, 0.02) weights, zero biases) feeds the image rows,
with the norm cap of `--norm-cap R` (R x the mean L2 norm of the token embeddings, weight 1).
The learning rate is constant after the warm-up (runs stopped at any step compare) unless --steps N
is given without --const: then a cosine to lr / 10 over N steps.
Test metric, per question: every answer row's argmax equals the reference (teacher forcing with the
reference history, i.e. greedy exact match as `vlmspec eval --history reference` would count it
when the checker reads the exact answer).

  vlmspec data rows WORLD --split train --tokenizer TOK.gguf -o rows/train   (and --split test)
  lookup_sweep.py run NAME ROWS_DIR OUT_DIR [--batch B] [--lr LR] [--layers L] [--width W] [--heads H]
                  [--kv K] [--ffn F] [--full W] [--deadline S] [--steps N] [--const] [--eval-every E]
  lookup_sweep.py all ROWS_DIR OUT_DIR DEADLINE [NAME,NAME...]   (the CONFIGS below, in parallel)
  lookup_sweep.py features WORLD MMPROJ OUT_DIR     (the tower's rows of every train and test picture)
  lookup_sweep.py run ... --world WORLD --mmproj MMPROJ [--feat DIR] [--norm-cap R]   (a world with pictures)
  lookup_sweep.py run ... [--save FILE] [--init FILE]   (the model's state at the end; start the LM from one)
  lookup_sweep.py run ... --grow FILE [--grow-noise S]  (start from a saved LM of half the width and depth)

Each run appends JSON lines to OUT_DIR/NAME.log: step, rows trained, test and train-subset accuracy,
accuracy per query type. Needs PyTorch (CUDA when present, bf16 autocast there).
"""
import json, math, os, subprocess, sys, time, argparse
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load(rows_dir, split, images=False):
    """tokens, answer mask, offsets, turns (n, 2 * max_turns), query names per question, in order."""
    p = os.path.join(rows_dir, split)
    meta = json.load(open(p + ".json"))
    tok = np.fromfile(p + ".tokens.i32", dtype=np.int32).astype(np.int64)
    if (tok < 0).any() and not images:
        raise SystemExit(f"{p}: image rows: lookup_sweep.py takes text-only worlds")
    ans = np.fromfile(p + ".answer.u8", dtype=np.uint8).astype(bool)
    off = np.fromfile(p + ".offsets.i64", dtype=np.int64)
    turns = np.fromfile(p + ".turns.i32", dtype=np.int32).reshape(-1, 2 * meta["max_turns"])
    query = np.fromfile(p + ".query.i32", dtype=np.int32)
    cats = [meta["query_names"][q] for q in query if q >= 0]
    return (tok, ans, off, turns), cats, meta


class RMSNorm(nn.Module):
    def __init__(s, C, eps):
        super().__init__()
        s.weight, s.eps = nn.Parameter(torch.ones(C)), eps

    def forward(s, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + s.eps)).type_as(x) * s.weight


def sdpa(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    a = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    a = a.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return a.softmax(-1) @ v


class Block(nn.Module):
    def __init__(s, C, H, KV, FF):
        super().__init__()
        s.H, s.KV, s.D = H, KV, C // H
        s.n1, s.n2 = RMSNorm(C, 1e-5), RMSNorm(C, 1e-5)
        s.q = nn.Linear(C, H * s.D, bias=False)
        s.k = nn.Linear(C, KV * s.D, bias=False)
        s.v = nn.Linear(C, KV * s.D, bias=False)
        s.o = nn.Linear(H * s.D, C, bias=False)
        s.g = nn.Linear(C, FF, bias=False)
        s.u = nn.Linear(C, FF, bias=False)
        s.d = nn.Linear(FF, C, bias=False)

    def forward(s, x, cos, sin):
        B, T, C = x.shape
        h = s.n1(x)
        q = s.q(h).view(B, T, s.H, s.D)
        k = s.k(h).view(B, T, s.KV, s.D)
        v = s.v(h).view(B, T, s.KV, s.D)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = s.H // s.KV
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        a = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + s.o(a.transpose(1, 2).reshape(B, T, C))
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))


def rope(x, cos, sin):  # adjacent pairs (x0, x1), (x2, x3), ...
    T = x.shape[1]
    c, s_ = cos[:T][None, :, None, :], sin[:T][None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s_, x0 * s_ + x1 * c), dim=-1).flatten(-2)


class LM(nn.Module):
    def __init__(s, V, C, L, H, KV, FF, T=1024):
        super().__init__()
        s.emb = nn.Embedding(V, C)
        s.blocks = nn.ModuleList(Block(C, H, KV, FF) for _ in range(L))
        s.nf = RMSNorm(C, 1e-5)
        s.out = nn.Linear(C, V, bias=False)
        D = C // H
        inv = 10000.0 ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
        s.register_buffer("cos", ang.cos().float(), persistent=False)
        s.register_buffer("sin", ang.sin().float(), persistent=False)
        for n, p in s.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("o.weight", "d.weight")) else 0.02
                nn.init.normal_(p, 0, std)

    def forward(s, idx, feats=None, pos=None):
        assert feats is None, "a world with pictures needs --world and --mmproj"
        return s.body(s.emb(idx))

    def body(s, x):
        for b in s.blocks:
            x = b(x, s.cos, s.sin)
        return s.out(s.nf(x))


class VLM(nn.Module):
    """The LM with a projector in front of it: image rows (flat positions `pos` of the batch) take the
    projected tower rows `feats` in place of a token embedding, as `train target` does."""

    def __init__(s, lm, Dv, cap):
        super().__init__()
        s.lm, s.cap = lm, cap
        C = lm.emb.weight.shape[1]
        s.mm0, s.mm2 = nn.Linear(Dv, C), nn.Linear(C, C)
        for m in (s.mm0, s.mm2):
            nn.init.normal_(m.weight, 0, 0.02)
            nn.init.zeros_(m.bias)

    def forward(s, idx, feats=None, pos=None):
        x = s.lm.emb(idx.clamp(min=0))
        s.cap_loss = torch.zeros((), device=idx.device)
        if feats is not None and pos is not None and len(pos):
            B, T, C = x.shape
            p = s.mm2(F.gelu(s.mm0(feats)))
            x = x.reshape(B * T, C).index_copy(0, pos, p.to(x.dtype)).view(B, T, C)
            if s.cap > 0:  # --norm-cap R: rows louder than R x the mean token embedding pay (norm/tau - 1)^2
                tau = s.cap * s.lm.emb.weight.detach().float().norm(dim=1).mean()
                s.cap_loss = ((p.float().norm(dim=1) / tau - 1).clamp(min=0) ** 2).mean()
        return s.lm.body(x)


# ---------------------------------------------------------------------------------------------------
# Pictures: the frozen tower's rows, computed once

def world_images(world, split):
    """Per sample of the split, in order, the paths of its pictures."""
    with open(os.path.join(world, split + ".jsonl")) as f:
        return [[os.path.join(world, im) for im in json.loads(line)["images"]] for line in f]


def _png(path):
    from PIL import Image
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.uint8)


@torch.no_grad()
def tower_rows(mmproj, paths, dev):
    """(len(paths), G*G, D) float16: the post-LN patch rows of the mmproj's tower (class row dropped),
    pictures already at the tower's size (vlmspec's LLaVA preprocessing is then the identity)."""
    import multiprocessing
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
    from vision_ref import read_gguf
    kv, T = read_gguf(mmproj)
    S, P = kv["clip.vision.image_size"], kv["clip.vision.patch_size"]
    D, H, L = kv["clip.vision.embedding_length"], kv["clip.vision.attention.head_count"], kv["clip.vision.block_count"]
    eps = kv["clip.vision.attention.layer_norm_epsilon"]
    act = F.gelu if kv.get("clip.use_gelu", False) else (lambda t: t * torch.sigmoid(1.702 * t))
    W = {k: v.float().to(dev) for k, v in T.items()}
    mean = torch.tensor(kv["clip.vision.image_mean"], device=dev)
    std = torch.tensor(kv["clip.vision.image_std"], device=dev)
    with multiprocessing.Pool(min(16, os.cpu_count() or 1)) as pool:
        ims = pool.map(_png, paths, chunksize=256)
    for path, im in zip(paths, ims):
        if im.shape != (S, S, 3):
            raise SystemExit(f"{path}: {im.shape[1]}x{im.shape[0]}, the tower takes {S}x{S} (resizing is not mirrored)")
    dh, out = D // H, []
    for c in range(0, len(ims), 512):
        x = (torch.from_numpy(np.stack(ims[c:c + 512])).to(dev).float() / 255 - mean) / std
        x = F.conv2d(x.permute(0, 3, 1, 2), W["v.patch_embd.weight"], W.get("v.patch_embd.bias"), stride=P)
        x = x.flatten(2).transpose(1, 2)  # (n, G*G, D), patch (r, c) at r * G + c
        n = x.shape[0]
        x = torch.cat([W["v.class_embd"].expand(n, 1, D), x], 1) + W["v.position_embd.weight"]
        x = F.layer_norm(x, (D,), W["v.pre_ln.weight"], W["v.pre_ln.bias"], eps)
        for i in range(L):
            b = "v.blk.%d." % i
            fc1, fc2 = ("ffn_down", "ffn_up") if W[b + "ffn_down.weight"].shape[-1] == D else ("ffn_up", "ffn_down")
            h = F.layer_norm(x, (D,), W[b + "ln1.weight"], W[b + "ln1.bias"], eps)
            q, k, v = (F.linear(h, W[b + "attn_%s.weight" % t], W[b + "attn_%s.bias" % t]).view(n, -1, H, dh).transpose(1, 2)
                       for t in "qkv")
            a = torch.softmax((q * dh ** -0.5) @ k.transpose(-1, -2), -1) @ v
            x = x + F.linear(a.transpose(1, 2).reshape(n, -1, D), W[b + "attn_out.weight"], W[b + "attn_out.bias"])
            h = F.layer_norm(x, (D,), W[b + "ln2.weight"], W[b + "ln2.bias"], eps)
            x = x + F.linear(act(F.linear(h, W[b + fc1 + ".weight"], W[b + fc1 + ".bias"])), W[b + fc2 + ".weight"],
                             W[b + fc2 + ".bias"])
        if "v.post_ln.weight" in W:
            x = F.layer_norm(x, (D,), W["v.post_ln.weight"], W["v.post_ln.bias"], eps)
        out.append(x[:, 1:].half().cpu())
    return torch.cat(out).numpy()


def feature_key(world, mmproj):
    """What a features cache was made from: the world's splits and the mmproj (paths, sizes, times)."""
    files = [os.path.join(world, sp + ".jsonl") for sp in ("train", "test")] + [mmproj]
    return [[os.path.abspath(f), os.path.getsize(f), int(os.path.getmtime(f))] for f in files]


def features(world, mmproj, out, dev):
    """OUT/feat-SPLIT.npy (pictures, G*G, D) and OUT/feat-SPLIT.first.npy (per sample, its first picture's
    index; samples + 1 entries) for the train and test splits; OUT/feat.json (written last) names what
    they were made from."""
    os.makedirs(out, exist_ok=True)
    meta = os.path.join(out, "feat.json")
    if os.path.exists(meta):
        os.remove(meta)
    for split in ("train", "test"):
        per = world_images(world, split)
        first = np.cumsum([0] + [len(p) for p in per]).astype(np.int64)
        t0 = time.time()
        f = tower_rows(mmproj, [p for ps in per for p in ps], dev)
        for name, arr in ((f"feat-{split}.npy", f), (f"feat-{split}.first.npy", first)):
            with open(os.path.join(out, name + ".tmp"), "wb") as fh:
                np.save(fh, arr)
            os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
        print(f"features {split}: {f.shape[0]} pictures {f.shape[1:]} in {time.time() - t0:.1f} s", flush=True)
    with open(meta, "w") as fh:
        json.dump({"made_from": feature_key(world, mmproj)}, fh)


@torch.no_grad()
def grow(big, small_sd, noise):
    """Copies a smaller LM's function into `big` (Net2Net-style): width x2 by duplicating every
    residual feature, head and hidden unit (x -> [x; x]: RMSNorm is unchanged by it, and each matrix
    takes [[W/2, W/2], [W/2, W/2]]), depth x2 by a new block after each old one whose output matrices
    are zero (an identity at the start). `noise` (std, added to the grown matrices) breaks the symmetry
    of the copies. The head size stays (heads and KV heads double with the width)."""
    sd = {k: v.float() for k, v in small_sd.items()}
    C = sd["emb.weight"].shape[1]
    Lsmall = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    Cb, Lb = big.emb.weight.shape[1], len(big.blocks)
    if Cb != 2 * C or Lb != 2 * Lsmall:
        raise SystemExit(f"--grow doubles width and depth: {Lsmall} x {C} -> {Lb} x {Cb} is not that")
    dev = big.emb.weight.device
    cat2 = lambda w: torch.cat([w, w], 0)
    both = lambda w: cat2(torch.cat([w / 2, w / 2], 1))
    rnd = lambda w: w + noise * torch.randn_like(w)
    big.emb.weight.copy_(rnd(torch.cat([sd["emb.weight"]] * 2, 1)).to(dev))
    big.nf.weight.copy_(cat2(sd["nf.weight"]).to(dev))
    big.out.weight.copy_(rnd(torch.cat([sd["out.weight"] / 2] * 2, 1)).to(dev))
    for i in range(Lsmall):
        b, pre = big.blocks[2 * i], f"blocks.{i}."
        for n in ("n1", "n2"):
            getattr(b, n).weight.copy_(cat2(sd[pre + n + ".weight"]).to(dev))
        for n in ("q", "k", "v", "o", "g", "u", "d"):
            getattr(b, n).weight.copy_(rnd(both(sd[pre + n + ".weight"])).to(dev))
        new = big.blocks[2 * i + 1]
        new.o.weight.zero_()
        new.d.weight.zero_()


def make_batch(tok, ans, off, turns, idx, full, dev, pics=None):
    """inputs, next-token targets and loss weights (answers 1, other text rows `full`, image rows 0),
    padded to 64; with pics = (tower rows on dev, first picture per sample): the image rows' tower rows
    and their flat positions in the batch."""
    lens = [int(off[i + 1] - off[i]) for i in idx]
    T = (max(lens) - 1 + 63) // 64 * 64
    x = np.zeros((len(idx), T), np.int64)
    y = np.zeros((len(idx), T), np.int64)
    w = np.zeros((len(idx), T), np.float32)
    pos, ims = [], []
    for j, i in enumerate(idx):
        r, a = tok[off[i]:off[i + 1]], ans[off[i]:off[i + 1]]
        n = len(r)
        x[j, :n - 1], y[j, :n - 1] = r[:-1], np.maximum(r[1:], 0)
        w[j, :n - 1] = np.where(a[1:], 1.0, np.where(r[1:] >= 0, full, 0.0))
        if pics is not None:
            img = np.flatnonzero(r[:-1] < 0)
            n_img = int(pics[1][i + 1] - pics[1][i])
            if len(img) != n_img * pics[0].shape[1]:
                raise SystemExit(f"sample {i}: {len(img)} image rows for {n_img} pictures of {pics[0].shape[1]} rows")
            pos.append(j * T + img)
            ims.extend(range(int(pics[1][i]), int(pics[1][i + 1])))
    t = lambda v: torch.from_numpy(v).to(dev)
    if pics is None or not ims:
        return t(x), t(y), t(w), None, None
    feats = pics[0][torch.tensor(ims, device=dev)].reshape(-1, pics[0].shape[-1]).float()
    return t(x), t(y), t(w), feats, t(np.concatenate(pos))


@torch.no_grad()
def evaluate(model, tok, ans, off, turns, n, dev, amp, pics=None):
    model.eval()
    ok = []
    for s in range(0, n, 50):
        idx = list(range(s, min(n, s + 50)))
        x, y, _, feats, pos = make_batch(tok, ans, off, turns, idx, 0.0, dev, pics)
        with torch.autocast(dev.type, torch.bfloat16, enabled=amp):
            pred = model(x, feats, pos).argmax(-1)
        good = (pred == y).cpu().numpy()
        for j, i in enumerate(idx):
            tu = turns[i]
            for t in range(len(tu) // 2):
                a, b = tu[2 * t], tu[2 * t + 1]
                if a < 0:
                    break
                ok.append(bool(good[j, a - 1:b - 1].all()))  # row r-1 predicts row r
    model.train()
    return ok


def run(a):
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    amp = dev.type == "cuda"
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    tr, _, meta = load(a.data, "train", a.world is not None)
    te, cats, _ = load(a.data, "test", a.world is not None)
    V = meta["vocab"]
    model = LM(V, a.width, a.layers, a.heads, a.kv, a.ffn).to(dev)
    n_lm = sum(p.numel() for p in model.parameters())
    trp = tep = None
    if a.world is not None:
        if a.mmproj is None:
            raise SystemExit("--world needs --mmproj (the tower that reads its pictures)")
        fdir = a.feat or a.out
        meta = os.path.join(fdir, "feat.json")
        if not os.path.exists(meta) or json.load(open(meta))["made_from"] != feature_key(a.world, a.mmproj):
            features(a.world, a.mmproj, fdir, dev)  # none yet, or made from another world or tower
        trp, tep = ((torch.from_numpy(np.load(os.path.join(fdir, f"feat-{sp}.npy"))).to(dev),
                     np.load(os.path.join(fdir, f"feat-{sp}.first.npy"))) for sp in ("train", "test"))
        for sp, (rows, pics) in (("train", (tr, trp)), ("test", (te, tep))):
            if len(pics[1]) != len(rows[2]):
                raise SystemExit(f"{sp}: {len(rows[2]) - 1} samples of rows, {len(pics[1]) - 1} of pictures")
        model = VLM(model, trp[0].shape[-1], a.norm_cap).to(dev)
    if a.grow:
        grow(model.lm if isinstance(model, VLM) else model, torch.load(a.grow, map_location="cpu"), a.grow_noise)
    if a.init:
        sd = torch.load(a.init, map_location=dev)
        lm = model.lm if isinstance(model, VLM) else model
        lm.load_state_dict({k[3:] if k.startswith("lm.") else k: v for k, v in sd.items()
                            if not k.startswith(("mm0.", "mm2."))})
    decay = [p for p in model.parameters() if p.dim() == 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if dev.type == "cuda" else {}))
    nseq = len(tr[2]) - 1
    order, pos, epoch = rng.permutation(nseq), 0, 0
    log = open(os.path.join(a.out, a.name + ".log"), "w")
    t0 = time.time()
    rows = 0
    step = 0
    lsum, lcnt = 0.0, 0

    def say(d):
        s = json.dumps(d)
        print(a.name, s, flush=True)
        log.write(s + "\n")
        log.flush()

    say({"config": vars(a), "params_lm": n_lm, "params": sum(p.numel() for p in model.parameters()),
         "device": str(dev)})
    if a.init or a.grow:  # where the loaded model starts
        ok = evaluate(model, *te, len(te[2]) - 1, dev, amp, tep)
        say({"step": 0, "rows": 0, "acc": round(100 * sum(ok) / len(ok), 1)})
    while True:
        if pos + a.batch > nseq:
            order, pos, epoch = rng.permutation(nseq), 0, epoch + 1
        idx = order[pos:pos + a.batch]
        pos += a.batch
        x, y, w, feats, ipos = make_batch(*tr, idx, a.full, dev, trp)
        lr = a.lr * min(1.0, (step + 1) / a.warmup)
        if not a.const and a.steps:
            p = min(1.0, step / a.steps)
            lr = lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(dev.type, torch.bfloat16, enabled=amp):
            logits = model(x, feats, ipos)
        l = F.cross_entropy(logits.float().view(-1, V), y.view(-1), reduction="none")
        loss = (l * w.view(-1)).sum() / w.sum().clamp(min=1)
        if isinstance(model, VLM):
            loss = loss + model.cap_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        rows += int(sum(int(tr[2][i + 1] - tr[2][i]) for i in idx))
        lsum += float(loss.detach()) if step % 50 == 0 else 0.0
        lcnt += 1 if step % 50 == 0 else 0
        done = (a.steps and step >= a.steps) or time.time() - t0 > a.deadline
        if step % a.eval_every == 0 or done:
            ok = evaluate(model, *te, len(te[2]) - 1, dev, amp, tep)
            per = {}
            for c, o in zip(cats, ok):
                per.setdefault(c, []).append(o)
            trok = evaluate(model, *tr, 200, dev, amp, trp)
            short = [o for c, o in zip(cats, ok) if c not in TRANSCRIPTS]
            say({"step": step, "rows": rows, "epoch": epoch, "secs": round(time.time() - t0, 1),
                 "loss": round(lsum / max(lcnt, 1), 4), "acc": round(100 * sum(ok) / len(ok), 1),
                 "acc_short": round(100 * sum(short) / max(len(short), 1), 1),
                 "train_acc": round(100 * sum(trok) / len(trok), 1),
                 "per": {c: round(100 * sum(v) / len(v)) for c, v in sorted(per.items())}})
            lsum, lcnt = 0.0, 0
        if done:
            break
    if a.save:
        torch.save(model.state_dict(), a.save)


# Query types of look's transcript turns (the picture written out; "caption" in the older prototype
# worlds): `acc_short` leaves them out.
TRANSCRIPTS = {"describe", "lines", "bars", "caption"}

# The sets docs/target.md reports (4 x 256 unless named otherwise; answer-only loss unless "full").
CONFIGS = [
    ("base16", "--batch 16"),
    ("b64", "--batch 64"),
    ("b64-lr3", "--batch 64 --lr 3e-3"),
    ("b64-full", "--batch 64 --full 1"),
    ("b64-h8", "--batch 64 --heads 8 --kv 4"),
    ("b64-L8", "--batch 64 --layers 8"),
    ("b64-w512", "--batch 64 --width 512 --layers 8 --heads 8 --kv 4 --ffn 1408"),
    ("full16", "--batch 16 --full 1"),
    ("full64-h8", "--batch 64 --full 1 --heads 8 --kv 4"),
    ("full64-L8", "--batch 64 --full 1 --layers 8"),
    ("full64-w512", "--batch 64 --full 1 --width 512 --layers 8 --heads 8 --kv 4 --ffn 1408"),
    ("full64-q", "--batch 64 --full 0.25"),
]


def main():
    if sys.argv[1] == "features":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        os.makedirs(sys.argv[4], exist_ok=True)
        features(sys.argv[2], sys.argv[3], sys.argv[4], dev)
        return
    if sys.argv[1] == "all":
        data, out, dl = sys.argv[2], sys.argv[3], sys.argv[4]
        only = sys.argv[5].split(",") if len(sys.argv) > 5 else None
        procs = []
        for name, args in CONFIGS:
            if only and name not in only:
                continue
            cmd = [sys.executable, __file__, "run", name, data, out, "--deadline", dl] + args.split()
            procs.append(subprocess.Popen(cmd))
        for p in procs:
            p.wait()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("name")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=704)
    ap.add_argument("--full", type=float, default=0.0)
    ap.add_argument("--deadline", type=float, default=60)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--const", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--world", default=None, help="the world of the rows (its pictures' paths)")
    ap.add_argument("--mmproj", default=None, help="the frozen tower (with --world)")
    ap.add_argument("--feat", default=None, help="where `features` cached the tower rows (default OUT_DIR)")
    ap.add_argument("--norm-cap", type=float, default=0.0, help="R of train target --norm-cap (0: none, its default)")
    ap.add_argument("--init", default=None, help="start the LM from a --save file (projector fresh)")
    ap.add_argument("--grow", default=None, help="start from a --save file of half the width and depth")
    ap.add_argument("--grow-noise", type=float, default=1e-3, help="std of the noise that breaks the copies' symmetry")
    ap.add_argument("--save", default=None, help="write the model's state here at the end")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
