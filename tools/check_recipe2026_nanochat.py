#!/usr/bin/python3
"""One-off check of tools/torch_recipe2026.py against nanochat's own code, on the CPU in f32.

Usage: check_recipe2026_nanochat.py NANOCHAT_GIT_DIR [COMMIT]
Copies nanochat/gpt.py, optim.py and flash_attention.py of COMMIT (default HEAD) into a scratch
directory (nothing of nanochat is kept in this repository), stubs what Debian's PyTorch 1.13
lacks, builds nanochat's GPT and MuonAdamW, and compares with the twin on the same weights and
tokens: the initialisation from one seed, the parameter names and order, logits, loss, every
gradient, one optimizer step at two loop steps (schedules from base_train.py's own functions) and
5 training steps on one batch with the optimizers' state carried.
Prints the largest differences; exits 1 if one exceeds its bound (see BOUNDS).

The stubs are PyTorch's documented definitions of what 1.13 lacks: F.rms_norm (eps = the
dtype's machine epsilon), F.scaled_dot_product_attention (softmax(q k^T / sqrt(D)) v with the
causal or boolean mask and GQA's head repetition), torch.compile (identity) and
torch._foreach_copy_. nanochat's rotary tables are rounded to bf16, as the twin's are.
"""
import ast
import math
import os
import subprocess
import sys
import tempfile
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_recipe2026 as twin  # noqa: E402
from torch_golden import rms_norm  # noqa: E402

# Largest relative difference (max |a - b| / max |b|) accepted per quantity: f32 on both sides,
# the same formulas in a different operation order; rounding of ~1e-7 per op grows through the
# layers and the optimizer's 5 polar iterations (each multiplies errors by up to ~8). "train": the
# weight changes over 5 steps, which compound that, and Adam's m / sqrt(v) of near-zero gradients
# is steep in them (1.3e-4 measured at nanochat 92d63d4).
BOUNDS = {"logits": 1e-5, "loss": 1e-6, "grad": 1e-4, "step": 1e-5, "train": 1e-3}


def install_stubs():
    torch.compile = lambda *a, **k: a[0] if a and callable(a[0]) else (lambda f: f)
    F.rms_norm = lambda x, shape, eps=None: rms_norm(x)

    def sdpa(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False):
        if enable_gqa:
            k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
            v = v.repeat_interleave(q.size(1) // v.size(1), dim=1)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        if is_causal:
            attn_mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool).tril()
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf"))
        return s.softmax(-1) @ v
    F.scaled_dot_product_attention = sdpa
    if not hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_ = lambda dst, src: [d.copy_(s) for d, s in zip(dst, src)]


def import_nanochat(git_dir, commit, scratch):
    pkg = os.path.join(scratch, "nanochat")
    os.makedirs(pkg)
    for f in ("gpt.py", "optim.py", "flash_attention.py"):
        src = subprocess.run(["git", "-C", git_dir, "show", f"{commit}:nanochat/{f}"], check=True,
                             capture_output=True, text=True).stdout
        with open(os.path.join(pkg, f), "w") as out:
            out.write(src)
    with open(os.path.join(pkg, "__init__.py"), "w"):
        pass
    with open(os.path.join(pkg, "common.py"), "w") as out:
        out.write("import torch\nCOMPUTE_DTYPE = torch.float32\n"
                  "def print0(*a, **k): pass\ndef get_dist_info(): return False, 0, 0, 1\n")
    sys.path.insert(0, scratch)
    import nanochat.gpt as gpt
    return gpt


def schedules(git_dir, commit, num_iterations, weight_decay):
    """base_train.py's get_lr_multiplier, get_muon_momentum and get_weight_decay, with its
    default arguments."""
    src = subprocess.run(["git", "-C", git_dir, "show", f"{commit}:scripts/base_train.py"], check=True,
                         capture_output=True, text=True).stdout
    wanted = {"get_lr_multiplier", "get_muon_momentum", "get_weight_decay"}
    funcs = [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    args = types.SimpleNamespace(warmup_steps=40, warmdown_ratio=0.65, final_lr_frac=0.05)
    ns = {"math": math, "args": args, "num_iterations": num_iterations, "weight_decay_scaled": weight_decay}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), "base_train.py", "exec"), ns)
    return ns["get_lr_multiplier"], ns["get_muon_momentum"], ns["get_weight_decay"]


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def random_weights(cfg, seed):
    # Every weight nonzero (nanochat's init zeroes the output projections) so that every gradient
    # carries signal; the scalars near their usual values.
    g = torch.Generator().manual_seed(seed)
    w = twin.init_weights(cfg, seed)
    return {n: t + 0.2 * torch.randn(t.shape, generator=g) for n, t in w.items()}


