#!/usr/bin/python3
"""PyTorch twin of nanochat's 2026 GPT and its Muon/AdamW optimizer (Debian python3-torch, CPU, f32).

Usage: torch_recipe2026.py DIR [--device DEVICE]
Reads DIR/input.safetensors (every weight under nanochat's state-dict names, plus `inputs` and
`targets` int32 [B, T]) and DIR/config.json (the model config with "recipe": "2026" and an
"optimizer" object, keys below), writes DIR/golden.safetensors:
  logits        soft-capped logits of every position [B*T, vocab]
  loss          mean cross-entropy over targets != -1 [1]
  grad.<name>   the gradient of every parameter
  step.<name>   every parameter after one optimizer step from those gradients, optimizer state
                fresh (zero moments, Adam's bias-correction count 1), schedules at loop step `step`
and, when the optimizer's `steps` is K > 1, K training steps with the state carried (what one
step from fresh state cannot see: Adam's betas, NorMuon's running mean), all on the same batch, or
with `inputs` and `targets` of shape [N, B, T] step k on batch k mod N (a training curve; the
outputs above then come from batch 0):
  losses        the loss before each step [K]
  trained.<name> every parameter after the K steps

This is an independent implementation written from nanochat's facts (docs/recipe2026.md says
which commit and how it was checked against nanochat's own code): autograd gives the gradients,
the optimizer is spelled out matrix by matrix. Rotary tables are rounded to bf16 as nanochat
computes them on a GPU (and as nanoddp does); everything else is f32. --device cuda computes on
the GPU (PyTorch 2.x with CUDA; the files stay on the host); bench/torch_recipe2026_gpu_bench.py
times this model and optimizer there.

config.json: vocab_size, n_layer, n_embd, n_head, n_kv_head, max_seq_len (nanochat's
sequence_len, which sizes the sliding windows), softcap (15), rope_base (100000), window_pattern
("SSSL"), recipe ("2026"). "optimizer": embedding_lr (0.3), unembedding_lr (0.008), matrix_lr
(0.02), scalar_lr (0.5), weight_decay (Muon's, already scaled by the caller; 0.28), ns_steps (5),
beta2 (0.9), step (the training loop's 0-based step; 0), steps (1), num_iterations (needed past
loop step 0, or with warmup_steps 0), warmup_steps (40), warmdown_ratio (0.65), final_lr_frac (0.05),
smear_lr (0.2, fixed in nanochat). Defaults in brackets are nanochat's base_train.py's. Optional
lr_multiplier, momentum and muon_weight_decay replace the schedules' values at every step, to test
an optimizer apart from its schedules.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_golden import load_safetensors, rms_norm, rotary_tables, rotate, save_safetensors  # noqa: E402

VE_GATE_CHANNELS = 12  # channels of the block input that drive the value-embedding gates
SMEAR_CHANNELS = 24  # channels of the embedding that drive the smear gate


class UsageError(Exception):
    """A wrong input file or config: reported as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------
# Model facts: which layers carry what, in nanochat's parameter order.

def has_value_embedding(layer, n_layer):
    # Every other layer, counted so that the last layer always has one.
    return layer % 2 == (n_layer - 1) % 2


def parameter_names(cfg):
    """nanochat's named_parameters() order: the GPT's own scalars first, then its submodules in
    the order they are registered (transformer, lm_head, smear_gate, value_embeds)."""
    names = ["resid_lambdas", "x0_lambdas", "smear_lambda", "backout_lambda", "transformer.wte.weight"]
    n_layer = cfg["n_layer"]
    for l in range(n_layer):
        h = f"transformer.h.{l}."
        names += [h + f"attn.{m}.weight" for m in ("c_q", "c_k", "c_v", "c_proj")]
        if has_value_embedding(l, n_layer):
            names.append(h + "attn.ve_gate.weight")
        names += [h + "mlp.c_fc.weight", h + "mlp.c_proj.weight"]
    names += ["lm_head.weight", "smear_gate.weight"]
    names += [f"value_embeds.{l}.weight" for l in range(n_layer) if has_value_embedding(l, n_layer)]
    return names


