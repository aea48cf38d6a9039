// nanochat 2026's gates and scalar mixes on the CPU (Note [2026 gates] in ops.cpp): the value-
// embedding gate, the smear of the previous token, and y = a y + s b x with scalars read from
// parameters. Per-token arithmetic in f32, rounded once where an act tensor is stored; the
// reductions over tokens (weight and scalar gradients) in double, in a fixed order.
#include <algorithm>
#include <vector>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

namespace {

float sigmoid(float z) { return 1.f / (1.f + std::exp(-z)); }

// x[0, k) . w[0, k) in f32.
template <typename T>
float dot(const T* x, const T* w, int64_t k) {
  float z = 0.f;
  for (int64_t j = 0; j < k; j++) z += load(x, j) * load(w, j);
  return z;
}

// The sum of term(i) over [0, n) in double, in fixed chunks added in order: the same result
// whatever the thread count.
template <typename Term>
double fixed_sum(int64_t n, Term&& term) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; c++) {
    double s = 0;
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); i++) s += term(i);
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

// v [N, G, D] += gate [N, G] * ve; gate = 3 sigmoid(x[:, :K] w^T).
void CpuBackend::value_gate_forward(const Tensor& v, const Tensor& gate, const Tensor& x, const Tensor& w,
                                    const Tensor& ve) {
  with_act_type(v.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t n = x.dim(0), c = x.dim(1), groups = w.dim(0), k = w.dim(1), d = v.numel() / (n * groups);
    T* pv = v.data<T>();
    const T *px = x.data<T>(), *pw = w.data<T>(), *pe = ve.data<T>();
    float* pg = gate.data<float>();
#pragma omp parallel for if (n * groups * d > kParallelGrain)
    for (int64_t i = 0; i < n; i++) {
      for (int64_t g = 0; g < groups; g++) {
        const float gt = 3.f * sigmoid(dot(px + i * c, pw + g * k, k));
        pg[i * groups + g] = gt;
        const int64_t base = (i * groups + g) * d;
        for (int64_t e = 0; e < d; e++) store(pv, base + e, load(pv, base + e) + gt * load(pe, base + e));
      }
    }
  });
}

void CpuBackend::value_gate_backward(const Tensor& dx, const Tensor& dw, const Tensor& dve, const Tensor& dv,
                                     const Tensor& x, const Tensor& w, const Tensor& ve, const Tensor& gate) {
  with_act_type(x.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t n = x.dim(0), c = x.dim(1), groups = w.dim(0), k = w.dim(1), d = dv.numel() / (n * groups);
    T *pdx = dx.data<T>(), *pdve = dve.data<T>();
    const T *px = x.data<T>(), *pw = w.data<T>(), *pe = ve.data<T>(), *pdv = dv.data<T>();
    float* pg = gate.data<float>();  // gate in, dz out
                                     // Per token: dve, dz (over the gate), and dz's share of dx's first K channels.
#pragma omp parallel for if (n * groups * d > kParallelGrain)
    for (int64_t i = 0; i < n; i++) {
      for (int64_t g = 0; g < groups; g++) {
        const int64_t base = (i * groups + g) * d;
        const float gt = pg[i * groups + g];
        float s = 0.f;
        for (int64_t e = 0; e < d; e++) {
          s += load(pdv, base + e) * load(pe, base + e);
          store(pdve, base + e, gt * load(pdv, base + e));
        }
        pg[i * groups + g] = s * gt * (1.f - gt / 3.f);
      }
      for (int64_t j = 0; j < k; j++) {
        float s = 0.f;
        for (int64_t g = 0; g < groups; g++) s += pg[i * groups + g] * load(pw, g * k + j);
        store(pdx, i * c + j, load(pdx, i * c + j) + s);
      }
    }
    // dw[g, j] = sum over tokens of dz[n, g] x[n, j].
    for (int64_t g = 0; g < groups; g++)
      for (int64_t j = 0; j < k; j++)
        dw.data<float>()[g * k + j] = static_cast<float>(
            fixed_sum(n, [&](int64_t i) { return double(pg[i * groups + g]) * load(px, i * c + j); }));
  });
}

