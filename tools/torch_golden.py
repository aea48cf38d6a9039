#!/usr/bin/python3
"""PyTorch golden for nanoddp's GPT (Debian python3-torch, CPU, fp32).

Reads DIR/input.safetensors (weights under nanochat's state-dict names, plus `inputs` and
`targets` int32 [B, T]) and DIR/config.json (model config and optimizer settings) written by the
C++ test, and writes DIR/golden.safetensors with the results below. With --weights FILE the
weights and the model config come from FILE instead, a file written by `nanoddp export`: the
check that an export loads into a PyTorch model under nanochat's names.
  logits        soft-capped logits of every position [B*T, vocab]
  loss          mean cross-entropy over targets != -1 [1]
  grad.<name>   the gradient of every parameter
  ns16.<name>   Newton-Schulz of each block matrix's gradient in bf16 (nanochat) and
  ns32.<name>   in f32, so that the kernel can be compared on exactly the same input
  step.<name>   every parameter after one optimizer step from those gradients: torch.optim.AdamW
                for wte and lm_head, Muon (Nesterov momentum, Newton-Schulz in the precision the
                config names) for the block matrices, with nanochat's hyper-parameters.

This is an independent implementation of nanochat's architecture in PyTorch (shared/ANCHORS.md
§1), not nanoddp's code path: it uses autograd for the gradients and PyTorch's own AdamW.
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I32": torch.int32, "BF16": torch.bfloat16, "I64": torch.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + lo:base + hi]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().to(torch.float32)
        raw = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def rms_norm(x):
    # F.rms_norm (PyTorch >= 2.4) with its default eps: the dtype's machine epsilon.
    eps = torch.finfo(x.dtype).eps
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rotary_tables(seq, head_dim, base):
    channels = torch.arange(0, head_dim, 2, dtype=torch.float32)
    inv_freq = 1.0 / (base ** (channels / head_dim))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    return freqs.cos().bfloat16(), freqs.sin().bfloat16()


def rotate(x, cos, sin):
    # x [B, T, H, D]; half-split pairs (x1[i], x2[i]); cos, sin [T, D/2] in bf16 (promoted to fp32).
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c + x2 * s, x1 * (-s) + x2 * c], dim=-1)


def forward(w, cfg, idx):
    B, T = idx.shape
    C, H, Hkv = cfg["n_embd"], cfg["n_head"], cfg["n_kv_head"]
    D = C // H
    cos, sin = rotary_tables(T, D, cfg["rope_base"])
    x = rms_norm(F.embedding(idx.long(), w["transformer.wte.weight"]))
    for l in range(cfg["n_layer"]):
        h = f"transformer.h.{l}."
        xn = rms_norm(x)
        q = (xn @ w[h + "attn.c_q.weight"].T).view(B, T, H, D)
        k = (xn @ w[h + "attn.c_k.weight"].T).view(B, T, Hkv, D)
        v = (xn @ w[h + "attn.c_v.weight"].T).view(B, T, Hkv, D)
        q, k = rms_norm(rotate(q, cos, sin)), rms_norm(rotate(k, cos, sin))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        att = att.transpose(1, 2).reshape(B, T, C)
        x = x + att @ w[h + "attn.c_proj.weight"].T
        hidden = F.relu(rms_norm(x) @ w[h + "mlp.c_fc.weight"].T).square()
        x = x + hidden @ w[h + "mlp.c_proj.weight"].T
    logits = rms_norm(x) @ w["lm_head.weight"].T
    logits = logits[..., :cfg["vocab_size"]].float()
    cap = cfg["softcap"]
    return cap * torch.tanh(logits / cap)


def scalar_times(s, x):
    # s * x for a bf16 tensor x as PyTorch evaluates it on CUDA, where nanochat runs: in fp32
    # ("opmath") with the Python scalar unrounded, then one rounding to bf16. PyTorch 1.13's CPU
    # kernels round the scalar to bf16 first (2.0315 -> 2.03125), which Newton-Schulz amplifies
    # into per-element differences of tens of percent, so the CUDA semantics are spelled out here.
    return (s * x.float()).bfloat16()


def newton_schulz(G, steps, bf16=True):
    # nanochat's zeropower_via_newtonschulz5 on bf16 tensors (or in f32); b * A + c * A @ A is
    # evaluated in Python's order, (b * A) + ((c * A) @ A). bf16 matmuls accumulate in fp32 and
    # round once.
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16() if bf16 else G.float()
    mul = scalar_times if bf16 else (lambda s, x: s * x)
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = mul(b, A) + mul(c, A) @ A
        X = mul(a, X) + B @ X
    return X.mT if transposed else X


def optimizer_step(w, grads, cfg):
    opt = cfg["optimizer"]
    s = (cfg["n_embd"] / 768) ** -0.5
    new = {n: p.detach().clone() for n, p in w.items()}
    adam_groups = [
        {"params": [new["transformer.wte.weight"]], "lr": opt["embedding_lr"] * s},
        {"params": [new["lm_head.weight"]], "lr": opt["unembedding_lr"] * s},
    ]
    new["transformer.wte.weight"].grad = grads["transformer.wte.weight"].clone()
    new["lm_head.weight"].grad = grads["lm_head.weight"].clone()
    adam = torch.optim.AdamW(adam_groups, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0)
    adam.step()
    momentum = opt["momentum"]
    for name, p in new.items():
        if name in ("transformer.wte.weight", "lm_head.weight"):
            continue
        g = grads[name].clone()
        buf = torch.zeros_like(g)
        buf.lerp_(g, 1 - momentum)
        g = g.lerp_(buf, momentum)
        X = newton_schulz(g, opt["ns_steps"], opt["ns_bf16"])
        scale = max(1.0, p.size(-2) / p.size(-1)) ** 0.5
        p.add_(X.float(), alpha=-opt["matrix_lr"] * scale)
    return new


def read_metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def main(directory, weights_file=None):
    torch.manual_seed(0)
    inp = load_safetensors(f"{directory}/input.safetensors")
    with open(f"{directory}/config.json") as f:
        cfg = json.load(f)
    idx, targets = inp.pop("inputs"), inp.pop("targets")
    if weights_file:
        inp = load_safetensors(weights_file)
        cfg.update(json.loads(read_metadata(weights_file)["nanoddp.model_config"]))
    w = {n: t.requires_grad_(True) for n, t in inp.items()}
    logits = forward(w, cfg, idx)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1).long(), ignore_index=-1)
    loss.backward()
    grads = {n: p.grad for n, p in w.items()}
    out = {"logits": logits.view(-1, logits.size(-1)), "loss": loss.reshape(1)}
    out.update({"grad." + n: g for n, g in grads.items()})
    for n, g in grads.items():
        if ".h." in n:
            out["ns16." + n] = newton_schulz(g, cfg["optimizer"]["ns_steps"], True)
            out["ns32." + n] = newton_schulz(g, cfg["optimizer"]["ns_steps"], False)
    stepped = optimizer_step({n: p.detach() for n, p in w.items()}, grads, cfg)
    out.update({"step." + n: p for n, p in stepped.items()})
    save_safetensors(f"{directory}/golden.safetensors", out)
    print(f"torch {torch.__version__}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--weights" else None)