def parameter_shapes(cfg):
    """Shape of every parameter; the vocabulary is padded to a multiple of 64."""
    C, L, H, Hkv = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["n_kv_head"]
    V = (cfg["vocab_size"] + 63) // 64 * 64
    kv = Hkv * (C // H)
    shapes = {"resid_lambdas": [L], "x0_lambdas": [L], "smear_lambda": [1], "backout_lambda": [1],
              "transformer.wte.weight": [V, C], "lm_head.weight": [V, C],
              "smear_gate.weight": [1, SMEAR_CHANNELS]}
    for l in range(L):
        h = f"transformer.h.{l}."
        shapes.update({h + "attn.c_q.weight": [C, C], h + "attn.c_k.weight": [kv, C], h + "attn.c_v.weight": [kv, C],
                       h + "attn.c_proj.weight": [C, C], h + "mlp.c_fc.weight": [4 * C, C],
                       h + "mlp.c_proj.weight": [C, 4 * C]})
        if has_value_embedding(l, L):
            shapes[h + "attn.ve_gate.weight"] = [Hkv, VE_GATE_CHANNELS]
            shapes[f"value_embeds.{l}.weight"] = [V, kv]
    return {n: shapes[n] for n in parameter_names(cfg)}


def window_sizes(cfg):
    """Left window of every layer: a query at t sees keys t - w .. t. "L" is the whole sequence,
    "S" a quarter of it rounded up to a multiple of 128 (FlashAttention's tile; 2048 -> 512); the
    pattern is tiled over the layers and the last layer is always "L"."""
    long_window = cfg["max_seq_len"]
    short_window = -(-long_window // 4 // 128) * 128
    pattern = cfg.get("window_pattern", "SSSL").upper()
    if not pattern or any(c not in "SL" for c in pattern):
        raise UsageError(f"window_pattern {pattern!r} must be made of S and L")
    sizes = [short_window if pattern[l % len(pattern)] == "S" else long_window for l in range(cfg["n_layer"])]
    sizes[-1] = long_window
    return sizes


def init_weights(cfg, seed):
    """nanochat's initialisation, drawn in nanochat's order from torch.manual_seed(seed), so that
    the same seed gives the same values as nanochat's GPT.init_weights() in f32."""
    torch.manual_seed(seed)
    w = {n: torch.zeros(s) for n, s in parameter_shapes(cfg).items()}
    C, L = cfg["n_embd"], cfg["n_layer"]
    bound = math.sqrt(3.0 / C)  # uniform on [-bound, bound] has std 1/sqrt(C)
    w["transformer.wte.weight"].normal_(0.0, 0.8)
    w["lm_head.weight"].normal_(0.0, 0.001)
    for l in range(L):
        h = f"transformer.h.{l}."
        for m in ("c_q", "c_k", "c_v"):
            w[h + f"attn.{m}.weight"].uniform_(-bound, bound)
        w[h + "mlp.c_fc.weight"].uniform_(-0.4 * bound, 0.4 * bound)
        # c_proj of attention and MLP stay zero
    for l in range(L):
        w["resid_lambdas"][l] = 1.15 - 0.10 * l / max(L - 1, 1)
        w["x0_lambdas"][l] = 0.20 - 0.15 * l / max(L - 1, 1)
    w["backout_lambda"].fill_(0.2)
    w["smear_gate.weight"].uniform_(0.0, 0.02)
    for l in range(L):
        if has_value_embedding(l, L):
            w[f"value_embeds.{l}.weight"].uniform_(-bound, bound)
    for l in range(L):
        if has_value_embedding(l, L):
            w[f"transformer.h.{l}.attn.ve_gate.weight"].uniform_(0.0, 0.02)
    return w


# ----------------------------------------------------------------------------------------------
# Forward pass. Shapes: B batch, T positions, C channels, H query heads, Hkv key/value heads,
# D = C / H head size, V padded vocabulary.

def attention(q, k, v, window):
    """Causal attention of q [B, T, H, D] over k, v [B, T, Hkv, D], query t seeing keys
    max(0, t - window) .. t; query head h reads key/value head h // (H / Hkv). The scores are
    scaled by 1/sqrt(D). Returns [B, T, H, D]."""
    T, H, Hkv, D = q.shape[1], q.shape[2], k.shape[2], q.shape[3]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    t = torch.arange(T, device=q.device)
    lag = t[:, None] - t[None, :]  # [T (query), T (key)]
    visible = (lag >= 0) & (lag <= window)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    return (scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v).transpose(1, 2)


def smear(x, w):
    """Adds to each position t >= 1 a gated share of position t-1's normed embedding:
    x[t] += smear_lambda * sigmoid(smear_gate . x[t, :24]) * x[t-1]. x [B, T, C]."""
    gate = w["smear_lambda"] * torch.sigmoid(x[:, 1:, :SMEAR_CHANNELS] @ w["smear_gate.weight"].T)  # [B, T-1, 1]
    return torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], dim=1)


