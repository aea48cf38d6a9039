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

}  // namespace nanoddp::ops
