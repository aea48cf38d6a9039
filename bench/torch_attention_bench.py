#!/usr/bin/env python3
"""PyTorch 2.x reference for bench_attention_gpu: causal F.scaled_dot_product_attention in bf16 on
the same shapes, forward and backward timed apart, once per attention backend (--sdpa flash:
FlashAttention-2; cudnn: cuDNN's fused attention). The inputs are [B, T, H, D] tensors seen as
[B, H, T, D] through transpose(1, 2), as the GPT of bench/torch_gpu_bench.py passes them. Rates use
the same nominal FLOPs as bench_attention_gpu (forward 2 B H T^2 D, backward 2.5x), and the same
clock: the host's, from a synchronised device to a synchronised device, median of --reps calls (so
launch costs count on both sides). Prints one JSON line per backend; a backend that cannot run these
shapes prints its error instead. With --nanoddp FILE (bench_attention_gpu's lines, one per attention
route, from the same machine and call) each line also holds nanoddp's speed relative to it for each
route: PyTorch's time / nanoddp's, above 1 where nanoddp is faster.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - start))
    return sorted(times)[len(times) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    for name, default in [("batch", 16), ("seq", 2048), ("heads", 10), ("kv_heads", 10), ("head_dim", 128),
                          ("reps", 20), ("warmup", 3)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--sdpa", default="flash,cudnn", help="comma-separated: flash, cudnn")
    p.add_argument("--nanoddp", help="bench_attention_gpu's JSON line (a file): adds nanoddp's speed-ups")
    a = p.parse_args()
    ours = []
    if a.nanoddp:
        with open(a.nanoddp) as f:
            ours = [json.loads(line) for line in f.read().splitlines() if line.startswith("{")]
        for line in ours:
            shape = {k: line[k] for k in ("batch", "seq", "heads", "kv_heads", "head_dim")}
            if shape != {"batch": a.batch, "seq": a.seq, "heads": a.heads, "kv_heads": a.kv_heads,
                         "head_dim": a.head_dim}:
                raise SystemExit(f"torch_attention_bench: --nanoddp {a.nanoddp} was measured on other shapes: {shape}")
    b, t, h, hk, d = a.batch, a.seq, a.heads, a.kv_heads, a.head_dim
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(heads):  # normal values, not zeros (METHOD.md)
        x = torch.randn(b, t, heads, d, device="cuda", generator=gen).to(torch.bfloat16)
        return x.requires_grad_(True)

    q, k, v = rand(h), rand(hk), rand(hk)
    dout = torch.randn(b, t, h, d, device="cuda", generator=gen).to(torch.bfloat16)
    fwd_flops = 2.0 * b * h * t * t * d

    def attend():
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=h != hk)
        return y.transpose(1, 2)

    for name in a.sdpa.split(","):
        row = {"impl": f"pytorch {torch.__version__}", "sdpa": name, "batch": b, "seq": t, "heads": h,
               "kv_heads": hk, "head_dim": d}
        try:
            with sdpa_kernel(BACKENDS[name]):
                fwd = median_ms(attend, a.warmup, a.reps)
                out = attend()
                bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), a.warmup,
                                a.reps)
            row.update(fwd_ms=fwd, bwd_ms=bwd, fwd_tflops=fwd_flops / fwd / 1e9, bwd_tflops=2.5 * fwd_flops / bwd / 1e9)
            for line in ours:  # one pair per nanoddp route (flash, cudnn, ...)
                route = line.get("route", "auto")
                row[f"nanoddp_{route}_fwd_speedup"] = fwd / line["fwd_ms"]
                row[f"nanoddp_{route}_bwd_speedup"] = bwd / line["bwd_ms"]
        except Exception as e:  # a backend that refuses these shapes: say so in the row
            row["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
