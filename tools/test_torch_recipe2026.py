#!/usr/bin/python3
"""Self-test of tools/torch_recipe2026.py, run by ctest without nanochat (exit 77 = skipped when
python3-torch is missing). The twin's agreement with nanochat's own code is checked once by
tools/check_recipe2026_nanochat.py (docs/recipe2026.md); these are the properties that keep it
honest when it changes: gradients against finite differences in f64, causality and the sliding
window, the schedules and a zero-gradient step at values read off nanochat's code, Polar Express's
output, and the file protocol end to end."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: no PyTorch here (Debian: python3-torch)")
    sys.exit(77)  # ctest's SKIP_RETURN_CODE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_recipe2026 as twin  # noqa: E402

FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def small_config(**over):
    # 4 layers: windows S S S L, value embeddings on layers 1 and 3, backout after layer 2.
    # n_embd 32 is the smallest that holds the 24 smear channels with 4 heads of size 8.
    cfg = dict(vocab_size=50, n_layer=4, n_embd=32, n_head=4, n_kv_head=2, max_seq_len=256, softcap=15.0,
               rope_base=100000.0, window_pattern="SSSL", recipe="2026", optimizer={})
    cfg.update(over)
    return cfg


def random_weights(cfg, dtype=torch.float32, seed=0):
    # nanochat's init plus noise, so that no weight (e.g. the zeroed projections) is trivially 0.
    g = torch.Generator().manual_seed(seed)
    return {n: (t + 0.3 * torch.randn(t.shape, generator=g)).to(dtype) for n, t in twin.init_weights(cfg, seed).items()}


def tokens(cfg, B, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg["vocab_size"], (B, T), generator=g)


def test_gradients_match_finite_differences():
    # f64, central differences with h = 1e-6: truncation ~h^2 and rounding ~1e-16 / h, both far
    # below the 1e-7 tolerance, which in turn is far below the gradients checked (~1e-3 .. 1).
    # T = 140 exceeds the short window (128), so masked and unmasked layers are both in the path.
    cfg = small_config()
    w = {n: t.requires_grad_(True) for n, t in random_weights(cfg, torch.float64).items()}
    idx, targets = tokens(cfg, 1, 140), tokens(cfg, 1, 140, seed=2)
    twin.loss_of(twin.forward(w, cfg, idx), targets).backward()
    worst, g = 0.0, torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in w.items():
            flat, grad = p.view(-1), p.grad.view(-1)
            # the largest gradient element (embedding rows of absent tokens are zero) and two random ones
            for i in [int(grad.abs().argmax())] + torch.randint(0, flat.numel(), (2,), generator=g).tolist():
                keep = flat[i].item()
                flat[i] = keep + 1e-6
                up = twin.loss_of(twin.forward(w, cfg, idx), targets).item()
                flat[i] = keep - 1e-6
                down = twin.loss_of(twin.forward(w, cfg, idx), targets).item()
                flat[i] = keep
                worst = max(worst, abs((up - down) / 2e-6 - grad[i].item()))
    check(worst < 1e-7, f"autograd gradients match central differences in f64 (worst {worst:.2g})")


def test_causal_and_windowed():
    # A token changes no logit before it (smear and attention only look back).
    cfg = small_config()
    w = random_weights(cfg)
    idx = tokens(cfg, 1, 140)
    other = idx.clone()
    other[0, 70] = (idx[0, 70] + 1) % cfg["vocab_size"]
    a, b = twin.forward(w, cfg, idx), twin.forward(w, cfg, other)
    check(torch.equal(a[0, :70], b[0, :70]) and not torch.equal(a[0, 70], b[0, 70]),
          "the model is causal: a token changes its own logits and none before it")
    # One attention: query t reads keys t - w .. t, nothing older.
    T, window = 20, 5
    q, k, v = (torch.randn(1, T, 2, 4, generator=torch.Generator().manual_seed(s)) for s in (4, 5, 6))
    base = twin.attention(q, k, v, window)
    t = 15
    for j, seen in ((t - window - 1, False), (t - window, True), (t, True)):
        v2 = v.clone()
        v2[0, j] += 1.0
        changed = not torch.equal(twin.attention(q, k, v2, window)[0, t], base[0, t])
        check(changed == seen, f"query {t} with window {window} {'reads' if seen else 'ignores'} position {j}")


def test_window_sizes():
    # nanochat's code: "S" is a quarter of the sequence rounded up to a multiple of 128 (its
    # comment's "2048 -> 768" is stale: the expression gives 512), the last layer is "L".
    cfg = small_config(n_layer=6, max_seq_len=2048)
    check(twin.window_sizes(cfg) == [512, 512, 512, 2048, 512, 2048], "SSSL tiled over 6 layers at 2048")
    check(twin.window_sizes(small_config(max_seq_len=1000))[0] == 256, "a quarter of 1000 rounds up to 256")
    check(twin.window_sizes(small_config(max_seq_len=100))[0] == 128, "a short window is at least 128")
    check(twin.window_sizes(small_config(window_pattern="L")) == [256] * 4, "pattern L is full context")


def test_schedules():
    # base_train.py's values: warmup 40, warmdown 0.65 of N to 0.05, momentum 0.85 -> 0.97
    # over 400 steps then down to 0.90, weight decay cosine to zero.
    o = dict(num_iterations=1000, weight_decay=0.2)
    close = lambda a, b: abs(a - b) < 1e-12  # exact formulas: only rounding of a few operations
    check(close(twin.lr_multiplier(0, o), 1 / 40) and close(twin.lr_multiplier(39, o), 1.0), "lr warmup")
    check(close(twin.lr_multiplier(350, o), 1.0) and close(twin.lr_multiplier(1000, o), 0.05), "lr warmdown ends")
    check(close(twin.lr_multiplier(675, o), 0.5 + 0.5 * 0.05), "lr halfway through the warmdown")
    check(close(twin.muon_momentum(200, o), 0.91) and close(twin.muon_momentum(1000, o), 0.90), "momentum")
    check(close(twin.muon_weight_decay(500, o), 0.1) and close(twin.muon_weight_decay(1000, o), 0.0), "wd")


def test_zero_gradient_step_only_decays():
    # Zero gradients: Adam's update is 0 / (0 + eps) and Muon's orthogonalised update is 0, whose
    # cautious mask (0 * p >= 0) holds everywhere, so every weight is multiplied by 1 - lr * wd.
    # The lr and wd of each group are nanochat's, at n_embd 32 (AdamW lr scale sqrt(768 / 32)).
    cfg = small_config(optimizer=dict(step=500, num_iterations=1000, weight_decay=0.2))
    w = random_weights(cfg)
    new = twin.optimizer_step(w, {n: torch.zeros_like(t) for n, t in w.items()}, cfg)
    s = math.sqrt(768 / 32)
    lrm = (1000 - 500) / 650 + (1 - (1000 - 500) / 650) * 0.05  # 500 steps before the end of 650
    muon_wd = 0.2 * 0.5 * (1 + math.cos(math.pi * 0.5))
    factor = {"lm_head.weight": 1 - 0.008 * s * lrm * 0.01, "transformer.wte.weight": 1 - 0.3 * s * lrm * 0.001,
              "value_embeds.1.weight": 1 - 0.15 * s * lrm * 0.01, "resid_lambdas": 1 - 0.005 * lrm * 0.05,
              "x0_lambdas": 1.0, "smear_lambda": 1.0, "transformer.h.0.attn.c_q.weight": 1 - 0.02 * lrm * muon_wd,
              "transformer.h.2.mlp.c_fc.weight": 1 - 0.02 * lrm * 2 * muon_wd}  # [128, 32]: lr x sqrt(4)
    worst = max((new[n] - w[n] * f).abs().max().item() / w[n].abs().max().item() for n, f in factor.items())
    # Both sides round p (1 - lr wd) once or twice in f32: a few 1e-8 of the largest weight.
    # The schedules' values at step 500 given explicitly (at another step) give the same step.
    o = cfg["optimizer"]
    fixed = dict(o, lr_multiplier=twin.lr_multiplier(500, o), momentum=twin.muon_momentum(500, o),
                 muon_weight_decay=twin.muon_weight_decay(500, o), step=7)
    grads = {n: torch.randn(t.shape, generator=torch.Generator().manual_seed(5)) for n, t in w.items()}
    a, b = twin.optimizer_step(w, grads, cfg), twin.optimizer_step(w, grads, dict(cfg, optimizer=fixed))
    check(all(torch.equal(a[n], b[n]) for n in a), "explicit lr_multiplier, momentum, muon_weight_decay")
    check(worst < 1e-6, f"a zero-gradient step multiplies each weight by 1 - lr * wd of its group ({worst:.2g})")


def test_cautious_weight_decay():
    # Muon decays a weight only where its update u agrees in sign with it. u is read off a step
    # without decay (p - lr u); the decay's share of the step with it must be lr wd p where
    # u p >= 0 and nothing elsewhere. Tolerance: f32 rounding of p - lr u, ~1e-7 of |p| ~ 1.
    g = torch.Generator().manual_seed(8)
    p, grad = torch.randn(32, 96, generator=g), torch.randn(32, 96, generator=g)
    lr, wd = 0.01, 0.5
    plain = twin.muon_step(p, grad, {}, lr, 0.9, 0.0, 0.9, 5)
    decayed = twin.muon_step(p, grad, {}, lr, 0.9, wd, 0.9, 5)
    u = (p - plain) / lr
    want = lr * wd * p * (u * p >= 0)
    worst = ((plain - decayed) - want).abs().max().item()
    check(worst < 1e-6 and 0 < int((u * p < 0).sum()) < p.numel(),
          f"cautious weight decay only where u p >= 0 ({worst:.2g})")


def test_state_is_carried():
    # Two AdamW steps of x0_lambdas (betas 0.96, 0.95, lr scalar_lr, no decay) from gradients g1,
    # g2, written out: m = 0.04 g1 -> 0.96 m + 0.04 g2, likewise v, bias corrections 1 - beta^2.
    # Tolerance: f32 rounding of a few operations on values ~1.
    cfg = small_config(optimizer=dict(num_iterations=1000, step=100))
    w = random_weights(cfg)
    g = torch.Generator().manual_seed(9)
    g1, g2 = ({n: torch.randn(t.shape, generator=g) for n, t in w.items()} for _ in range(2))
    opt = twin.Optimizer(cfg)
    w2 = opt.step(opt.step(w, g1, 100), g2, 101)
    m = 0.96 * 0.04 * g1["x0_lambdas"] + 0.04 * g2["x0_lambdas"]
    v = 0.95 * 0.05 * g1["x0_lambdas"] ** 2 + 0.05 * g2["x0_lambdas"] ** 2
    first = w["x0_lambdas"] - 0.5 * g1["x0_lambdas"] / (g1["x0_lambdas"].abs() + 1e-10)
    want = first - 0.5 / (1 - 0.96 ** 2) * m / ((v / (1 - 0.95 ** 2)).sqrt() + 1e-10)
    err = (w2["x0_lambdas"] - want).abs().max().item()
    check(err < 1e-5, f"the second AdamW step uses the first's moments ({err:.2g})")
    # Training on one batch lowers its loss, and its first step is the one-step golden's.
    idx, targets = tokens(cfg, 2, 32), tokens(cfg, 2, 32, seed=2)
    losses, trained = twin.train(w, cfg, idx, targets, 4)
    one = twin.train(w, cfg, idx, targets, 1)[1]
    step = twin.golden(w, cfg, idx, targets)
    check(bool((losses[1:] < losses[:-1]).all()), f"the loss falls over 4 steps on one batch ({losses.tolist()})")
    check(all(torch.equal(one[n], step["step." + n]) for n in one), "one training step is the golden's step.*")
    # With N batches [N, B, T], step k trains on batch k mod N: the second loss is the second batch's.
    other, other_targets = tokens(cfg, 2, 32, seed=3), tokens(cfg, 2, 32, seed=4)
    curve = twin.train(w, cfg, torch.stack([idx, other]), torch.stack([targets, other_targets]), 2)[0]
    second = twin.loss_of(twin.forward(one, cfg, other), other_targets)
    check(curve[0] == losses[0] and curve[1] == second, f"step k trains on batch k mod N ({curve.tolist()}, "
          f"batch 0 {losses[0].item()}, batch 1 after a step {second.item()})")


def test_orthogonalize():
    # Polar Express (5 iterations) brings every singular value of a full-rank rectangular
    # matrix close to 1 (nanochat's coefficients leave them within about 0.85 .. 1.15), and the
    # Muon+ snap makes the Frobenius norm exactly sqrt(min(rows, cols)) up to f32 rounding.
    for shape in ((64, 256), (256, 64), (2, 12)):
        X = twin.orthogonalize(torch.randn(*shape, generator=torch.Generator().manual_seed(7)), 5)
        sv = torch.linalg.svdvals(X)
        ok = 0.7 < sv.min().item() and sv.max().item() < 1.3 and abs(X.norm().item() / math.sqrt(min(shape)) - 1) < 1e-5
        check(ok, f"Polar Express of a {shape[0]}x{shape[1]} matrix: singular values "
                  f"{sv.min().item():.3f} .. {sv.max().item():.3f}, norm {X.norm().item():.4f}")


def write_safetensors(path, tensors):
    """F32 and I32 tensors in the safetensors layout (an 8-byte header length, JSON, data)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        dtype = "I32" if t.dtype == torch.int32 else "F32"
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_twin(directory, *flags):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_recipe2026.py")
    return subprocess.run([sys.executable, script, directory, *flags], capture_output=True, text=True)


