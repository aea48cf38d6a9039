// Shape and dtype checks shared by every backend, then dispatch on the device.
#include "ops/ops.h"

#include <fmt/format.h>

#include "nanoddp/build_config.h"
#include "ops/backend.h"
#include "ops/profile.h"

namespace nanoddp::ops {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

void same_device(const Tensor& a, const Tensor& b) {
  NANODDP_ASSERT(a.device() == b.device(), "tensors on {} and {}", a.device().str(), b.device().str());
}

void same_shape(const Tensor& a, const Tensor& b) {
  NANODDP_ASSERT(a.shape() == b.shape(), "shapes {} and {} differ", a.shape().str(), b.shape().str());
  same_device(a, b);
}

void is_f32(const Tensor& t, int64_t numel) {
  NANODDP_ASSERT(t.dtype() == DType::F32 && t.numel() == numel, "expected f32 with {} elements, got {} {}", numel,
                 dtype_name(t.dtype()), t.shape().str());
}

}  // namespace

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
#if NANODDP_HAVE_CUDA
  return cuda_backend(device.index);
#else
  NANODDP_FAIL("this build of nanoddp has no CUDA backend; rebuild with CUDA or use --device cpu");
#endif
}

void matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
            float beta) {
  NANODDP_ASSERT(a.ndim() == 2 && b.ndim() == 2 && out.ndim() == 2, "matmul needs 2-D tensors");
  int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  NANODDP_ASSERT(k == kb && out.dim(0) == m && out.dim(1) == n, "matmul {}{} x {}{} -> {}", a.shape().str(),
                 trans_a ? "^T" : "", b.shape().str(), trans_b ? "^T" : "", out.shape().str());
  NANODDP_ASSERT(a.dtype() == b.dtype() && is_float(a.dtype()) && is_float(out.dtype()));
  same_device(out, a);
  same_device(out, b);
  OpTimer timer("matmul", out.device(), 2.0 * m * n * k,
                profiling() ? fmt::format("{}x{}x{} {}{} {}->{}", m, n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N',
                                          dtype_name(a.dtype()), dtype_name(out.dtype()))
                            : std::string());
  backend(out.device()).matmul(out, a, trans_a, b, trans_b, alpha, beta);
}

// cuBLASLt's FP8 kernels take dimensions that are multiples of 16 (their leading dimensions and the
// 16-byte alignment of rows of codes); the CPU emulation is held to the same rule, so that what a test
// runs there would run on a GPU.
void matmul_fp8(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Fp8Gemm& how,
                float beta) {
  NANODDP_ASSERT(a.ndim() == 2 && b.ndim() == 2 && out.ndim() == 2, "matmul_fp8 needs 2-D tensors");
  const int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  NANODDP_ASSERT(k == kb && out.dim(0) == m && out.dim(1) == n, "matmul_fp8 {}{} x {}{} -> {}", a.shape().str(),
                 trans_a ? "^T" : "", b.shape().str(), trans_b ? "^T" : "", out.shape().str());
  NANODDP_ASSERT(m % 16 == 0 && n % 16 == 0 && k % 16 == 0, "matmul_fp8 of {}x{}x{}: FP8 GEMMs need multiples of 16",
                 m, n, k);
  NANODDP_ASSERT(is_float(a.dtype()) && is_float(b.dtype()) && is_float(out.dtype()));
  NANODDP_ASSERT(how.a == Fp8Format::E4M3 || how.b == Fp8Format::E4M3, "FP8 GEMMs take at most one e5m2 operand");
  same_device(out, a);
  same_device(out, b);
  OpTimer timer("matmul_fp8", out.device(), 2.0 * m * n * k,
                profiling() ? fmt::format("{}x{}x{} {}{} fp8->{}", m, n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N',
                                          dtype_name(out.dtype()))
                            : std::string());
  backend(out.device()).matmul_fp8(out, a, trans_a, b, trans_b, how, beta);
}

std::string fp8_unsupported(Device device) { return backend(device).fp8_unsupported(); }

void fill(const Tensor& x, float value) {
  OpTimer timer("fill", x.device());
  backend(x.device()).fill(x, value);
}

