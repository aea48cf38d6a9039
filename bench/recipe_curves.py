#!/usr/bin/python3
"""Compares training runs of two recipes from their metrics.jsonl files (bench/recipe_bench.sh).

Arguments: DEPTH:RECIPE:PATH ... (the first recipe named at a depth is the baseline of that depth's
ratios) and --svg FILE for the curves. For each run it takes the evaluation lines (step, val_bpb) and
the step lines (step, tokens, dt_ms, tokens_per_s); the training time at an evaluation is the sum of
dt_ms of the steps before it, so evaluations and start-up do not count.
"""
import argparse
import json
import statistics


def read_run(path):
    steps, evals = {}, []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "val_bpb" in j and "epoch_end" not in j:
                evals.append(j)
            elif "dt_ms" in j:
                steps[j["step"]] = j
    if not steps or not evals:
        raise SystemExit(f"recipe_curves: {path} has no step or evaluation lines; did the run finish?")
    tokens_per_step = steps[min(steps)]["tokens"] / min(steps)
    elapsed, total = {}, 0.0
    for s in sorted(steps):
        total += steps[s]["dt_ms"] / 1000
        elapsed[s] = total
    curve = [(e["step"] * tokens_per_step, elapsed.get(e["step"], 0.0), e["val_bpb"]) for e in evals]
    rates = [steps[s]["tokens_per_s"] for s in sorted(steps)][len(steps) // 10:]
    return {"curve": curve, "tokens_per_s": statistics.median(rates), "seconds": total}


def at(curve, index, x):
    """val bpb at x (tokens or seconds) by linear interpolation on the curve; None past its end."""
    points = [(c[index], c[2]) for c in curve]
    if x > points[-1][0] + 1e-9:
        return None
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[0][1] if x <= points[0][0] else points[-1][1]


def table(runs):
    rows = ["depth | recipe  | tokens    | train s | tok/s  | vs base | bpb (equal tokens) | bpb (equal time)"]
    for depth in sorted({r[0] for r in runs}, key=int):
        group = [r for r in runs if r[0] == depth]
        base = group[0][2]
        tokens = min(r[2]["curve"][-1][0] for r in group)
        seconds = min(r[2]["seconds"] for r in group)
        for _, recipe, run in group:
            rows.append(f"{depth:>5} | {recipe:<7} | {tokens:>9.0f} | {run['seconds']:>7.1f} | "
                        f"{run['tokens_per_s']:>6.0f} | {run['tokens_per_s'] / base['tokens_per_s']:>6.2f}x | "
                        f"{at(run['curve'], 0, tokens):>18.4f} | {at(run['curve'], 1, seconds):>16.4f}")
    return "\n".join(rows)


def svg(runs, path):
    """Two panels: val bpb against tokens and against training seconds, one line per run."""
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
    width, height, pad = 460, 320, 50
    ys = [c[2] for r in runs for c in r[2]["curve"]]
    lo, hi = min(ys), max(ys)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{height + 40}" '
           'font-family="sans-serif" font-size="11">']
    for panel, (index, label) in enumerate([(0, "tokens"), (1, "training seconds")]):
        left = panel * width + pad
        xmax = max(c[index] for r in runs for c in r[2]["curve"]) or 1
        out.append(f'<text x="{left}" y="16" font-size="13">val bpb against {label}</text>')
        out.append(f'<rect x="{left}" y="30" width="{width - 2 * pad}" height="{height - 2 * pad}" '
                   'fill="none" stroke="#888"/>')
        out.append(f'<text x="{left}" y="{height - 5}">0</text><text x="{left + width - 2 * pad - 40}" '
                   f'y="{height - 5}">{xmax:.3g}</text>')
        out.append(f'<text x="{left - 45}" y="38">{hi:.3f}</text><text x="{left - 45}" y="{height - pad + 28}">'
                   f'{lo:.3f}</text>')
        for k, (depth, recipe, run) in enumerate(runs):
            pts = " ".join(f"{left + (width - 2 * pad) * c[index] / xmax:.1f},"
                           f"{30 + (height - 2 * pad) * (hi - c[2]) / ((hi - lo) or 1):.1f}" for c in run["curve"])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colours[k % len(colours)]}" '
                       'stroke-width="1.5"/>')
            if panel == 0:
                out.append(f'<text x="{left + 10}" y="{height + 10 + 12 * (k // 2)}" '
                           f'fill="{colours[k % len(colours)]}" dx="{(k % 2) * 160}">d{depth} {recipe}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--svg")
    parser.add_argument("runs", nargs="+", help="DEPTH:RECIPE:metrics.jsonl")
    args = parser.parse_args()
    runs = []
    for spec in args.runs:
        depth, recipe, path = spec.split(":", 2)
        runs.append((depth, recipe, read_run(path)))
    print(table(runs))
    if args.svg:
        svg(runs, args.svg)


if __name__ == "__main__":
    main()
