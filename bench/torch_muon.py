#!/usr/bin/env python3
"""Muon for bench/torch_gpu_bench.py, in the two forms a PyTorch user runs it:
- StackedMuon: nanochat's current form. Matrices of one shape are stacked into one [K, rows, cols]
  tensor; the momentum, Newton-Schulz (batched matrix products) and the update run once per shape.
- LoopMuon: the earlier form, one matrix at a time in a Python loop.
Both compute, per matrix: buf = lerp(buf, g, 1 - m); g = lerp(g, buf, m); X = Newton-Schulz(g) in
bf16 (transpose if rows > cols, X / (||X||_F + 1e-7), 5 iterations of A = X X^T, B = b A + c A A,
X = a X + B X); p -= lr sqrt(max(1, rows / cols)) X. Runs on any PyTorch from 1.13 (torch.compile
where there is one) and on the CPU, which is how `python3 bench/torch_muon.py` checks that the two
forms agree.
"""
import sys

try:
    import torch
except ImportError:
    if __name__ != "__main__":
        raise
    print("skipped: no PyTorch here (Debian: python3-torch)")
    sys.exit(77)  # ctest's SKIP_RETURN_CODE


def newton_schulz(G, steps=5, dtype=torch.bfloat16):
    """G [..., rows, cols] -> the orthogonalisation of each matrix of the batch, computed in dtype
    (bf16 as nanochat; f32 for the CPU check below)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.to(dtype)
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def compiled_newton_schulz():
    """torch.compile's Newton-Schulz where PyTorch has it (2.x), else the eager one."""
    return torch.compile(newton_schulz) if hasattr(torch, "compile") else newton_schulz


class LoopMuon(torch.optim.Optimizer):
    """One matrix at a time."""

    def __init__(self, params, lr=0.02, momentum=0.95, ns=newton_schulz):
        super().__init__(params, dict(lr=lr, momentum=momentum))
        self.ns = ns

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = torch.zeros_like(g)
                buf = state["buf"]
                buf.lerp_(g, 1 - group["momentum"])
                g = g.lerp_(buf, group["momentum"])
                p.add_(self.ns(g), alpha=-group["lr"] * max(1, p.size(-2) / p.size(-1)) ** 0.5)


class StackedMuon(torch.optim.Optimizer):
    """Matrices of one shape stacked: one momentum, one batched Newton-Schulz and one update per shape."""

    def __init__(self, params, lr=0.02, momentum=0.95, ns=newton_schulz):
        params = list(params)
        shapes = sorted({tuple(p.shape) for p in params})
        groups = [dict(params=[p for p in params if tuple(p.shape) == s]) for s in shapes]
        super().__init__(groups, dict(lr=lr, momentum=momentum))
        self.ns = ns

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            ps = group["params"]
            g = torch.stack([p.grad for p in ps])  # [K, rows, cols]
            state = self.state[ps[0]]
            if "buf" not in state:
                state["buf"] = torch.zeros_like(g)
            buf = state["buf"]
            buf.lerp_(g, 1 - group["momentum"])
            g.lerp_(buf, group["momentum"])
            x = self.ns(g).to(ps[0].dtype)  # one cast per shape: _foreach_add_'s fast path wants one dtype
            scale = -group["lr"] * max(1, ps[0].size(-2) / ps[0].size(-1)) ** 0.5
            torch._foreach_add_(ps, list(x.unbind(0)), alpha=scale)


def check(dtype, steps=3):
    """The two forms on the CPU over a few small matrices of three shapes (wide, tall, square),
    `steps` steps with Newton-Schulz in dtype. Returns the largest difference between their
    parameters and the largest change of a parameter (that the steps did something)."""
    torch.manual_seed(0)
    shapes = [(8, 24), (8, 24), (24, 8), (16, 16), (24, 8), (8, 24)]
    a = [torch.randn(s) for s in shapes]
    b = [t.clone() for t in a]
    start = [t.clone() for t in a]
    ns = lambda g: newton_schulz(g, dtype=dtype)  # noqa: E731
    opt_a, opt_b = LoopMuon(a, ns=ns), StackedMuon(b, ns=ns)
    for _ in range(steps):
        grads = [torch.randn(s) for s in shapes]
        for p, q, g in zip(a, b, grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt_a.step()
        opt_b.step()
    diff = max((p - q).abs().max().item() for p, q in zip(a, b))
    moved = max((p - s).abs().max().item() for p, s in zip(a, start))
    return diff, moved


if __name__ == "__main__":
    # In f32 the two forms are the same arithmetic: equal bit for bit. In bf16 PyTorch's CPU rounds
    # a batched product (bmm) and a single one (mm) differently (one bf16 unit in B X at the first
    # iteration, seen with torch 1.13), and five iterations carry that on. Allowed: a tenth of what
    # 3 steps of lr 0.02 move a parameter whose update entry is 1 (0.006); a different algorithm
    # (another scale, a missed transpose) moves them apart by the whole update.
    ok = True
    for dtype, tol in [(torch.float32, 0.0), (torch.bfloat16, 0.1 * 0.02 * 3)]:
        diff, moved = check(dtype)
        good = diff <= tol and moved > 0.01
        ok &= good
        print(f"torch {torch.__version__}, Newton-Schulz in {dtype}: stacked vs per-matrix Muon, 3 steps, 6 matrices "
              f"of 3 shapes on the CPU: largest difference {diff:g} (allowed {tol:g}), largest change {moved:g}"
              f"{'' if good else '  FAILED'}")
    sys.exit(0 if ok else 1)
