#!/usr/bin/env python3
"""The table of bench/gpu_bench.sh from its JSON lines (one file or several, e.g. one per depth run
in separate calls): tokens/s, MFU against the best bf16 GEMM rate any program measured in these
runs, step time, peak memory and memory per token; then, per depth, nanoddp (the mean of its runs)
against the faster of PyTorch's attention backends (FlashAttention-2 and cuDNN: the faster one
counts, so the comparison is with PyTorch at its best).
    bench/gpu_bench_table.py results.jsonl [more.jsonl ...]
"""
import json
import sys


def label(r):
    attention = r.get("sdpa") or r.get("attention")  # PyTorch's SDPA backend, or nanoddp's attention route
    return r["impl"] + (f" ({attention})" if attention else "")


def main(paths):
    rows = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    peak = max([r.get("gemm_tflops", 0) for r in rows] + [1e-9]) * 1e12
    print(f"MFU peak: best bf16 GEMM measured in these runs = {peak / 1e12:.0f} TFLOP/s")
    print(f"{'depth':>5} | {'impl':<30} | {'tok/s':>9} | {'MFU':>6} | {'step ms':>8} | {'peak GiB':>8} | "
          f"{'KiB/token':>9}")
    by_depth = {}
    for r in rows:
        if r.get("failed"):
            print(f"{r['depth']:>5} | {label(r):<30} | FAILED (see its log)")
            continue
        by_depth.setdefault(r["depth"], []).append(r)
        mfu = r["mfu"] * r["gemm_tflops"] * 1e12 / peak
        print(f"{r['depth']:>5} | {label(r):<30} | {r['tokens_per_s']:>9.0f} | {100 * mfu:>5.1f}% | "
              f"{r['step_ms']:>8.1f} | {r['peak_mem_gib']:>8.2f} | {r['mem_per_token_kib']:>9.1f}")
    for depth, group in sorted(by_depth.items()):
        ours = [r for r in group if r["impl"] == "nanoddp"]
        theirs = [r for r in group if r["impl"] != "nanoddp"]
        if not ours or not theirs:
            print(f"depth {depth}: no ratio (a side is missing or failed)")
            continue
        # nanoddp runs before and after PyTorch (gpu_bench.sh): the ratio takes their mean, and
        # their spread says how far the machine drifted over the comparison.
        tok = [r["tokens_per_s"] for r in ours]
        mean = sum(tok) / len(tok)
        b = max(theirs, key=lambda r: r["tokens_per_s"])
        spread = f" (nanoddp's {len(tok)} runs {min(tok):.0f}-{max(tok):.0f} tok/s)" if len(tok) > 1 else ""
        print(f"depth {depth}: nanoddp / PyTorch ({b.get('sdpa', '?')}, its faster attention): tokens/s "
              f"{mean / b['tokens_per_s']:.2f}x{spread}, memory/token "
              f"{ours[0]['mem_per_token_kib'] / b['mem_per_token_kib']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
