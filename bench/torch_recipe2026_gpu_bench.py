#!/usr/bin/env python3
"""PyTorch 2.x reference for bench/gpu_bench.sh with RECIPE=2026: the PyTorch twin of nanochat's
2026 GPT and optimizer (tools/torch_recipe2026.py) trained on one GPU under the classic table's
rules (bench/torch_gpu_bench.py), timed like `bench_train_gpu --recipe 2026` (same model, batch,
sequence length, random tokens, one micro-step per optimizer step). Prints one JSON line with the
same keys.

Model: the twin's forward (its weights under nanochat's names, windows SSSL, the last layer full)
under torch.compile and bf16 autocast over f32 master weights; its attention replaced by one
backend, as the classic table restricts SDPA to one (gpu_bench.sh runs each and keeps the faster):
  --sdpa flex   FlexAttention with a causal sliding-window block mask: tiles outside the window
                are skipped, as in nanoddp's kernels and FlashAttention-3's window_size;
  --sdpa cudnn  SDPA restricted to cuDNN: is_causal on full layers, a boolean window mask on short
                ones (a backend that refuses a call fails the run: no silent fall-back);
  --sdpa math   the twin's own masked attention (the CPU check of this script).
Optimizer: the twin's MuonAdamW at base_train's lrs (fixed schedules: lr multiplier 1, momentum
0.95, Muon weight decay 0.28, as bench_train_gpu): AdamW per group (torch.optim.AdamW, fused on a
GPU), Muon with --muon stacked (each shape's matrices as one batch, as nanochat's MuonAdamW) or
loop (matrix by matrix), Polar Express in bf16 on a GPU (nanochat's), compiled.
  bench/torch_recipe2026_gpu_bench.py --depth 20 --seq 2048 --batch 16 --sdpa flex
  bench/torch_recipe2026_gpu_bench.py --device cpu --compile 0 --sdpa math --depth 2 --seq 256 \\
      --batch 1 --vocab 512 --steps 2 --warmup 1 --min_seconds 0 --check
--check (CPU) first compares one step of this script's Muon, stacked and looped, with the twin's
own optimizer on the same gradients, and exits 1 if they differ beyond f32 rounding.
"""
import argparse
import json
import math
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skipped: no PyTorch here (Debian: python3-torch)")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))
sys.path.insert(0, here)
import torch_recipe2026 as twin  # noqa: E402

LR_MULTIPLIER, MOMENTUM, MUON_WEIGHT_DECAY = 1.0, 0.95, 0.28


def config(a):
    heads = -(-a.depth * 64 // 128)
    dim = heads * 128  # the width rounded up to whole heads of 128, as GPTConfig::from_depth (no change at even depths)
    return {"vocab_size": a.vocab, "n_layer": a.depth, "n_embd": dim, "n_head": heads, "n_kv_head": heads,
            "max_seq_len": a.seq, "window_pattern": "SSSL", "recipe": "2026", "rope_base": 100000.0,
            "optimizer": {"muon_weight_decay": MUON_WEIGHT_DECAY}}


# ----------------------------------------------------------------------------------------------
# Attention: q [B, T, H, D], k, v [B, T, Hkv, D] -> [B, T, H, D]; query t sees keys t - window .. t.

def make_attention(kind, cfg, seq, device):
    windows = sorted(set(twin.window_sizes(cfg)))
    gqa = cfg["n_head"] != cfg["n_kv_head"]
    if kind == "math":
        return twin.attention
    if kind == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def window_rule(w):
            return lambda b, h, q, kv: (q >= kv) & (q - kv <= w)

        masks = {w: create_block_mask(window_rule(w), None, None, seq, seq, device=device) for w in windows}

        def flex(q, k, v, window):
            q, k, v = (t.transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))
            return flex_attention(q, k, v, block_mask=masks[window], enable_gqa=gqa).transpose(1, 2)
        return flex
    t = torch.arange(seq, device=device)
    lag = t[:, None] - t[None, :]
    masks = {w: (lag >= 0) & (lag <= w) for w in windows if w < seq}

    def sdpa(q, k, v, window):
        q, k, v = (t.transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))
        extra = {"enable_gqa": True} if gqa else {}
        if window >= seq:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[window], **extra)
        return y.transpose(1, 2)
    return sdpa


# ----------------------------------------------------------------------------------------------
# Muon over a batch of same-shape matrices [n, rows, cols]: the twin's muon_step, batched.

def orthogonalize(G, steps, bf16):
    """The twin's orthogonalize on each matrix of G [n, rows, cols] (Polar Express in bf16 when asked)."""
    rows, cols = G.shape[-2:]
    norm = G.norm(dim=(-2, -1), keepdim=True)
    X = G * ((norm / math.sqrt(rows)) / G.norm(dim=-1, keepdim=True).clamp_min(1e-6))
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.01 + 1e-6)
    if bf16:
        X = X.bfloat16()
    for a, b, c in twin.POLAR_EXPRESS[:steps]:
        if rows > cols:
            A = X.mT @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.mT
            X = a * X + (b * A + c * (A @ A)) @ X
    X = X.float()
    return X * (math.sqrt(min(rows, cols)) / X.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-6))