def attention_block(x, w, cfg, l, idx, rope, window):
    """The attention half of layer l on the normed residual x [B, T, C]: queries and keys rotated
    then RMS-normed and each scaled by 1.2; on layers with a value embedding, v gains
    3 * sigmoid(ve_gate . x[:, :, :12]) (one gate per key/value head) times that embedding."""
    B, T, C = x.shape
    H, Hkv = cfg["n_head"], cfg["n_kv_head"]
    D = C // H
    h = f"transformer.h.{l}.attn."
    q = (x @ w[h + "c_q.weight"].T).view(B, T, H, D)
    k = (x @ w[h + "c_k.weight"].T).view(B, T, Hkv, D)
    v = (x @ w[h + "c_v.weight"].T).view(B, T, Hkv, D)
    if has_value_embedding(l, cfg["n_layer"]):
        ve = F.embedding(idx, w[f"value_embeds.{l}.weight"]).view(B, T, Hkv, D)
        gate = 3 * torch.sigmoid(x[..., :VE_GATE_CHANNELS] @ w[h + "ve_gate.weight"].T)  # [B, T, Hkv]
        v = v + gate.unsqueeze(-1) * ve
    cos, sin = rope
    q = rms_norm(rotate(q, cos, sin)) * 1.2
    k = rms_norm(rotate(k, cos, sin)) * 1.2
    y = attention(q, k, v, window).reshape(B, T, C)
    return y @ w[h + "c_proj.weight"].T


