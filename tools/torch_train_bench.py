#!/usr/bin/python3
"""PyTorch 1.13 (Debian python3-torch, CPU) training throughput of nanochat's GPT, the baseline of
bench/train_cpu_bench.cpp. The model is tools/torch_golden.py's forward with autograd; the
optimizer is torch.optim.AdamW on every parameter (--optimizer adamw) or nanochat's scheme, Muon
for the block matrices and AdamW for the rest (--optimizer muon). --dtype bf16 runs the forward
under torch.autocast("cpu", bfloat16), PyTorch's CPU mixed precision. Prints one JSON line."""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keep_freed_memory import reexec_keeping_freed_memory  # noqa: E402

reexec_keeping_freed_memory()  # before torch allocates: Note [PyTorch's CPU baseline and glibc's malloc]

import torch  # noqa: E402

import torch_golden as golden  # noqa: E402


def build(depth, vocab, seq):
    C = depth * 64
    H = (C + 127) // 128
    cfg = {"n_layer": depth, "n_embd": C, "n_head": H, "n_kv_head": H, "vocab_size": vocab, "softcap": 15.0,
           "rope_base": 10000.0}
    vp = (vocab + 63) // 64 * 64
    g = torch.Generator().manual_seed(0)
    w = {"transformer.wte.weight": torch.randn(vp, C, generator=g)}
    for l in range(depth):
        h = f"transformer.h.{l}."
        for name, shape in [("attn.c_q", (C, C)), ("attn.c_k", (C, C)), ("attn.c_v", (C, C)), ("attn.c_proj", (C, C)),
                            ("mlp.c_fc", (4 * C, C)), ("mlp.c_proj", (C, 4 * C))]:
            w[h + name + ".weight"] = torch.randn(*shape, generator=g) / math.sqrt(shape[1])
    w["lm_head.weight"] = torch.randn(vp, C, generator=g) / math.sqrt(C)
    return cfg, {n: torch.nn.Parameter(t) for n, t in w.items()}


class Muon:
    """nanochat's Muon on the block matrices (momentum, bf16 Newton-Schulz, aspect-scaled lr)."""

    def __init__(self, params, lr=0.02, momentum=0.95):
        self.params, self.lr, self.momentum = params, lr, momentum
        self.bufs = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self):
        for p, buf in zip(self.params, self.bufs):
            g = p.grad
            buf.lerp_(g, 1 - self.momentum)
            g = g.lerp_(buf, self.momentum)
            X = golden.newton_schulz(g, 5, True)
            p.add_(X.float(), alpha=-self.lr * max(1.0, p.size(-2) / p.size(-1)) ** 0.5)


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("depth", 4), ("vocab", 4096), ("seq", 128), ("batch", 16), ("steps", 20), ("warmup", 3),
                          ("threads", 1)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: the forward and loss under torch.autocast('cpu', torch.bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg, w = build(a.depth, a.vocab, a.seq)
    matrices = [p for n, p in w.items() if ".h." in n]
    others = [p for n, p in w.items() if ".h." not in n]
    if a.optimizer == "adamw":
        opts = [torch.optim.AdamW(list(w.values()), lr=1e-3, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0)]
    else:
        opts = [torch.optim.AdamW(others, lr=1e-3, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0), Muon(matrices)]
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            logits = golden.forward(w, cfg, x)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
        loss.backward()
        for o in opts:
            o.step()
        for p in w.values():
            p.grad = None

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t0
    print(json.dumps({"tokens_per_s": a.batch * a.seq * a.steps / dt, "torch": torch.__version__, "dtype": a.dtype,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