def muon_update(P, G, buf, second, lr, momentum, wd, beta2, steps, bf16):
    """In place on P, buf, second [n, rows, cols] / [n, rows, 1] or [n, 1, cols]: Nesterov momentum,
    orthogonalise, NorMuon, cautious weight decay (the twin's muon_step and normuon_scale)."""
    rows, cols = P.shape[-2:]
    buf.lerp_(G, 1 - momentum)
    U = orthogonalize(torch.lerp(G, buf, momentum), steps, bf16)
    dim = -1 if rows >= cols else -2
    mean_sq = U.square().mean(dim=dim, keepdim=True)
    second.lerp_(mean_sq, 1 - beta2)
    inv_rms = second.clamp_min(1e-10).rsqrt()
    before = (mean_sq.sum(dim=(-2, -1), keepdim=True) * U.shape[dim]).sqrt()
    after = (mean_sq * U.shape[dim] * inv_rms.square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    U = U * (inv_rms * (before / after.clamp_min(1e-10)))
    lr = lr * max(1.0, rows / cols) ** 0.5
    P.sub_(lr * U + lr * wd * P * (U * P >= 0))


class Muon:
    """Muon over the twin's block matrices, by shape (stacked) or one by one (loop)."""

    def __init__(self, w, cfg, stacked, bf16, compile_fn):
        names = [n for n in twin.parameter_names(cfg) if n.startswith("transformer.h.")]
        shapes = {}
        for n in names:
            shapes.setdefault(tuple(w[n].shape), []).append(n)
        self.groups = list(shapes.values()) if stacked else [[n] for n in names]
        self.w, self.lr, self.bf16 = w, cfg.get("optimizer", {}).get("matrix_lr", 0.02), bf16
        self.update = compile_fn(muon_update)
        self.state = []
        for g in self.groups:
            rows, cols = w[g[0]].shape
            second = (len(g), rows, 1) if rows >= cols else (len(g), 1, cols)
            self.state.append((torch.zeros(len(g), rows, cols, device=w[g[0]].device),
                               torch.zeros(second, device=w[g[0]].device)))

    @torch.no_grad()
    def step(self):
        for g, (buf, second) in zip(self.groups, self.state):
            P = torch.stack([self.w[n] for n in g])
            G = torch.stack([self.w[n].grad for n in g])
            self.update(P, G, buf, second, self.lr * LR_MULTIPLIER, MOMENTUM, MUON_WEIGHT_DECAY, 0.9, 5, self.bf16)
            for i, n in enumerate(g):
                self.w[n].copy_(P[i])


def adamw(w, cfg, fused):
    groups = [dict(params=[w[n] for n in names], lr=lr * LR_MULTIPLIER, betas=(b1, b2), weight_decay=wd)
              for names, lr, b1, b2, wd in twin.adamw_groups(cfg, cfg["optimizer"])]
    return torch.optim.AdamW(groups, eps=1e-10, **({"fused": True} if fused else {}))


def check_against_twin(cfg, seed):
    """One Muon step of each mode against the twin's Optimizer on the same weights and gradients,
    in f32 on the CPU: True when every matrix agrees to f32 rounding (1e-5 of its largest update,
    plus 2 ulp of its largest weight: docs/recipe2026.md's step bound; the batched norms add in
    another order). A cautious-mask tie (u p within rounding of 0) can flip one element."""
    w = twin.init_weights(cfg, seed)
    g = torch.Generator().manual_seed(seed + 1)
    grads = {n: torch.randn(t.shape, generator=g) for n, t in w.items()}
    opt = dict(cfg["optimizer"], lr_multiplier=LR_MULTIPLIER, momentum=MOMENTUM)
    want = twin.Optimizer(dict(cfg, optimizer=opt)).step(w, grads, 0)
    ok = True
    for stacked in (True, False):
        mine = {n: t.clone() for n, t in w.items()}
        for n, t in mine.items():
            t.grad = grads[n]
        Muon(mine, cfg, stacked, bf16=False, compile_fn=lambda f: f).step()
        for n in mine:
            if not n.startswith("transformer.h."):
                continue
            bound = 1e-5 * (want[n] - w[n]).abs().max() + 2 * torch.finfo(torch.float32).eps * w[n].abs().max()
            off = int(((mine[n] - want[n]).abs() > bound).sum())
            if off > 1:
                print(f"check: muon {'stacked' if stacked else 'loop'} {n}: {off} elements past {bound:.3g}",
                      file=sys.stderr)
                ok = False
    print(f"check: this script's Muon (stacked and loop) {'equals' if ok else 'DIFFERS FROM'} the twin's",
          file=sys.stderr)
    return ok


def flops_per_token(cfg, params, seq):
    """nanoddp's GPTConfig::flops_per_token for the 2026 model: 6 x (parameters less the
    embeddings and scalars) + 12 H D min(window, T) per layer."""
    C, L = cfg["n_embd"], cfg["n_layer"]
    padded = -(-cfg["vocab_size"] // 64) * 64
    kv = cfg["n_kv_head"] * C // cfg["n_head"]
    matmul = params - padded * C - (2 * L + 2)
    matmul -= sum(padded * kv for l in range(L) if twin.has_value_embedding(l, L))
    attention = sum(12 * C * min(wl, seq) for wl in twin.window_sizes(cfg))
    return 6 * matmul + attention


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in [("depth", 20), ("seq", 2048), ("batch", 16), ("steps", 10), ("warmup", 3),
                          ("vocab", 65536), ("gemm_n", 8192), ("compile", 1)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--sdpa", choices=["flex", "cudnn", "math"], default="flex")
    ap.add_argument("--muon", choices=["stacked", "loop"], default="stacked")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--min_seconds", type=float, default=4.0)
    ap.add_argument("--check", action="store_true")
    return ap.parse_args()


def main():
    a = parse()
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print(f"torch_recipe2026_gpu_bench: --device {a.device}: PyTorch {torch.__version__} sees no CUDA device",
              file=sys.stderr)
        return 2
    cfg = config(a)
    if a.check and not check_against_twin(dict(cfg, vocab_size=min(cfg["vocab_size"], 512)), 7):
        return 1
    if cuda:
        from torch_gpu_bench import gemm_peak, timed_steps
        peak = gemm_peak(a.gemm_n)
    else:
        peak, timed_steps = 0.0, lambda n, _s, _t: max(2, n + n % 2)
    compile_fn = torch.compile if a.compile else (lambda f: f)
    device = torch.device(a.device)
    w = {n: t.to(device).requires_grad_(True) for n, t in twin.init_weights(cfg, 1).items()}
    params = sum(t.numel() for t in w.values())
    tables = twin.rotary_tables(a.seq, cfg["n_embd"] // cfg["n_head"], cfg["rope_base"])
    tables = tuple(t.to(device) for t in tables)
    twin.rotary_tables = lambda seq, head_dim, base: tuple(t[:seq] for t in tables)  # made once, on the device
    twin.attention = make_attention(a.sdpa, cfg, a.seq, device)
    loss_fn = compile_fn(lambda w, x, y: twin.loss_of(twin.forward(w, cfg, x), y))
    adam = adamw(w, cfg, fused=cuda)
    muon = Muon(w, cfg, a.muon == "stacked", bf16=cuda, compile_fn=compile_fn)
    g = torch.Generator(device=device).manual_seed(3)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=device, generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=device, generator=g)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    backend = None
    if cuda and a.sdpa == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = SDPBackend.CUDNN_ATTENTION

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            if backend is not None:
                with sdpa_kernel(backend):
                    loss = loss_fn(w, x, y)
            else:
                loss = loss_fn(w, x, y)
        loss.backward()
        adam.step()
        muon.step()
        for t in w.values():
            t.grad = None
        return loss

    for _ in range(max(1, a.warmup) - 1):
        step()
    sync()
    t0 = time.perf_counter()
    step()
    sync()
    steps = timed_steps(a.steps, a.min_seconds, time.perf_counter() - t0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    halves = []
    for _ in range(2):  # each from a synchronised device to a synchronised device
        t0 = time.perf_counter()
        for _ in range(steps // 2):
            loss = step()
        sync()
        halves.append(time.perf_counter() - t0)
    dt = sum(halves)
    tokens_per_s = a.batch * a.seq * steps / dt
    peak_mem = torch.cuda.max_memory_allocated() if cuda else 0
    print(json.dumps({"impl": "pytorch-twin " + torch.__version__, "recipe": "2026", "sdpa": a.sdpa, "muon": a.muon,
                      "depth": a.depth, "seq": a.seq, "batch": a.batch,
                      "gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "params": params,
                      "tokens_per_s": tokens_per_s, "steps": steps, "step_ms": 1e3 * dt / steps, "window_s": dt,
                      "window_spread": abs(halves[0] - halves[1]) / (0.5 * dt), "gemm_tflops": peak / 1e12,
                      "mfu": flops_per_token(cfg, params, a.seq) * tokens_per_s / peak if peak else 0.0,
                      "peak_mem_gib": peak_mem / 2 ** 30,
                      "reserved_mem_gib": (torch.cuda.max_memory_reserved() if cuda else 0) / 2 ** 30,
                      "mem_per_token_kib": peak_mem / 1024 / (a.batch * a.seq), "last_loss": loss.item()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
