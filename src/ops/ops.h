// The ops interface: every kernel the model and the optimizers need, as free functions that
// dispatch on the device of their tensors to a Backend (ops/backend.h). The model never includes
// a CUDA or BLAS header; the CPU backend always exists, the CUDA backend when the build has CUDA.
//
// Conventions:
//  - Tensors are contiguous and row-major; shapes are given as [dims] in each comment.
//  - "act" dtype: f32 or bf16 (mixed precision) on either backend, computed in f32 and rounded where
//    the result is stored. Statistics that
//    backward needs (rstd, lse), losses and all optimizer tensors are always f32.
//  - Outputs are overwritten unless a parameter says `accumulate` or `beta`.
//  - Shapes and dtypes are checked here, once for every backend (a mismatch is a bug: it aborts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace nanoddp::ops {

// Polar Express's coefficients (a, b, c) per iteration, nanochat's list (Amsel et al. 2025, computed
// for 5 iterations, safety factor 2e-2, cushion 2); polar_express uses the first `steps`.
inline constexpr int kPolarExpressSteps = 5;
inline constexpr float kPolarExpressCoeffs[kPolarExpressSteps][3] = {
    {8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
    {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
    {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
    {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
    {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f},
};

// Optimizer step hyper-parameters of adamw_update (defaults: nanochat's AdamW for embeddings).
struct AdamWStep {
  float lr = 0, beta1 = 0.8f, beta2 = 0.95f, eps = 1e-10f, weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
};

// matmul_fp8's operands: the fp8 format each is quantized to (nanochat: e4m3 for inputs and weights, e5m2
// for gradients), and CUDA's fast accumulation (nanochat's forward GEMM uses it, its backward ones do not).
enum class Fp8Format { E4M3, E5M2 };
struct Fp8Gemm {
  Fp8Format a = Fp8Format::E4M3, b = Fp8Format::E4M3;
  bool fast_accum = false;
};

// Every op, declared once, as X(name, (parameters)). This list declares the free functions below,
// the Backend interface (ops/backend.h) and each backend's overrides (NANODDP_OP_OVERRIDE); the
// free functions, defined in ops.cpp, check shapes and dtypes and dispatch. Adding an op means one
// entry here, its checks in ops.cpp and its kernel in each backend: the compiler names any backend
// that lacks it.
#define NANODDP_OPS(X)                                                                                         \
  /* ---- GEMM: out[M, N] = alpha * op(a) @ op(b) + beta * out, op(x) = x or x^T; 2-D tensors. A Linear     \
     layer y = x W^T is matmul(y, x, false, W, true); its weight gradient accumulated over micro-steps is    \
     matmul(dW, dy, true, x, false, 1, 1). */                                                                 \
  X(matmul, (const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,    \
             float beta))                                                                                     \
  /* ---- FP8 GEMM with tensorwise scaling (Note [fp8 tensorwise scaling] in ops/fp8_math.h): op(a) and      \
     op(b) are each quantized whole, with one scale from their amax, to how.a and how.b; out[M, N] = (the     \
     product of the codes' values) / (scale_a scale_b) + beta * out. a and b any float dtype; M, N, K          \
     multiples of 16. CUDA runs it on cuBLASLt's FP8 kernels (fp8_unsupported says where it cannot); the CPU \
     emulates it exactly up to the f32 sum's order, for tests. */                                             \
  X(matmul_fp8, (const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,               \
                 const Fp8Gemm& how, float beta))                                                             \
  /* ---- elementwise: x = value; x *= s; y += alpha * x; f32 <-> bf16 rounding to nearest even */           \
  X(fill, (const Tensor& x, float value))                                                                     \
  X(scale, (const Tensor& x, float s))                                                                        \
  X(axpy, (const Tensor& y, const Tensor& x, float alpha))                                                    \
  X(cast, (const Tensor& dst, const Tensor& src))                                                             \
  /* ---- out[0] = sum(x^2) for f32 x, out an f32 [1] tensor on x's device (gradient-norm clipping).       \
     Summed in a fixed order (deterministic), in double on the CPU, by blocks of f32 then double on CUDA. */   \
  X(sum_squares, (const Tensor& out, const Tensor& x))                                                        \
  /* ---- embedding: out[N, C] = table[ids[n], :], ids i32 [N], table [V, C]; backward: dtable[V, C] +=      \
     scatter of dout[N, C] by ids, deterministic (the same sum order every run). */                          \
  X(embedding_forward, (const Tensor& out, const Tensor& table, const Tensor& ids))                          \
  X(embedding_backward, (const Tensor& dtable, const Tensor& dout, const Tensor& ids))                       \
  /* ---- RMSNorm without weight, over the last dim C of x viewed as [R, C]: y = x * rstd, rstd f32 [R] =   \
     1 / sqrt(mean(x^2) + eps). Backward: dx = rstd * (dy - y * mean(dy * y)), or dx += that with           \
     `accumulate`. */                                                                                         \
  X(rmsnorm_forward, (const Tensor& y, const Tensor& rstd, const Tensor& x, float eps))                       \
  X(rmsnorm_backward, (const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, bool accumulate)) \
  /* ---- rotary embedding (half-split): x, y [B, T, H, D]; cos, sin f32 [T_table, D/2]. For position      \
     p = pos0 + t, x1 = x[..., :D/2], x2 = x[..., D/2:]: y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos.      \
     `inverse` applies the transposed rotation, which is the backward. y may alias x. */                     \
  X(rotary, (const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0, bool inverse)) \
  /* ---- causal attention: q [B, Tq, Hq, D]; k, v [B, Tcap, Hkv, D] of which the first kv_len positions      \
     are used; out [B, Tq, Hq, D]; lse f32 [B, Hq, Tq] (log-sum-exp of each row of scaled scores). Query t    \
     sits at position p = kv_len - Tq + t and sees keys 0 ..= p, or with a sliding window w > 0 only the      \
     keys max(0, p - w) ..= p: itself and the w before it, as FlashAttention's window_size = (w, 0) that      \
     nanochat passes (Note [attention window] in ops.cpp). w <= 0, or w >= kv_len - 1, is full causal         \
     attention. Query head h reads kv head h / (Hq / Hkv) (grouped-query attention). The backward is the      \
     training form (Tq == Tcap == kv_len) with the forward's window; dq, dk, dv are overwritten. */           \
  X(attention_forward, (const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, \
                        int64_t kv_len, float scale, int64_t window))                                         \
  X(attention_backward, (const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,             \
                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, \
                         float scale, int64_t window))                                                        \
  /* ---- relu^2: y = max(x, 0)^2; dx = dy * 2 max(x, 0) */                                                   \
  X(relu2_forward, (const Tensor& y, const Tensor& x))                                                        \
  X(relu2_backward, (const Tensor& dx, const Tensor& dy, const Tensor& x))                                    \
  /* ---- soft-capped cross-entropy fused with its backward: logits [N, Vpad] (act dtype), only the first   \
     `vocab` columns enter the softmax. z = cap * tanh(logits / cap); losses f32 [N] = logsumexp(z) -       \
     z[target] (0 where target == -1). When grad_scale != 0, logits are overwritten by                      \
     d(grad_scale * sum(losses)) / d(logits), 0 in padding columns and ignored rows: one pass per row       \
     computes both, so probabilities are never stored. */                                                     \
  X(softcap_cross_entropy, (const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,   \
                            float softcap, float grad_scale))                                                 \
  /* ---- AdamW on f32 p, g, m, v of one numel: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;                 \
     p = p (1 - lr wd) - lr * mhat / (sqrt(vhat) + eps), mhat = m / (1-b1^step), vhat = v / (1-b2^step). */  \
  X(adamw_update, (const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& s))   \
  /* ---- Muon's Nesterov momentum, in place: buf = lerp(buf, g, 1 - momentum); g = lerp(g, buf, momentum),  \
     with torch.lerp's rounding (a + w (b - a) for w < 0.5, else b - (b - a)(1 - w)). */                     \
  X(muon_momentum, (const Tensor& g, const Tensor& buf, float momentum))                                      \
  /* ---- Newton-Schulz orthogonalisation of each x [rows, cols] of xs (f32 storage, in place; every x of   \
     one shape, on one device; each on its own): transpose if rows > cols, x /= (||x||_F + 1e-7), `steps`    \
     times A = x x^T, B = b A + c A A, x = a x + B x with (a, b, c) = (3.4445, -4.7750, 2.0315), transpose   \
     back. With bf16, every op's result is rounded to bf16 as nanochat's bf16 tensors are (GEMMs accumulate \
     in f32 and round once; scalars stay f32 as in PyTorch's CUDA kernels); otherwise all arithmetic is     \
     f32. Passing the matrices of a shape together lets a backend batch them (CUDA: each stage one launch  \
     for many matrices; nanochat's mid-2026 Muon stacks its matrices by shape for the same reason). */      \
  X(newton_schulz, (const std::vector<Tensor>& xs, int steps, bool bf16))                                    \
  /* ---- sampling, one id per row: logits [R, Vpad] (act dtype) of which the first `vocab` columns count,  \
     soft-capped by `softcap` (<= 0: not capped); ids i32 [R] and uniforms f32 [R] (each row's draw in      \
     [0, 1), unread at temperature <= 0) on the logits' device. temperature <= 0: the largest (lowest id    \
     among equals); else a draw from softmax(z / temperature) over the top_k largest (0: all). The draw's   \
     order and arithmetic are fixed (Note [sampling on the device], ops/sample_math.h): every backend picks \
     the same ids from the same inputs. */                                                                    \
  X(sample_tokens, (const Tensor& ids, const Tensor& logits, const Tensor& uniforms, int64_t vocab, float softcap, \
                    float temperature, int64_t top_k))                                                        \
  /* ---- Polar Express orthogonalisation (nanochat's 2026 Muon) of each x [rows, cols] of xs, f32 storage,  \
     in place, as newton_schulz batches them: x /= (||x||_F * 1.01 + 1e-6), then for step s < `steps` (at     \
     most 5) with (a, b, c) = kPolarExpressCoeffs[s]: wide (rows <= cols) A = x x^T, B = b A + c (A A),       \
     x = a x + B x; tall A = x^T x, x = a x + x B. bf16 rounds every op's result as newton_schulz does. */   \
  X(polar_express, (const std::vector<Tensor>& xs, int steps, bool bf16))                                   \
  /* ---- x[i, :] *= s[i] for f32 x [rows, cols] and s [rows] on x's device (the 2026 Muon's row        \
     equilibration, whose per-row factors the optimizer computes). */                                        \
  X(scale_rows, (const Tensor& x, const Tensor& s))                                                          \
  /* ---- NorMuon's variance reduction and cautious weight decay on f32 p, g [rows, cols] (g: the           \
     orthogonalised update, read only) and v f32, the second moment per row [rows] when rows >= cols, else  \
     per column [cols]. With u = mean of g^2 along the other dim: v = lerp(v, u, 1 - beta2); g' = g *        \
     rsqrt(max(v, 1e-10)) rescaled so that ||g'||_F = ||g||_F; then p -= lr g' + lr wd p [g' p >= 0]. */      \
  X(normuon_update, (const Tensor& p, const Tensor& g, const Tensor& v, float lr, float weight_decay, float beta2)) \
  /* ---- nanochat 2026's gates (act tensors unless said; sums in f32, in a fixed order; see Note [2026      \
     gates] in ops.cpp). value gate: x [N, C], w [G, K] with K <= C, ve and v [N, G * D]; gate f32 [N, G]     \
     = 3 sigmoid(x[:, :K] w^T); v += gate * ve per group of D. Backward: dve = gate * dv; dz = sum_D(dv ve)  \
     gate (1 - gate / 3), written over gate; dw f32 [G, K] = dz^T x[:, :K] (overwritten);                    \
     dx[:, :K] += dz w. */                                                                                   \
  X(value_gate_forward, (const Tensor& v, const Tensor& gate, const Tensor& x, const Tensor& w, const Tensor& ve)) \
  X(value_gate_backward, (const Tensor& dx, const Tensor& dw, const Tensor& dve, const Tensor& dv,             \
                          const Tensor& x, const Tensor& w, const Tensor& ve, const Tensor& gate))            \
  /* ---- smear: x, y [B * seq, C] (rows of `seq` positions), w [1, K], lambda f32 [1]; gate f32 [N] =       \
     sigmoid(x[n, :K] . w); y[n] = x[n] + lambda gate[n] x[n - 1]; at position 0 of a row x[n - 1] is       \
     prev [B, C] when prev is defined (decoding after a cached token), else y[n] = x[n]. y must not alias  \
     x. Backward (no prev): dgate f32 [N] scratch; dx = dy + lambda gate[n + 1] dy[n + 1] + dz[n] w,         \
     dz[n] = lambda gate (1 - gate) (dy[n] . x[n - 1]); dw f32 [1, K] and dlambda f32 [1] overwritten. */      \
  X(smear_forward, (const Tensor& y, const Tensor& gate, const Tensor& x, const Tensor& prev, const Tensor& w,   \
                    const Tensor& lambda, int64_t seq))                                                        \
  X(smear_backward, (const Tensor& dx, const Tensor& dw, const Tensor& dlambda, const Tensor& dgate,            \
                     const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& lambda, const Tensor& gate, \
                     int64_t seq))                                                                             \
  /* ---- scalar mix: y = a y + s b x over y, x of one shape; a, b f32 [1] on the device (parameters: read   \
     there), a undefined means 1. Backward, from dy and the forward's input y_in: da = sum(dy y_in) (when a  \
     is defined), db = s sum(dy x), both f32 [1] overwritten; dx += s b dy; then dy *= a. */                 \
  X(scalar_mix_forward, (const Tensor& y, const Tensor& x, const Tensor& a, const Tensor& b, float s))           \
  X(scalar_mix_backward, (const Tensor& dy, const Tensor& dx, const Tensor& da, const Tensor& db,              \
                          const Tensor& y_in, const Tensor& x, const Tensor& a, const Tensor& b, float s))

#define NANODDP_OP_DECLARE(name, params) void name params;
NANODDP_OPS(NANODDP_OP_DECLARE)
#undef NANODDP_OP_DECLARE

// The common GEMM: out = op(a) @ op(b), overwriting out.
inline void matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b) {
  matmul(out, a, trans_a, b, trans_b, 1.f, 0.f);
}

// Empty when matmul_fp8 runs on the device's FP8 hardware, else why not and what to do, in words.
std::string fp8_unsupported(Device device);

// Newton-Schulz of one matrix.
inline void newton_schulz(const Tensor& x, int steps, bool bf16) { newton_schulz(std::vector<Tensor>{x}, steps, bf16); }
// Polar Express of one matrix.
inline void polar_express(const Tensor& x, int steps, bool bf16) { polar_express(std::vector<Tensor>{x}, steps, bf16); }

}  // namespace nanoddp::ops
