#!/usr/bin/env python3
"""The table of bench/gpu_bench.sh from its JSON lines (one file or several, e.g. one per depth run
in separate calls): tokens/s, MFU against the GPU's datasheet peak (the figure nanochat and papers
quote; bench_train_gpu looks up the exact variant, e.g. H200 SXM 989 or NVL 835.5 TFLOP/s, and the
table applies it to every row, as all ran on that GPU) and against the best bf16 GEMM rate any
program measured in these runs, step time, the timing window's spread (its two halves' rates), peak
memory and memory per token; then, per depth, nanoddp (the mean of its runs) against PyTorch's
faster attention backend with Muon stacked by shape (the main baseline, as current nanochat runs
it), and against its matrix-by-matrix Muon.
    bench/gpu_bench_table.py results.jsonl [more.jsonl ...] [--peak_tflops N]
"""
import argparse
import json

SPREAD_LIMIT = 0.02  # two halves of one window, or two runs of nanoddp, further apart than this are flagged


def label(r):
    attention = r.get("sdpa") or r.get("attention")  # PyTorch's SDPA backend, or nanoddp's attention route
    extra = [x for x in (attention, r.get("muon") and f"muon {r['muon']}") if x]
    return r["impl"] + (f" ({', '.join(extra)})" if extra else "")


def datasheet_peak(rows, given):
    """(FLOP/s, what) of the datasheet peak: --peak_tflops, else the one bench_train_gpu looked up."""
    if given:
        return given * 1e12, "--peak_tflops"
    for r in rows:
        if r.get("datasheet_tflops"):
            return r["datasheet_tflops"] * 1e12, f"{r['datasheet_what']} ({r.get('gpu', '?')})"
    why = next((r["datasheet_what"] for r in rows if r.get("datasheet_what")), "no nanoddp row ran")
    return 0, why


def ratios(depth, group):
    ours = [r for r in group if r["impl"] == "nanoddp"]
    if not ours:
        return [f"depth {depth}: no ratio (nanoddp is missing or failed)"]
    # nanoddp runs before and after PyTorch (gpu_bench.sh): the ratio takes their mean, and their
    # spread says how far the machine drifted over the comparison.
    tok = [r["tokens_per_s"] for r in ours]
    mean = sum(tok) / len(tok)
    lines = []
    if len(tok) > 1:
        drift = (max(tok) - min(tok)) / mean
        flag = "" if drift <= SPREAD_LIMIT else f"  OVER {100 * SPREAD_LIMIT:.0f}%: the comparison is not settled"
        lines.append(f"depth {depth}: nanoddp's {len(tok)} runs {min(tok):.0f}-{max(tok):.0f} tok/s, "
                     f"{100 * drift:.1f}% apart{flag}")
    for muon, what in (("stacked", "main baseline: Muon stacked by shape"), ("loop", "Muon matrix by matrix")):
        theirs = [r for r in group if r["impl"] != "nanoddp" and r.get("muon", "loop") == muon]
        if not theirs:
            lines.append(f"depth {depth}: no PyTorch row with Muon {muon}")
            continue
        b = max(theirs, key=lambda r: r["tokens_per_s"])
        lines.append(f"depth {depth}: nanoddp / PyTorch ({b.get('sdpa', '?')}, {what}): tokens/s "
                     f"{mean / b['tokens_per_s']:.2f}x, memory/token "
                     f"{ours[0]['mem_per_token_kib'] / b['mem_per_token_kib']:.2f}x")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--peak_tflops", type=float, default=0, help="the datasheet peak, where the lookup has none")
    a = ap.parse_args()
    rows = [json.loads(line) for p in a.paths for line in open(p) if line.strip()]
    measured = max([r.get("gemm_tflops", 0) for r in rows] + [1e-9]) * 1e12
    sheet, what = datasheet_peak(rows, a.peak_tflops)
    print(f"MFU against the datasheet: {sheet / 1e12:.1f} TFLOP/s, {what}" if sheet
          else f"MFU against the datasheet: none ({what})")
    print(f"MFU against the measured peak: best bf16 GEMM in these runs = {measured / 1e12:.0f} TFLOP/s")
    print(f"{'depth':>5} | {'impl':<42} | {'tok/s':>9} | {'MFU sheet':>9} | {'MFU meas':>8} | {'step ms':>8} | "
          f"{'spread':>6} | {'peak GiB':>8} | {'KiB/token':>9}")
    by_depth = {}
    for r in rows:
        if r.get("failed"):
            print(f"{r['depth']:>5} | {label(r):<42} | FAILED (see its log)")
            continue
        by_depth.setdefault(r["depth"], []).append(r)
        achieved = r["mfu"] * r["gemm_tflops"] * 1e12  # model FLOP/s
        mfu_sheet = f"{100 * achieved / sheet:>8.1f}%" if sheet else f"{'-':>9}"
        spread = r.get("window_spread")
        spread_s = f"{100 * spread:>5.1f}%" + ("!" if spread > SPREAD_LIMIT else "") if spread is not None else "     -"
        print(f"{r['depth']:>5} | {label(r):<42} | {r['tokens_per_s']:>9.0f} | {mfu_sheet} | "
              f"{100 * achieved / measured:>7.1f}% | {r['step_ms']:>8.1f} | {spread_s:>6} | "
              f"{r['peak_mem_gib']:>8.2f} | "
              f"{r['mem_per_token_kib']:>9.1f}")
    for depth, group in sorted(by_depth.items()):
        for line in ratios(depth, group):
            print(line)


if __name__ == "__main__":
    main()