void scale(const Tensor& x, float s) {
  OpTimer timer("scale", x.device());
  backend(x.device()).scale(x, s);
}

void axpy(const Tensor& y, const Tensor& x, float alpha) {
  NANODDP_ASSERT(y.numel() == x.numel() && y.dtype() == x.dtype());
  same_device(y, x);
  OpTimer timer("axpy", y.device());
  backend(y.device()).axpy(y, x, alpha);
}

void cast(const Tensor& dst, const Tensor& src) {
  NANODDP_ASSERT(dst.numel() == src.numel() && is_float(dst.dtype()) && is_float(src.dtype()));
  same_device(dst, src);
  OpTimer timer("cast", dst.device());
  backend(dst.device()).cast(dst, src);
}

void embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) {
  NANODDP_ASSERT(table.ndim() == 2 && ids.dtype() == DType::I32 && out.numel() == ids.numel() * table.dim(1));
  same_device(out, table);
  same_device(out, ids);
  OpTimer timer("embedding_forward", out.device());
  backend(out.device()).embedding_forward(out, table, ids);
}

void embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  NANODDP_ASSERT(dtable.ndim() == 2 && ids.dtype() == DType::I32 && dout.numel() == ids.numel() * dtable.dim(1));
  same_device(dtable, dout);
  same_device(dtable, ids);
  OpTimer timer("embedding_backward", dtable.device());
  backend(dtable.device()).embedding_backward(dtable, dout, ids);
}

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) {
  same_shape(y, x);
  is_f32(rstd, x.numel() / x.dim(-1));
  OpTimer timer("rmsnorm_forward", x.device());
  backend(x.device()).rmsnorm_forward(y, rstd, x, eps);
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, bool accumulate) {
  same_shape(dx, dy);
  same_shape(dy, y);
  is_f32(rstd, y.numel() / y.dim(-1));
  OpTimer timer("rmsnorm_backward", dx.device());
  backend(dx.device()).rmsnorm_backward(dx, dy, y, rstd, accumulate);
}

void rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0, bool inverse) {
  same_shape(y, x);
  NANODDP_ASSERT(x.ndim() == 4 && x.dim(3) % 2 == 0, "rotary needs [B, T, H, D] with even D, got {}",
                 x.shape().str());
  NANODDP_ASSERT(cos.ndim() == 2 && cos.dim(1) == x.dim(3) / 2 && cos.shape() == sin.shape());
  NANODDP_ASSERT(pos0 >= 0 && pos0 + x.dim(1) <= cos.dim(0), "positions {}..{} beyond the {}-row rotary table",
                 pos0, pos0 + x.dim(1), cos.dim(0));
  OpTimer timer("rotary", x.device());
  backend(x.device()).rotary(y, x, cos, sin, pos0, inverse);
}

// Note [attention window]: nanochat's sliding window is FlashAttention's window_size = (left, 0): the query at
// position p sees keys p - left ..= p, left + 1 of them counting itself (its SDPA fallback keeps `left` keys
// before a decoded token, and the mask row - col <= left; nanochat/gpt.py and flash_attention.py at
// karpathy/nanochat 92d63d4). Its short window, ceil(T / 4 / 128) * 128 (512 at T = 2048, 256 at 1024; the
// code's comment there says 768, its arithmetic gives 512), is such a `left`, so the 2026 model passes
// nanochat's numbers unchanged, and its long window T means full context. Here window <= 0 is full causal
// attention (there is no "itself only", which nanochat never uses), and a window that reaches key 0 from the
// last position, window >= kv_len - 1, is turned into 0 before a backend sees it: the backends' full causal
// path runs it, bit for bit what it gave before windows existed, and cuDNN still takes it.
namespace {
int64_t effective_window(int64_t window, int64_t kv_len) { return window > 0 && window < kv_len - 1 ? window : 0; }
}  // namespace

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       int64_t kv_len, float scale, int64_t window) {
  NANODDP_ASSERT(q.ndim() == 4 && k.ndim() == 4 && k.shape() == v.shape(), "attention shapes q {} k {} v {}",
                 q.shape().str(), k.shape().str(), v.shape().str());
  same_shape(out, q);
  NANODDP_ASSERT(q.dim(0) == k.dim(0) && q.dim(3) == k.dim(3) && q.dim(2) % k.dim(2) == 0);
  NANODDP_ASSERT(kv_len >= q.dim(1) && kv_len <= k.dim(1), "kv_len {} with {} queries and {} cached positions",
                 kv_len, q.dim(1), k.dim(1));
  is_f32(lse, q.dim(0) * q.dim(2) * q.dim(1));
  OpTimer timer("attention_forward", q.device());
  backend(q.device()).attention_forward(out, lse, q, k, v, kv_len, scale, effective_window(window, kv_len));
}

