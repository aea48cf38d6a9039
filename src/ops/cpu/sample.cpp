// The sampling op (ops.h sample_tokens) on the CPU: the twin of ops/cuda/sample.cu, doing the
// arithmetic of Note [sampling on the device] (ops/sample_math.h) in the same order, so that both
// pick the same ids. Built with -ffp-contract=off (src/ops/cpu/CMakeLists.txt) for that reason.
// Rows are independent and few (one per sequence being generated): one row at a time.
#include <algorithm>
#include <functional>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/sample_math.h"

namespace nanoddp::ops::cpu {

namespace {

using namespace sampling;

struct Draw {
  int64_t vocab;
  float temperature;
  int64_t top_k;
};

// The k-th largest of z (k < z.size()) and how many of the ties at it are kept: those ranked
// below `need` in draw order.
void threshold(const std::vector<float>& z, int64_t k, float& t, int64_t& need) {
  std::vector<float> sorted(z);
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  t = sorted[k - 1];
  int64_t above = 0;
  for (float v : z) above += v > t ? 1 : 0;
  need = k - above;
}

// One row: z [vocab] holds the capped logits; u the row's uniform in [0, 1).
int32_t draw_row(const std::vector<float>& z, const Draw& d, float u) {
  const int64_t vocab = d.vocab;
  int64_t arg = 0;  // the largest, the lowest id among equals
  for (int64_t j = 1; j < vocab; j++)
    if (z[j] > z[arg]) arg = j;
  if (d.temperature <= 0.f) return static_cast<int32_t>(arg);
  const float mx = z[arg];
  const bool all = d.top_k <= 0 || d.top_k >= vocab;
  float t = -INFINITY;
  int64_t need = 0;
  if (!all) threshold(z, d.top_k, t, need);

  // Per chunk: the rank of its first tie at t among all ties (draw order), and its sum of weights.
  std::vector<int64_t> tie_start(kChunks);
  std::vector<double> sums(kChunks);
  int64_t ties = 0;
  for (int c = 0; c < kChunks; c++) {
    tie_start[c] = ties;
    double s = 0;
    for (int64_t j = c; j < vocab; j += kChunks) {
      const bool tie = !all && z[j] == t;
      if (kept(all, z[j], t, ties, need)) s = dadd(s, static_cast<double>(weight(z[j], mx, d.temperature)));
      ties += tie ? 1 : 0;
    }
    sums[c] = s;
  }
  double total = 0;
  for (double s : sums) total = dadd(total, s);
  const double target = dmul(static_cast<double>(u), total);
  double run = 0;
  for (int c = 0; c < kChunks; c++) {
    const double next = dadd(run, sums[c]);
    if (!(target < next)) {
      run = next;
      continue;
    }
    double r = dsub(target, run);
    int64_t rank = tie_start[c], last = -1;
    for (int64_t j = c; j < vocab; j += kChunks) {
      const bool tie = !all && z[j] == t;
      const bool keep = kept(all, z[j], t, rank, need);
      rank += tie ? 1 : 0;
      if (!keep) continue;
      last = j;
      r = dsub(r, static_cast<double>(weight(z[j], mx, d.temperature)));
      if (r < 0) return static_cast<int32_t>(j);
    }
    return static_cast<int32_t>(last);  // target sat within rounding of the chunk's end
  }
  return static_cast<int32_t>(arg);  // not reached: target < total as u < 1
}

}  // namespace

void CpuBackend::sample_tokens(const Tensor& ids, const Tensor& logits, const Tensor& uniforms, int64_t vocab,
                               float softcap, float temperature, int64_t top_k) {
  with_act_type(logits.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* pl = logits.data<T>();
    const int64_t rows = logits.dim(0), vpad = logits.dim(1);
    const Draw d{vocab, temperature, top_k};
    std::vector<float> z(vocab);
    for (int64_t r = 0; r < rows; r++) {
      for (int64_t j = 0; j < vocab; j++) z[j] = capped(load(pl, r * vpad + j), softcap);
      ids.data<int32_t>()[r] = draw_row(z, d, uniforms.data<float>()[r]);
    }
  });
}

}  // namespace nanoddp::ops::cpu
