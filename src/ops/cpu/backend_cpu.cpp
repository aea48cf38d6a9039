// The CPU backend: forwards each op to its kernel in ops/cpu.
#include <omp.h>

#include "ops/backend.h"
#include "ops/cpu/kernels.h"

namespace nanoddp::ops {

namespace {

class CpuBackend final : public Backend {
 public:
  void matmul(const Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, float alpha,
              float beta) override {
    cpu::matmul(out, a, ta, b, tb, alpha, beta);
  }
  void fill(const Tensor& x, float value) override { cpu::fill(x, value); }
  void scale(const Tensor& x, float s) override { cpu::scale(x, s); }
  void axpy(const Tensor& y, const Tensor& x, float alpha) override { cpu::axpy(y, x, alpha); }
  void cast(const Tensor& dst, const Tensor& src) override { cpu::cast(dst, src); }
  void embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) override {
    cpu::embedding_forward(out, table, ids);
  }
  void embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) override {
    cpu::embedding_backward(dtable, dout, ids);
  }
  void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) override {
    cpu::rmsnorm_forward(y, rstd, x, eps);
  }
  void rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd,
                        bool accumulate) override {
    cpu::rmsnorm_backward(dx, dy, y, rstd, accumulate);
  }
  void rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0,
              bool inverse) override {
    cpu::rotary(y, x, cos, sin, pos0, inverse);
  }
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         int64_t kv_len, float scale) override {
    cpu::attention_forward(out, lse, q, k, v, kv_len, scale);
  }
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          float scale) override {
    cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale);
  }
  void relu2_forward(const Tensor& y, const Tensor& x) override { cpu::relu2_forward(y, x); }
  void relu2_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) override {
    cpu::relu2_backward(dx, dy, x);
  }
  void softcap_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                             float softcap, float grad_scale) override {
    cpu::softcap_cross_entropy(losses, logits, targets, vocab, softcap, grad_scale);
  }
  void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                    const AdamWStep& s) override {
    cpu::adamw_update(p, g, m, v, s);
  }
  void muon_momentum(const Tensor& g, const Tensor& buf, float momentum) override {
    cpu::muon_momentum(g, buf, momentum);
  }
  void newton_schulz(const Tensor& x, int steps, bool bf16) override { cpu::newton_schulz(x, steps, bf16); }
  void synchronize() override {}
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

void set_cpu_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace nanoddp::ops