def forward(w, cfg, idx):
    """Soft-capped logits [B, T, vocab] of token ids idx [B, T] (int64)."""
    B, T = idx.shape
    L = cfg["n_layer"]
    cos, sin = rotary_tables(T, cfg["n_embd"] // cfg["n_head"], cfg.get("rope_base", 100000.0))
    dtype = w["transformer.wte.weight"].dtype  # f32, or f64 for the self-test's finite differences
    rope = (cos.to(device=idx.device, dtype=dtype), sin.to(device=idx.device, dtype=dtype))
    windows = window_sizes(cfg)
    x = smear(rms_norm(F.embedding(idx, w["transformer.wte.weight"])), w)
    x0 = x
    saved = None  # the residual after the middle layer, partly taken out before the head
    for l in range(L):
        x = w["resid_lambdas"][l] * x + w["x0_lambdas"][l] * x0
        x = x + attention_block(rms_norm(x), w, cfg, l, idx, rope, windows[l])
        hidden = F.relu(rms_norm(x) @ w[f"transformer.h.{l}.mlp.c_fc.weight"].T).square()
        x = x + hidden @ w[f"transformer.h.{l}.mlp.c_proj.weight"].T
        if l == L // 2:
            saved = x
    x = rms_norm(x - w["backout_lambda"] * saved)
    logits = (x @ w["lm_head.weight"].T)[..., :cfg["vocab_size"]]
    cap = cfg.get("softcap", 15.0)
    return cap * torch.tanh(logits / cap)


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


# ----------------------------------------------------------------------------------------------
# Schedules of base_train.py as functions of the 0-based loop step `it`, over N iterations.

def lr_multiplier(it, opt):
    """Linear warmup over warmup_steps, flat, then linear warmdown to final_lr_frac over the last
    round(warmdown_ratio * N) steps (Python's round: halves go to even)."""
    warmup = opt.get("warmup_steps", 40)
    if it < warmup:
        return (it + 1) / warmup
    n = iterations(opt)
    warmdown = round(opt.get("warmdown_ratio", 0.65) * n)
    if it <= n - warmdown:
        return 1.0
    progress = (n - it) / warmdown
    return progress + (1 - progress) * opt.get("final_lr_frac", 0.05)


def muon_momentum(it, opt):
    """0.85 -> 0.97 over the first 400 steps, 0.97, then down to 0.90 over the warmdown."""
    if it < 400:
        return 0.85 + (0.97 - 0.85) * it / 400
    n = iterations(opt)
    warmdown = round(opt.get("warmdown_ratio", 0.65) * n)
    if it >= n - warmdown:
        progress = (it - (n - warmdown)) / warmdown
        return 0.97 * (1 - progress) + 0.90 * progress
    return 0.97


def muon_weight_decay(it, opt):
    """Cosine from weight_decay at step 0 to zero at step N."""
    wd = opt.get("weight_decay", 0.28)
    if it == 0:
        return wd
    return wd * 0.5 * (1 + math.cos(math.pi * it / iterations(opt)))


def iterations(opt):
    if "num_iterations" not in opt:
        raise UsageError("config.json's optimizer needs num_iterations for its step and warmup_steps")
    return opt["num_iterations"]


# ----------------------------------------------------------------------------------------------
# One optimizer step from fresh state.

def adamw_groups(cfg, opt):
    """(names, lr, beta1, beta2, weight decay) of each AdamW group, before the lr multiplier.
    lm_head, wte and value_embeds scale their lr by 1/sqrt(n_embd / 768)."""
    s = (cfg["n_embd"] / 768) ** -0.5
    emb, scalar = opt.get("embedding_lr", 0.3), opt.get("scalar_lr", 0.5)
    ve = [n for n in parameter_names(cfg) if n.startswith("value_embeds.")]
    return [
        (["lm_head.weight"], opt.get("unembedding_lr", 0.008) * s, 0.8, 0.96, 0.01),
        (["transformer.wte.weight"], emb * s, 0.8, 0.995, 0.001),
        (ve, emb * s * 0.5, 0.8, 0.995, 0.01),
        (["resid_lambdas"], scalar * 0.01, 0.8, 0.95, 0.05),
        (["x0_lambdas"], scalar, 0.96, 0.95, 0.0),
        (["smear_gate.weight", "smear_lambda", "backout_lambda"], opt.get("smear_lr", 0.2), 0.8, 0.95, 0.0),
    ]


def adamw_step(p, g, state, lr, beta1, beta2, wd, eps=1e-10):
    """Decoupled weight decay, then bias-corrected Adam. state: {"t", "m", "v"}, updated."""
    state["t"] = state.get("t", 0) + 1
    m = state["m"] = torch.lerp(state.get("m", torch.zeros_like(g)), g, 1 - beta1)
    v = state["v"] = torch.lerp(state.get("v", torch.zeros_like(g)), g * g, 1 - beta2)
    t = state["t"]
    return p * (1 - lr * wd) - (lr / (1 - beta1 ** t)) * m / ((v / (1 - beta2 ** t)).sqrt() + eps)


# Polar Express coefficients (a, b, c) of its 5 iterations, from Amsel et al. 2025 as nanochat uses them.
POLAR_EXPRESS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def orthogonalize(G, steps):
    """G [rows, cols] -> approximately its polar factor U V^T, Frobenius norm sqrt(min(rows, cols)).
    Rows are first rescaled to the mean row norm (MuonEq), then the matrix is divided by
    1.01 ||G||_F and Polar Express iterates X <- a X + (b A + c A^2) X on the Gram matrix of the
    short side (X X^T when wide, X^T X on the right when tall); last, the norm is snapped."""
    rows, cols = G.shape
    mean_row = G.norm() / math.sqrt(rows)
    X = G * (mean_row / G.norm(dim=1, keepdim=True).clamp_min(1e-6))
    X = X / (X.norm() * 1.01 + 1e-6)
    for a, b, c in POLAR_EXPRESS[:steps]:
        if rows > cols:
            A = X.T @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.T
            X = a * X + (b * A + c * (A @ A)) @ X
    return X * (math.sqrt(min(rows, cols)) / X.norm().clamp_min(1e-6))


def normuon_scale(X, state, beta2):
    """NorMuon: per row (rows >= cols) or per column (wide), divide by the root of beta2's running
    mean of the mean squared entry (state["second"], updated), then restore X's Frobenius norm."""
    dim = 1 if X.shape[0] >= X.shape[1] else 0  # the dimension averaged over
    mean_sq = X.square().mean(dim=dim, keepdim=True)
    second = state["second"] = torch.lerp(state.get("second", torch.zeros_like(mean_sq)), mean_sq, 1 - beta2)
    inv_rms = second.clamp_min(1e-10).rsqrt()
    norm_before = (mean_sq.sum() * X.shape[dim]).sqrt()
    norm_after = (mean_sq * X.shape[dim] * inv_rms.square()).sum().sqrt()
    return X * (inv_rms * (norm_before / norm_after.clamp_min(1e-10)))


def muon_step(p, g, state, lr, momentum, wd, beta2, steps):
    """Nesterov momentum (state["buf"]), orthogonalise, NorMuon, then p -= lr' (u + wd p m) with
    lr' = lr sqrt(max(1, rows / cols)) and m = 1 where u and p agree in sign or either is zero
    (cautious weight decay). state starts empty and is updated."""
    buf = state["buf"] = torch.lerp(state.get("buf", torch.zeros_like(g)), g, 1 - momentum)
    u = torch.lerp(g, buf, momentum)
    u = normuon_scale(orthogonalize(u, steps), state, beta2)
    lr = lr * max(1.0, p.shape[0] / p.shape[1]) ** 0.5
    agree = (u * p >= 0).to(p.dtype)
    return p - (lr * u + lr * wd * p * agree)


class Optimizer:
    """MuonAdamW over the weights of one config; state per parameter name, empty at first."""

    def __init__(self, cfg):
        self.cfg, self.opt = cfg, cfg.get("optimizer", {})
        self.state = {n: {} for n in parameter_names(cfg)}

    def step(self, w, grads, it):
        """Every parameter after one step at loop step it (the schedules' argument)."""
        opt = self.opt
        lrm = opt["lr_multiplier"] if "lr_multiplier" in opt else lr_multiplier(it, opt)
        new = {}
        for names, lr, beta1, beta2, wd in adamw_groups(self.cfg, opt):
            for n in names:
                new[n] = adamw_step(w[n], grads[n], self.state[n], lr * lrm, beta1, beta2, wd)
        momentum = opt["momentum"] if "momentum" in opt else muon_momentum(it, opt)
        wd = opt["muon_weight_decay"] if "muon_weight_decay" in opt else muon_weight_decay(it, opt)
        for n in parameter_names(self.cfg):
            if n.startswith("transformer.h."):
                new[n] = muon_step(w[n], grads[n], self.state[n], opt.get("matrix_lr", 0.02) * lrm, momentum,
                                   wd, opt.get("beta2", 0.9), opt.get("ns_steps", 5))
        return new


def optimizer_step(w, grads, cfg):
    """Every parameter after one MuonAdamW step from fresh state at loop step optimizer.step."""
    return Optimizer(cfg).step(w, grads, cfg.get("optimizer", {}).get("step", 0))


# ----------------------------------------------------------------------------------------------
# The file protocol.

def read_inputs(directory):
    """(weights, config, inputs, targets), or UsageError naming what is wrong."""
    try:
        tensors = load_safetensors(os.path.join(directory, "input.safetensors"))
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"cannot read {directory}/input.safetensors and config.json: {e}")
    if cfg.get("recipe") != "2026":
        raise UsageError(f"config.json's recipe is {cfg.get('recipe')!r}; this twin is for \"2026\" "
                         "(tools/torch_golden.py is the classic one)")
    required = ("vocab_size", "n_layer", "n_embd", "n_head", "n_kv_head", "max_seq_len")
    missing = [k for k in required if k not in cfg]
    if missing:
        raise UsageError(f"config.json lacks {', '.join(missing)}")
    steps = cfg.get("optimizer", {}).get("steps", 1)
    if not isinstance(steps, int) or steps < 1:
        raise UsageError(f"config.json's optimizer.steps is {steps!r}; it counts training steps, 1 or more")
    C, H, Hkv = cfg["n_embd"], cfg["n_head"], cfg["n_kv_head"]
    if C < SMEAR_CHANNELS or C % H or (C // H) % 2 or H % Hkv:
        raise UsageError(f"n_embd {C}, n_head {H}, n_kv_head {Hkv}: the 2026 model needs n_embd >= "
                         f"{SMEAR_CHANNELS} in heads of an even size and n_kv_head dividing n_head")
    idx, targets = tensors.pop("inputs", None), tensors.pop("targets", None)
    if idx is None or targets is None or idx.shape != targets.shape or idx.dim() not in (2, 3):
        raise UsageError("input.safetensors needs `inputs` and `targets` of one shape [B, T] (one batch) "
                         "or [N, B, T] (N batches, one per training step)")
    V = cfg["vocab_size"]
    if idx.numel() and (idx.min() < 0 or idx.max() >= V or targets.min() < -1 or targets.max() >= V):
        raise UsageError(f"token ids must lie in [0, {V}) (targets may also be -1, ignored)")
    for n, shape in parameter_shapes(cfg).items():
        if n not in tensors or list(tensors[n].shape) != shape:
            got = list(tensors[n].shape) if n in tensors else "nothing"
            raise UsageError(f"input.safetensors has {got} for {n}, the 2026 model needs {shape}")
    return tensors, cfg, idx.long(), targets.long()


def gradients(w, cfg, idx, targets):
    """(logits [B, T, vocab], loss, {name: gradient}) at weights w, in f32."""
    params = {n: w[n].detach().float().clone().requires_grad_(True) for n in parameter_names(cfg)}
    logits = forward(params, cfg, idx)
    loss = loss_of(logits, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad for n, p in params.items()}


def as_batches(idx, targets):
    """idx, targets as [N, B, T]: one batch [B, T] becomes N = 1."""
    return (idx.unsqueeze(0), targets.unsqueeze(0)) if idx.dim() == 2 else (idx, targets)


def train(w, cfg, idx, targets, steps):
    """(loss before each step [steps], weights after them): steps training steps, step k on batch
    k mod N of idx, targets [N, B, T], the optimizer's state carried, at loop steps
    optimizer.step, +1, ..."""
    opt = Optimizer(cfg)
    first = cfg.get("optimizer", {}).get("step", 0)
    w = {n: w[n].detach().float() for n in parameter_names(cfg)}
    idx, targets = as_batches(idx, targets)
    losses = []
    for k in range(steps):
        batch = k % idx.shape[0]
        _, loss, grads = gradients(w, cfg, idx[batch], targets[batch])
        losses.append(loss)
        with torch.no_grad():
            w = opt.step(w, grads, first + k)
    return torch.stack(losses), w


def golden(w, cfg, idx, targets):
    """The tensors of golden.safetensors (see the file's docstring); idx, targets [B, T] or [N, B, T]."""
    first, first_targets = (t[0] for t in as_batches(idx, targets))
    logits, loss, grads = gradients(w, cfg, first, first_targets)
    out = {"logits": logits.reshape(-1, logits.size(-1)), "loss": loss.reshape(1)}
    out.update({"grad." + n: g for n, g in grads.items()})
    with torch.no_grad():
        stepped = optimizer_step({n: w[n].detach().float() for n in grads}, grads, cfg)
    out.update({"step." + n: stepped[n] for n in parameter_names(cfg)})
    steps = cfg.get("optimizer", {}).get("steps", 1)
    if steps > 1:
        losses, trained = train(w, cfg, idx, targets, steps)
        out["losses"] = losses
        out.update({"trained." + n: trained[n] for n in parameter_names(cfg)})
    return out


def pick_device(name):
    """The torch.device to compute on, or UsageError when this PyTorch cannot use it."""
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name}: {e}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: this PyTorch ({torch.__version__}) sees no CUDA device; "
                         "leave --device out to compute on the CPU")
    return device


def main(argv):
    args = argv[1:]
    device_name = "cpu"
    if len(args) == 3 and args[1] == "--device":
        device_name = args[2]
        args = args[:1]
    if len(args) != 1:
        print("usage: torch_recipe2026.py DIR [--device DEVICE] (DIR holds input.safetensors and config.json)",
              file=sys.stderr)
        return 2
    try:
        device = pick_device(device_name)
        w, cfg, idx, targets = read_inputs(args[0])
        w = {n: t.to(device) for n, t in w.items()}
        out = golden(w, cfg, idx.to(device), targets.to(device))
    except UsageError as e:
        print(f"torch_recipe2026: {e}", file=sys.stderr)
        return 2
    out = {n: t.cpu() for n, t in out.items()}
    save_safetensors(os.path.join(args[0], "golden.safetensors"), out)
    print(f"torch {torch.__version__} on {device}: loss {out['loss'].item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
