#include "reference.h"

#include <algorithm>
#include <cmath>

namespace nanoddp::reference {

Vec matmul(const Vec& a, bool ta, const Vec& b, bool tb, int64_t m, int64_t n, int64_t k) {
  Vec c(m * n, 0.0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

Vec embedding(const Vec& table, const std::vector<int32_t>& ids, int64_t c) {
  Vec out(ids.size() * c);
  for (size_t i = 0; i < ids.size(); i++)
    for (int64_t j = 0; j < c; j++) out[i * c + j] = table[ids[i] * c + j];
  return out;
}

Vec rmsnorm(const Vec& x, int64_t c, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / c; r++) {
    double ss = 0;
    for (int64_t j = 0; j < c; j++) ss += x[r * c + j] * x[r * c + j];
    double s = 1.0 / std::sqrt(ss / c + eps);
    for (int64_t j = 0; j < c; j++) y[r * c + j] = x[r * c + j] * s;
  }
  return y;
}

Vec rotary(const Vec& x, int64_t b, int64_t t, int64_t h, int64_t d, const Vec& cos, const Vec& sin, int64_t pos0,
           bool inverse) {
  Vec y(x.size());
  int64_t half = d / 2;
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t ti = 0; ti < t; ti++)
      for (int64_t hi = 0; hi < h; hi++)
        for (int64_t i = 0; i < half; i++) {
          int64_t base = ((bi * t + ti) * h + hi) * d;
          double c = cos[(pos0 + ti) * half + i], s = sin[(pos0 + ti) * half + i];
          if (inverse) s = -s;
          double x1 = x[base + i], x2 = x[base + half + i];
          y[base + i] = x1 * c + x2 * s;
          y[base + half + i] = -x1 * s + x2 * c;
        }
  return y;
}

Vec attention(const Vec& q, const Vec& k, const Vec& v, int64_t b, int64_t tq, int64_t tcap, int64_t hq, int64_t hkv,
              int64_t d, int64_t kv_len, double scale, Vec* lse, int64_t window) {
  Vec out(b * tq * hq * d, 0.0);
  if (lse) lse->assign(b * hq * tq, 0.0);
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t h = 0; h < hq; h++) {
      int64_t g = h / (hq / hkv);
      for (int64_t i = 0; i < tq; i++) {
        const int64_t last = kv_len - tq + i, first = window > 0 ? std::max<int64_t>(0, last - window) : 0;
        Vec s(last + 1, -INFINITY);  // keys before `first` stay masked: exp(-inf) = 0
        double mx = -INFINITY;
        for (int64_t j = first; j <= last; j++) {
          double dot = 0;
          for (int64_t e = 0; e < d; e++)
            dot += q[((bi * tq + i) * hq + h) * d + e] * k[((bi * tcap + j) * hkv + g) * d + e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& sj : s) sum += (sj = std::exp(sj - mx));
        if (lse) (*lse)[(bi * hq + h) * tq + i] = mx + std::log(sum);
        for (int64_t j = 0; j <= last; j++)
          for (int64_t e = 0; e < d; e++)
            out[((bi * tq + i) * hq + h) * d + e] += s[j] / sum * v[((bi * tcap + j) * hkv + g) * d + e];
      }
    }
  return out;
}

Vec relu2(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); i++) y[i] = x[i] > 0 ? x[i] * x[i] : 0.0;
  return y;
}

Vec softcap_cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t vpad, int64_t vocab,
                          double cap) {
  Vec losses(targets.size(), 0.0);
  for (size_t i = 0; i < targets.size(); i++) {
    if (targets[i] < 0) continue;
    Vec z(vocab);
    double mx = -INFINITY;
    for (int64_t j = 0; j < vocab; j++) mx = std::max(mx, z[j] = cap * std::tanh(logits[i * vpad + j] / cap));
    double sum = 0;
    for (double zj : z) sum += std::exp(zj - mx);
    losses[i] = mx + std::log(sum) - z[targets[i]];
  }
  return losses;
}

Vec newton_schulz(const Vec& g, int64_t rows, int64_t cols, int steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  bool tr = rows > cols;
  int64_t m = tr ? cols : rows, n = tr ? rows : cols;
  Vec x(m * n);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) (tr ? x[j * rows + i] : x[i * cols + j]) = g[i * cols + j];
  double ss = 0;
  for (double e : x) ss += e * e;
  for (double& e : x) e /= std::sqrt(ss) + 1e-7;
  for (int s = 0; s < steps; s++) {
    Vec A = matmul(x, false, x, true, m, m, n);
    Vec AA = matmul(A, false, A, false, m, m, m);
    Vec B(m * m);
    for (int64_t i = 0; i < m * m; i++) B[i] = b * A[i] + c * AA[i];
    Vec BX = matmul(B, false, x, false, m, n, m);
    for (int64_t i = 0; i < m * n; i++) x[i] = a * x[i] + BX[i];
  }
  Vec out(rows * cols);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) out[i * cols + j] = tr ? x[j * rows + i] : x[i * cols + j];
  return out;
}

double dot(const Vec& w, const Vec& y) {
  double s = 0;
  for (size_t i = 0; i < w.size(); i++) s += w[i] * y[i];
  return s;
}

}  // namespace nanoddp::reference
