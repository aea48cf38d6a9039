// Slow, obviously correct reference implementations of the ops in double precision. Tests compare
// every kernel against these, and take finite differences of them to check every backward.
// Layouts match ops/ops.h; all buffers are flat std::vector<double>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nanoddp::reference {

using Vec = std::vector<double>;

// c[m, n] = op(a) op(b)
Vec matmul(const Vec& a, bool trans_a, const Vec& b, bool trans_b, int64_t m, int64_t n, int64_t k);
Vec embedding(const Vec& table, const std::vector<int32_t>& ids, int64_t c);
// rows of length c
Vec rmsnorm(const Vec& x, int64_t c, double eps);
// x [b, t, h, d]; cos/sin [rows, d/2]
Vec rotary(const Vec& x, int64_t b, int64_t t, int64_t h, int64_t d, const Vec& cos, const Vec& sin, int64_t pos0,
           bool inverse);
// q [b, tq, hq, d]; k, v [b, tcap, hkv, d]; out [b, tq, hq, d]; lse (optional) [b, hq, tq]. The query
// at position p sees keys 0 ..= p, or with window > 0 the keys max(0, p - window) ..= p (ops.h).
Vec attention(const Vec& q, const Vec& k, const Vec& v, int64_t b, int64_t tq, int64_t tcap, int64_t hq, int64_t hkv,
              int64_t d, int64_t kv_len, double scale, Vec* lse = nullptr, int64_t window = 0);
Vec relu2(const Vec& x);
// losses [n]; logits [n, vpad]
Vec softcap_cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t vpad, int64_t vocab,
                          double cap);
// Newton-Schulz in exact arithmetic (no bf16 rounding), same algorithm as ops::newton_schulz.
Vec newton_schulz(const Vec& x, int64_t rows, int64_t cols, int steps);

// Central finite differences of a scalar function f at x: df/dx_i for the indices given.
template <typename F>
Vec finite_difference(F&& f, Vec x, const std::vector<int64_t>& indices, double h = 1e-6) {
  Vec g(indices.size());
  for (size_t n = 0; n < indices.size(); n++) {
    int64_t i = indices[n];
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x);
    x[i] = x0 - h;
    double fm = f(x);
    x[i] = x0;
    g[n] = (fp - fm) / (2 * h);
  }
  return g;
}

// sum_i w[i] * y[i]: turns a vector output into the scalar the finite differences need.
double dot(const Vec& w, const Vec& y);

}  // namespace nanoddp::reference
