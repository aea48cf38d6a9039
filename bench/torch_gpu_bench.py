#!/usr/bin/env python3
"""PyTorch 2.x reference for bench/gpu_bench.sh: nanochat's GPT trained on one GPU the way nanochat
trains it, timed like bench_train_gpu (same model, batch, sequence length, random tokens, one
micro-step per optimizer step). Prints one JSON line with the same keys.

Model (shared/ANCHORS.md §1): wte -> RMSNorm -> blocks -> RMSNorm -> lm_head; attention with
separate q/k/v, half-split rotary (bf16 tables), QK RMSNorm, causal F.scaled_dot_product_attention
restricted to one backend (--sdpa flash: FlashAttention-2, the default; --sdpa cudnn: cuDNN's fused
attention; gpu_bench.sh runs both and keeps the faster); MLP relu^2; logits soft-capped at 15,
cross-entropy in f32.
Training: torch.compile, bf16 autocast over f32 master weights (wte itself in bf16, as nanochat), AdamW (fused) for wte and
lm_head, Muon (Nesterov momentum, bf16 Newton-Schulz, compiled) for the block matrices: --muon stacked
(the default) stacks the matrices of one shape and runs each stage once per shape, as current nanochat
does; --muon loop runs them one by one in a Python loop (bench/torch_muon.py has both).
The timing window: at least --steps steps and at least --min_seconds (the step time measured on the
last warm-up step), timed as two halves: window_spread = |a - b| / mean of their rates.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_muon import LoopMuon, StackedMuon, compiled_newton_schulz  # noqa: E402

MUONS = {"stacked": StackedMuon, "loop": LoopMuon}


# The attention backends compared (PyTorch's faster one is the baseline, its best case). sdpa_kernel
# with a single backend makes a call that backend cannot run an error, not a silent fall-back.
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def rms_norm(x):
    return F.rms_norm(x, (x.size(-1),))


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.c_q = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.c_k = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.c_v = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.c_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q = self.c_q(x).view(B, T, self.heads, self.head_dim)
        k = self.c_k(x).view(B, T, self.kv_heads, self.head_dim)
        v = self.c_v(x).view(B, T, self.kv_heads, self.head_dim)
        q, k = rms_norm(rotate(q, cos, sin)), rms_norm(rotate(k, cos, sin))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=self.heads != self.kv_heads)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def rotate(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos], dim=-1).to(x.dtype)


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.attn = Attention(dim, heads, kv_heads)
        self.c_fc = nn.Linear(dim, 4 * dim, bias=False)
        self.c_proj = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(rms_norm(x), cos, sin)
        return x + self.c_proj(F.relu(self.c_fc(rms_norm(x))).square())


class GPT(nn.Module):
    def __init__(self, depth, vocab, seq):
        super().__init__()
        dim = depth * 64
        heads = (dim + 127) // 128
        self.vocab, self.padded = vocab, (vocab + 63) // 64 * 64
        self.wte = nn.Embedding(self.padded, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, heads) for _ in range(depth))
        self.lm_head = nn.Linear(dim, self.padded, bias=False)
        hd = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(10 * seq, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", ang.cos().bfloat16()[None, :, None, :], persistent=False)
        self.register_buffer("sin", ang.sin().bfloat16()[None, :, None, :], persistent=False)
        for name, p in self.named_parameters():  # nanochat's init
            if name.endswith("c_proj.weight") or name == "lm_head.weight":
                nn.init.zeros_(p)
            elif name == "wte.weight":
                nn.init.normal_(p, std=1.0)
            else:
                fan_out, fan_in = p.shape
                nn.init.normal_(p, std=1.0 / math.sqrt(fan_in) * min(1.0, math.sqrt(fan_out / fan_in)))

    def forward(self, idx, targets):
        T = idx.size(1)
        cos, sin = self.cos[:, :T], self.sin[:, :T]
        x = rms_norm(self.wte(idx))
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(rms_norm(x))[..., :self.vocab].float()
        logits = 15 * torch.tanh(logits / 15)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def gemm_peak(n=8192, reps=10):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)  # random, not zeros
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    best = 0.0
    for i in range(reps + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            a @ b.T
        end.record()
        torch.cuda.synchronize()
        if i >= 2:
            best = max(best, 5 * 2 * n ** 3 / (start.elapsed_time(end) / 1e3))
    return best


def timed_steps(min_steps, min_seconds, step_seconds):
    """At least min_steps and at least min_seconds at step_seconds a step, even (two equal halves)."""
    n = max(min_steps, math.ceil(min_seconds / step_seconds) if step_seconds > 0 else 0)
    return max(2, n + n % 2)


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("depth", 20), ("seq", 2048), ("batch", 16), ("steps", 10), ("warmup", 3),
                          ("vocab", 65536), ("gemm_n", 8192)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--sdpa", choices=sorted(SDPA_BACKENDS), default="flash")
    ap.add_argument("--muon", choices=sorted(MUONS), default="stacked")
    ap.add_argument("--min_seconds", type=float, default=4.0)
    a = ap.parse_args()
    backend = SDPA_BACKENDS[a.sdpa]
    peak = gemm_peak(a.gemm_n)

    model = GPT(a.depth, a.vocab, a.seq).cuda()
    model.wte.to(dtype=torch.bfloat16)  # as nanochat: the embedding (and so the residual stream) in bf16
    params = sum(p.numel() for p in model.parameters())
    dim = a.depth * 64
    s = (dim / 768) ** -0.5
    adam = torch.optim.AdamW([dict(params=[model.wte.weight], lr=0.2 * s), dict(params=[model.lm_head.weight],
                             lr=0.004 * s)], betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0, fused=True)
    muon = MUONS[a.muon]([p for n, p in model.named_parameters() if n.startswith("blocks.")],
                         ns=compiled_newton_schulz())
    compiled = torch.compile(model)
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(backend):
            loss = compiled(x, y)
        loss.backward()
        adam.step()
        muon.step()
        model.zero_grad(set_to_none=True)
        return loss

    for _ in range(max(1, a.warmup) - 1):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    steps = timed_steps(a.steps, a.min_seconds, time.perf_counter() - t0)
    torch.cuda.reset_peak_memory_stats()
    halves = []
    for _ in range(2):  # each from a synchronised device to a synchronised device
        t0 = time.perf_counter()
        for _ in range(steps // 2):
            loss = step()
        torch.cuda.synchronize()
        halves.append(time.perf_counter() - t0)
    dt = sum(halves)
    tokens_per_s = a.batch * a.seq * steps / dt
    # PaLM's FLOPs per token as nanochat counts them: 6 (params - wte) + 12 L H D T.
    flops_per_token = 6 * (params - model.wte.weight.numel()) + 12 * a.depth * dim * a.seq
    peak_mem = torch.cuda.max_memory_allocated()
    print(json.dumps({"impl": "pytorch " + torch.__version__, "sdpa": a.sdpa, "muon": a.muon, "depth": a.depth,
                      "seq": a.seq, "batch": a.batch, "gpu": torch.cuda.get_device_name(0),
                      "params": params, "tokens_per_s": tokens_per_s, "steps": steps, "step_ms": 1e3 * dt / steps,
                      "window_s": dt, "window_spread": abs(halves[0] - halves[1]) / (0.5 * dt),
                      "gemm_tflops": peak / 1e12, "mfu": flops_per_token * tokens_per_s / peak,
                      "peak_mem_gib": peak_mem / 2 ** 30,
                      "reserved_mem_gib": torch.cuda.max_memory_reserved() / 2 ** 30,
                      "mem_per_token_kib": peak_mem / 1024 / (a.batch * a.seq), "last_loss": loss.item()}))


if __name__ == "__main__":
    main()