void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, float scale,
                        int64_t window) {
  same_shape(dq, q);
  same_shape(dk, k);
  same_shape(dv, v);
  same_shape(dout, q);
  same_shape(out, q);
  NANODDP_ASSERT(q.ndim() == 4 && k.ndim() == 4 && k.shape() == v.shape(), "attention shapes q {} k {} v {}",
                 q.shape().str(), k.shape().str(), v.shape().str());
  NANODDP_ASSERT(q.dim(0) == k.dim(0) && q.dim(3) == k.dim(3) && q.dim(2) % k.dim(2) == 0);
  NANODDP_ASSERT(q.dim(1) == k.dim(1), "attention_backward is for training (Tq == Tk)");
  is_f32(lse, q.dim(0) * q.dim(2) * q.dim(1));
  OpTimer timer("attention_backward", q.device());
  backend(q.device()).attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale,
                                         effective_window(window, q.dim(1)));
}

void relu2_forward(const Tensor& y, const Tensor& x) {
  same_shape(y, x);
  OpTimer timer("relu2_forward", x.device());
  backend(x.device()).relu2_forward(y, x);
}

void relu2_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  same_shape(dx, dy);
  same_shape(dy, x);
  OpTimer timer("relu2_backward", x.device());
  backend(x.device()).relu2_backward(dx, dy, x);
}

void softcap_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                           float softcap, float grad_scale) {
  NANODDP_ASSERT(logits.ndim() == 2 && vocab > 0 && vocab <= logits.dim(1) && softcap > 0);
  NANODDP_ASSERT(targets.dtype() == DType::I32 && targets.numel() == logits.dim(0));
  is_f32(losses, logits.dim(0));
  same_device(logits, targets);
  same_device(logits, losses);
  OpTimer timer("softcap_cross_entropy", logits.device());
  backend(logits.device()).softcap_cross_entropy(losses, logits, targets, vocab, softcap, grad_scale);
}

void sample_tokens(const Tensor& ids, const Tensor& logits, const Tensor& uniforms, int64_t vocab, float softcap,
                   float temperature, int64_t top_k) {
  NANODDP_ASSERT(logits.ndim() == 2 && vocab > 0 && vocab <= logits.dim(1) && vocab <= INT32_MAX);
  NANODDP_ASSERT(ids.dtype() == DType::I32 && ids.numel() == logits.dim(0));
  is_f32(uniforms, logits.dim(0));
  same_device(logits, ids);
  same_device(logits, uniforms);
  OpTimer timer("sample_tokens", logits.device());
  backend(logits.device()).sample_tokens(ids, logits, uniforms, vocab, softcap, temperature, top_k);
}

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& s) {
  is_f32(p, p.numel());
  is_f32(g, p.numel());
  is_f32(m, p.numel());
  is_f32(v, p.numel());
  NANODDP_ASSERT(s.step >= 1);
  OpTimer timer("adamw_update", p.device());
  backend(p.device()).adamw_update(p, g, m, v, s);
}

void sum_squares(const Tensor& out, const Tensor& x) {
  is_f32(x, x.numel());
  is_f32(out, 1);
  NANODDP_ASSERT(out.device() == x.device(), "sum_squares: out and x on different devices");
  OpTimer timer("sum_squares", x.device());
  backend(x.device()).sum_squares(out, x);
}

void muon_momentum(const Tensor& g, const Tensor& buf, float momentum) {
  is_f32(g, g.numel());
  is_f32(buf, g.numel());
  OpTimer timer("muon_momentum", g.device());
  backend(g.device()).muon_momentum(g, buf, momentum);
}