def test_file_protocol():
    cfg = small_config(optimizer=dict(step=0, steps=2, num_iterations=100))
    w = random_weights(cfg)
    idx, targets = tokens(cfg, 2, 16).int(), tokens(cfg, 2, 16, seed=2).int()
    targets[0, 3] = -1
    with tempfile.TemporaryDirectory() as d:
        write_safetensors(os.path.join(d, "input.safetensors"), dict(w, inputs=idx, targets=targets))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        r = run_twin(d)
        check(r.returncode == 0, f"the twin runs on DIR ({r.stderr.strip()})")
        if r.returncode != 0:
            return
        from torch_golden import load_safetensors
        out = load_safetensors(os.path.join(d, "golden.safetensors"))
        want = {"logits": [32, cfg["vocab_size"]], "loss": [1]}
        want.update({p + n: list(t.shape) for n, t in w.items() for p in ("grad.", "step.", "trained.")})
        want["losses"] = [2]
        check({n: list(t.shape) for n, t in out.items()} == want,
              "golden.safetensors holds logits, loss, grad.*, step.*, losses, trained.*")
        direct = twin.golden(w, cfg, idx.long(), targets.long())
        check(all(torch.equal(out[n], direct[n].detach()) for n in want), "the file holds what the functions compute")
        # --device: the same computation on the named device; one the machine lacks is one line.
        r = run_twin(d, "--device", "cpu")
        out_cpu = load_safetensors(os.path.join(d, "golden.safetensors"))
        check(r.returncode == 0 and all(torch.equal(out_cpu[n], out[n]) for n in want),
              f"--device cpu writes the same file ({r.stderr.strip()})")
        if not torch.cuda.is_available():
            r = run_twin(d, "--device", "cuda")
            check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no CUDA device" in r.stderr,
                  f"--device cuda without a GPU is refused in one line ({r.stderr.strip()})")
        bad = idx.clone()
        bad[1, 2] = cfg["vocab_size"]
        write_safetensors(os.path.join(d, "input.safetensors"), dict(w, inputs=bad, targets=targets))
        r = run_twin(d)
        check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "token ids" in r.stderr,
              f"a token id past the vocabulary is refused in one line ({r.stderr.strip()})")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(cfg, recipe="classic"), f)
        r = run_twin(d)
        check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "recipe" in r.stderr,
              f"a classic config is refused in one line ({r.stderr.strip()})")


def main():
    torch.set_num_threads(1)  # the suite runs tests side by side
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
    print(f"{len(FAILURES)} failed" if FAILURES else "all passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