def build_nanochat(gpt, cfg):
    conf = gpt.GPTConfig(sequence_len=cfg["max_seq_len"], vocab_size=cfg["vocab_size"], n_layer=cfg["n_layer"],
                         n_head=cfg["n_head"], n_kv_head=cfg["n_kv_head"], n_embd=cfg["n_embd"],
                         window_pattern=cfg["window_pattern"])
    model = gpt.GPT(conf)
    return model


def check_init(gpt, cfg, report):
    model = build_nanochat(gpt, cfg)
    torch.manual_seed(7)
    model.init_weights()
    names = [n for n, _ in model.named_parameters()]
    report("parameter names and order", 0.0 if names == twin.parameter_names(cfg) else 1.0, 0.0)
    ours = twin.init_weights(cfg, 7)
    worst = max((p.detach() - ours[n]).abs().max().item() for n, p in model.named_parameters())
    report("init from one seed (max abs)", worst, 0.0)


def check_model_and_step(gpt, sched, cfg, B, T, report):
    model = build_nanochat(gpt, cfg)
    model.init_weights()
    model.cos, model.sin = model.cos.bfloat16().float(), model.sin.bfloat16().float()
    w = random_weights(cfg, 3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(w[n])
    g = torch.Generator().manual_seed(4)
    idx = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
    targets = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
    targets[0, 5] = targets[-1, T - 1] = -1
    out = twin.golden(w, cfg, idx, targets)
    with torch.no_grad():
        report("logits", rel(out["logits"], model(idx).reshape(B * T, -1)), BOUNDS["logits"])
    loss = model(idx, targets)
    loss.backward()
    report("loss", rel(out["loss"], loss.detach().reshape(1)), BOUNDS["loss"])
    worst = max((rel(out["grad." + n], p.grad), n) for n, p in model.named_parameters())
    report(f"gradients (worst: {worst[1]})", worst[0], BOUNDS["grad"])
    # One step from the twin's gradients on both sides, so that only the optimizers differ.
    for it in (0, cfg["optimizer"]["step"]):
        lrm_of, momentum_of, wd_of = sched
        m = build_nanochat(gpt, cfg)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(w[n])
                p.grad = out["grad." + n].clone()
        o = cfg["optimizer"]
        opt = m.setup_optimizer(unembedding_lr=o["unembedding_lr"], embedding_lr=o["embedding_lr"],
                                matrix_lr=o["matrix_lr"], weight_decay=o["weight_decay"], scalar_lr=o["scalar_lr"])
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lrm_of(it)
            if group["kind"] == "muon":
                group["momentum"], group["weight_decay"] = momentum_of(it), wd_of(it)
        opt.step()
        ours = twin.optimizer_step(w, {n: out["grad." + n] for n in w}, dict(cfg, optimizer=dict(o, step=it)))
        muon = (o["matrix_lr"] * lrm_of(it), wd_of(it))
        worst, ties, count, largest = (0.0, ""), 0, 0, 0.0
        for n, p in m.named_parameters():
            lr_wd = None
            if n.startswith("transformer.h."):
                lr_wd = muon[0] * max(1.0, p.shape[0] / p.shape[1]) ** 0.5 * muon[1]
            err, t = step_error(ours[n], p.detach(), w[n], lr_wd)
            worst, ties, count = max(worst, (err, n)), ties + t, count + p.numel()
            largest = max(largest, (ours[n] - p.detach()).abs().max().item())
        report(f"optimizer step at loop step {it}: largest |difference| of a new weight {largest:.3g}; "
               f"largest |difference| / its bound (worst: {worst[1]})", worst[0], 1.0)
        report(f"  elements where the cautious mask tips the other way (of {count})", ties, count * 1e-4)

    check_training(gpt, sched, cfg, w, idx, targets, report)


def check_training(gpt, sched, cfg, w, idx, targets, report, steps=5):
    """steps training steps on one batch from loop step 0, the optimizers' state carried: what a
    step from fresh state cannot see (Adam's betas, NorMuon's running mean)."""
    lrm_of, momentum_of, wd_of = sched
    m = build_nanochat(gpt, cfg)
    m.init_weights()
    m.cos, m.sin = m.cos.bfloat16().float(), m.sin.bfloat16().float()
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(w[n])
    o = cfg["optimizer"]
    opt = m.setup_optimizer(unembedding_lr=o["unembedding_lr"], embedding_lr=o["embedding_lr"],
                            matrix_lr=o["matrix_lr"], weight_decay=o["weight_decay"], scalar_lr=o["scalar_lr"])
    losses = []
    for it in range(steps):
        loss = m(idx, targets)
        loss.backward()
        losses.append(loss.detach())
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * lrm_of(it)
            if group["kind"] == "muon":
                group["momentum"], group["weight_decay"] = momentum_of(it), wd_of(it)
        opt.step()
        m.zero_grad(set_to_none=True)
    ours_losses, trained = twin.train(w, dict(cfg, optimizer=dict(o, step=0)), idx, targets, steps)
    report(f"{steps} training steps: losses, max rel. difference", rel(ours_losses, torch.stack(losses)), BOUNDS["train"])
    # A cautious-mask tie (see step_error) in one step leaves its element off by lr wd |p| from
    # then on: elements off by more than the bound are counted, the rest bounded.
    worst, outliers, count = (0.0, ""), 0, 0
    for n, p in m.named_parameters():
        ours, theirs = trained[n] - w[n], p.detach() - w[n]
        off = (ours - theirs).abs() > BOUNDS["train"] * theirs.abs().max()
        outliers, count = outliers + int(off.sum()), count + p.numel()
        worst = max(worst, (rel(ours.masked_fill(off, 0), theirs.masked_fill(off, 0)), n))
    report(f"{steps} training steps: weight changes, max rel. difference (worst: {worst[1]})", worst[0],
           BOUNDS["train"])
    report(f"  elements off by more, cautious-mask ties (of {count})", outliers, count * 1e-4)


def step_error(ours, theirs, old, lr_wd):
    """(largest |ours - theirs| over its bound, number of cautious-mask ties) for one parameter.
    The bound is BOUNDS["step"] of the largest update plus 2 ulp of the largest weight, the two
    roundings of new = old - update. A Muon element whose update u is within rounding of zero
    may be decayed on one side only (the mask u * p >= 0 tips): there the difference is
    lr * wd * |old|; those ties are counted, not bounded."""
    diff = (ours - theirs).abs()
    bound = BOUNDS["step"] * (theirs - old).abs().max() + 2 ** -22 * old.abs().max()
    tie = torch.zeros_like(diff, dtype=torch.bool)
    if lr_wd is not None:
        tie = (diff > bound) & ((diff - lr_wd * old.abs()).abs() <= bound + 1e-3 * lr_wd * old.abs())
    return (diff.masked_fill(tie, 0).max() / bound).item(), int(tie.sum())

def main(argv):
    if len(argv) not in (2, 3):
        print("usage: check_recipe2026_nanochat.py NANOCHAT_GIT_DIR [COMMIT]", file=sys.stderr)
        return 2
    commit = argv[2] if len(argv) == 3 else "HEAD"
    failures = []

    def report(what, value, bound):
        print(f"  {what}: {value:.3g} (bound {bound:g})")
        if not value <= bound:
            failures.append(what)

    install_stubs()
    opt = dict(embedding_lr=0.3, unembedding_lr=0.008, matrix_lr=0.02, scalar_lr=0.5, weight_decay=0.28,
               num_iterations=1000, step=450)
    configs = [  # (config, B, T): T above the short window (128 for max_seq_len 256, 256 for 600)
        (dict(vocab_size=300, n_layer=4, n_embd=64, n_head=4, n_kv_head=2, max_seq_len=256), 2, 256),
        (dict(vocab_size=250, n_layer=3, n_embd=64, n_head=2, n_kv_head=2, max_seq_len=600), 1, 300),
    ]
    with tempfile.TemporaryDirectory() as scratch:
        gpt = import_nanochat(argv[1], commit, scratch)
        sched = schedules(argv[1], commit, opt["num_iterations"], opt["weight_decay"])
        for cfg, B, T in configs:
            cfg = dict(cfg, softcap=15.0, rope_base=100000.0, window_pattern="SSSL", recipe="2026", optimizer=opt)
            print(f"{ {k: v for k, v in cfg.items() if k != 'optimizer'} } B={B} T={T}")
            check_init(gpt, cfg, report)
            check_model_and_step(gpt, sched, cfg, B, T, report)
    print("FAILED: " + ", ".join(failures) if failures else "all within bounds")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