void CpuBackend::smear_forward(const Tensor& y, const Tensor& gate, const Tensor& x, const Tensor& prev,
                               const Tensor& w, const Tensor& lambda, int64_t seq) {
  with_act_type(x.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t n = x.dim(0), c = x.dim(1), k = w.numel();
    const float lam = lambda.data<float>()[0];
    T* py = y.data<T>();
    const T *px = x.data<T>(), *pw = w.data<T>(), *pp = prev.defined() ? prev.data<T>() : nullptr;
    float* pg = gate.data<float>();
#pragma omp parallel for if (n * c > kParallelGrain)
    for (int64_t i = 0; i < n; i++) {
      const int64_t t = i % seq;
      const float s = sigmoid(dot(px + i * c, pw, k));
      pg[i] = s;
      // The token before this one: the previous row of x, or at a row's start the cached one.
      const T* before = t > 0 ? px + (i - 1) * c : pp != nullptr ? pp + (i / seq) * c : nullptr;
      const float mix = lam * s;
      for (int64_t e = 0; e < c; e++)
        store(py, i * c + e, before ? load(px, i * c + e) + mix * load(before, e) : load(px, i * c + e));
    }
  });
}

void CpuBackend::smear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlambda, const Tensor& dgate,
                                const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& lambda,
                                const Tensor& gate, int64_t seq) {
  with_act_type(x.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t n = x.dim(0), c = x.dim(1), k = w.numel();
    const float lam = lambda.data<float>()[0];
    T* pdx = dx.data<T>();
    const T *px = x.data<T>(), *pw = w.data<T>(), *pdy = dy.data<T>();
    const float* pg = gate.data<float>();
    float* pdg = dgate.data<float>();
    // dgate[n] = gate (dy[n] . x[n - 1]): the gradient of lambda per token (0 at a row's start).
#pragma omp parallel for if (n * c > kParallelGrain)
    for (int64_t i = 0; i < n; i++) pdg[i] = i % seq > 0 ? pg[i] * dot(pdy + i * c, px + (i - 1) * c, c) : 0.f;
    dlambda.data<float>()[0] = static_cast<float>(fixed_sum(n, [&](int64_t i) { return double(pdg[i]); }));
    // dz[n] = lambda (1 - gate) dgate[n], the gradient of the gate's pre-activation.
    auto dz = [&](int64_t i) { return lam * (1.f - pg[i]) * pdg[i]; };
    for (int64_t j = 0; j < k; j++)
      dw.data<float>()[j] = static_cast<float>(
          fixed_sum(n, [&](int64_t i) { return double(dz(i)) * load(px, i * c + j); }));
#pragma omp parallel for if (n * c > kParallelGrain)
    for (int64_t i = 0; i < n; i++) {
      const bool next = (i % seq) + 1 < seq;
      const float carry = next ? lam * pg[i + 1] : 0.f, dzi = dz(i);
      for (int64_t e = 0; e < c; e++) {
        float g = load(pdy, i * c + e);
        if (next) g += carry * load(pdy, (i + 1) * c + e);
        if (e < k) g += dzi * load(pw, e);
        store(pdx, i * c + e, g);
      }
    }
  });
}

void CpuBackend::scalar_mix_forward(const Tensor& y, const Tensor& x, const Tensor& a, const Tensor& b, float s) {
  with_act_type(y.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const float av = a.defined() ? a.data<float>()[0] : 1.f, bv = s * b.data<float>()[0];
    T* py = y.data<T>();
    const T* px = x.data<T>();
    const int64_t n = y.numel();
#pragma omp parallel for simd if (n > kParallelGrain)
    for (int64_t i = 0; i < n; i++) store(py, i, av * load(py, i) + bv * load(px, i));
  });
}

void CpuBackend::scalar_mix_backward(const Tensor& dy, const Tensor& dx, const Tensor& da, const Tensor& db,
                                     const Tensor& y_in, const Tensor& x, const Tensor& a, const Tensor& b, float s) {
  with_act_type(dy.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T *pdy = dy.data<T>(), *pdx = dx.data<T>();
    const T *pyi = y_in.data<T>(), *px = x.data<T>();
    const int64_t n = dy.numel();
    if (a.defined())
      da.data<float>()[0] = static_cast<float>(
          fixed_sum(n, [&](int64_t i) { return double(load(pdy, i)) * load(pyi, i); }));
    db.data<float>()[0] = s * static_cast<float>(
                                  fixed_sum(n, [&](int64_t i) { return double(load(pdy, i)) * load(px, i); }));
    const float av = a.defined() ? a.data<float>()[0] : 1.f, bv = s * b.data<float>()[0];
#pragma omp parallel for simd if (n > kParallelGrain)
    for (int64_t i = 0; i < n; i++) {
      const float g = load(pdy, i);
      store(pdx, i, load(pdx, i) + bv * g);
      store(pdy, i, av * g);
    }
  });
}

}  // namespace nanoddp::ops::cpu