void newton_schulz(const std::vector<Tensor>& xs, int steps, bool bf16) {
  NANODDP_ASSERT(steps >= 0);
  if (xs.empty()) return;
  for (const Tensor& x : xs) {
    NANODDP_ASSERT(x.ndim() == 2 && x.dtype() == DType::F32, "newton_schulz takes f32 matrices");
    same_shape(x, xs[0]);
  }
  OpTimer timer("newton_schulz", xs[0].device());
  backend(xs[0].device()).newton_schulz(xs, steps, bf16);
}

void polar_express(const std::vector<Tensor>& xs, int steps, bool bf16) {
  NANODDP_ASSERT(steps >= 0 && steps <= kPolarExpressSteps, "polar_express has {} coefficient triples, asked for {}",
                 kPolarExpressSteps, steps);
  if (xs.empty()) return;
  for (const Tensor& x : xs) {
    NANODDP_ASSERT(x.ndim() == 2 && x.dtype() == DType::F32, "polar_express takes f32 matrices");
    same_shape(x, xs[0]);
  }
  OpTimer timer("polar_express", xs[0].device());
  backend(xs[0].device()).polar_express(xs, steps, bf16);
}

void scale_rows(const Tensor& x, const Tensor& s) {
  NANODDP_ASSERT(x.ndim() == 2 && x.dtype() == DType::F32, "scale_rows takes an f32 matrix");
  is_f32(s, x.dim(0));
  same_device(x, s);
  OpTimer timer("scale_rows", x.device());
  backend(x.device()).scale_rows(x, s);
}

void normuon_update(const Tensor& p, const Tensor& g, const Tensor& v, float lr, float weight_decay, float beta2) {
  NANODDP_ASSERT(p.ndim() == 2 && p.dtype() == DType::F32 && g.dtype() == DType::F32 && v.dtype() == DType::F32,
                 "normuon_update takes f32 matrices p, g and an f32 second moment v");
  same_shape(p, g);
  const int64_t rows = p.dim(0), cols = p.dim(1);
  NANODDP_ASSERT(v.numel() == (rows >= cols ? rows : cols), "normuon_update: v has {} elements for a {} x {} matrix",
                 v.numel(), rows, cols);
  same_device(p, v);
  OpTimer timer("normuon_update", p.device());
  backend(p.device()).normuon_update(p, g, v, lr, weight_decay, beta2);
}

// Note [2026 gates]: nanochat's 2026 model mixes tensors through learned gates and scalars (value
// embeddings into the values, the previous token into the embedding, the first layer's input and
// the mid-depth residual into the stream). Each is one op here rather than a chain of slices,
// sigmoids and broadcasts: the gates read the first K channels of a row, which no contiguous view
// can express, and their weight and scalar gradients are reductions over every token that must come
// out the same on every run (each is summed in a fixed order, f32 on CUDA, double on the CPU).
namespace {

void act_like(const Tensor& a, const Tensor& b) {
  NANODDP_ASSERT(a.dtype() == b.dtype() && is_float(a.dtype()), "{} and {} tensors where one act dtype is needed",
                 dtype_name(a.dtype()), dtype_name(b.dtype()));
  same_device(a, b);
}

void check_value_gate(const Tensor& v, const Tensor& gate, const Tensor& x, const Tensor& w, const Tensor& ve) {
  NANODDP_ASSERT(x.ndim() == 2 && w.ndim() == 2 && w.dim(1) <= x.dim(1), "value gate: x {} and w {}",
                 x.shape().str(), w.shape().str());
  const int64_t n = x.dim(0), groups = w.dim(0);
  NANODDP_ASSERT(v.numel() % (n * groups) == 0 && v.numel() == ve.numel(), "value gate: v {} and ve {} for {} x {}",
                 v.shape().str(), ve.shape().str(), n, groups);
  is_f32(gate, n * groups);
  act_like(v, x);
  act_like(v, ve);
  act_like(v, w);
  same_device(v, gate);
}

void check_smear(const Tensor& x, const Tensor& gate, const Tensor& w, const Tensor& lambda, int64_t seq) {
  NANODDP_ASSERT(x.ndim() == 2 && seq >= 1 && x.dim(0) % seq == 0, "smear: x {} in rows of {}", x.shape().str(), seq);
  NANODDP_ASSERT(w.numel() <= x.dim(1), "smear: gate of {} channels over {}", w.numel(), x.dim(1));
  is_f32(gate, x.dim(0));
  is_f32(lambda, 1);
  act_like(x, w);
  same_device(x, gate);
  same_device(x, lambda);
}

}  // namespace

void value_gate_forward(const Tensor& v, const Tensor& gate, const Tensor& x, const Tensor& w, const Tensor& ve) {
  check_value_gate(v, gate, x, w, ve);
  OpTimer timer("value_gate_forward", v.device());
  backend(v.device()).value_gate_forward(v, gate, x, w, ve);
}

void value_gate_backward(const Tensor& dx, const Tensor& dw, const Tensor& dve, const Tensor& dv, const Tensor& x,
                         const Tensor& w, const Tensor& ve, const Tensor& gate) {
  check_value_gate(dv, gate, x, w, ve);
  same_shape(dx, x);
  act_like(dx, x);
  NANODDP_ASSERT(dve.numel() == ve.numel(), "value gate: dve {} for ve {}", dve.shape().str(), ve.shape().str());
  act_like(dve, ve);
  is_f32(dw, w.numel());
  same_device(dw, x);
  OpTimer timer("value_gate_backward", x.device());
  backend(x.device()).value_gate_backward(dx, dw, dve, dv, x, w, ve, gate);
}

void smear_forward(const Tensor& y, const Tensor& gate, const Tensor& x, const Tensor& prev, const Tensor& w,
                   const Tensor& lambda, int64_t seq) {
  check_smear(x, gate, w, lambda, seq);
  same_shape(y, x);
  act_like(y, x);
  NANODDP_ASSERT(y.raw() != x.raw(), "smear_forward: y must not alias x");
  if (prev.defined()) {
    NANODDP_ASSERT(prev.numel() == x.dim(0) / seq * x.dim(1), "smear: prev {} for x {}", prev.shape().str(),
                   x.shape().str());
    act_like(prev, x);
  }
  OpTimer timer("smear_forward", x.device());
  backend(x.device()).smear_forward(y, gate, x, prev, w, lambda, seq);
}

void smear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlambda, const Tensor& dgate, const Tensor& dy,
                    const Tensor& x, const Tensor& w, const Tensor& lambda, const Tensor& gate, int64_t seq) {
  check_smear(x, gate, w, lambda, seq);
  same_shape(dx, x);
  same_shape(dy, x);
  act_like(dx, x);
  act_like(dy, x);
  NANODDP_ASSERT(dx.raw() != dy.raw(), "smear_backward: dx must not alias dy");
  is_f32(dw, w.numel());
  is_f32(dlambda, 1);
  is_f32(dgate, x.dim(0));
  same_device(dw, x);
  same_device(dlambda, x);
  same_device(dgate, x);
  OpTimer timer("smear_backward", x.device());
  backend(x.device()).smear_backward(dx, dw, dlambda, dgate, dy, x, w, lambda, gate, seq);
}

void scalar_mix_forward(const Tensor& y, const Tensor& x, const Tensor& a, const Tensor& b, float s) {
  same_shape(y, x);
  act_like(y, x);
  if (a.defined()) is_f32(a, 1);
  is_f32(b, 1);
  OpTimer timer("scalar_mix_forward", y.device());
  backend(y.device()).scalar_mix_forward(y, x, a, b, s);
}

void scalar_mix_backward(const Tensor& dy, const Tensor& dx, const Tensor& da, const Tensor& db, const Tensor& y_in,
                         const Tensor& x, const Tensor& a, const Tensor& b, float s) {
  for (const Tensor* t : {&dx, &y_in, &x}) {
    same_shape(dy, *t);
    act_like(dy, *t);
  }
  if (a.defined()) {
    is_f32(a, 1);
    is_f32(da, 1);
  }
  is_f32(b, 1);
  is_f32(db, 1);
  OpTimer timer("scalar_mix_backward", dy.device());
  backend(dy.device()).scalar_mix_backward(dy, dx, da, db, y_in, x, a, b, s);
}

}  // namespace nanoddp::ops
