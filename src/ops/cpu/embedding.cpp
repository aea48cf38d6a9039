// Token embedding lookup and its gradient.
#include <algorithm>
#include <cstring>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

void CpuBackend::embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) {
  const int64_t n = ids.numel(), c = table.dim(1), v = table.dim(0);
  const int32_t* pid = ids.data<int32_t>();
  const float* pt = table.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < n; i++)
    NANODDP_CHECK(pid[i] >= 0 && pid[i] < v, "token id {} at position {} is outside the vocabulary [0, {})", pid[i],
                  i, v);
#pragma omp parallel for if (n * c > kParallelGrain)
  for (int64_t i = 0; i < n; i++) std::memcpy(po + i * c, pt + pid[i] * c, c * sizeof(float));
}

// Scatter-add. Threads split the channels, not the tokens: each output element is summed by one
// thread in token order, so the result is the same bit for bit whatever the thread count.
void CpuBackend::embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const int64_t n = ids.numel(), c = dtable.dim(1);
  const int32_t* pid = ids.data<int32_t>();
  const float* pd = dout.data<float>();
  float* pt = dtable.data<float>();
  constexpr int64_t kBlock = 64;  // channels per task: one cache line of 16 floats x 4
#pragma omp parallel for if (n * c > kParallelGrain)
  for (int64_t c0 = 0; c0 < c; c0 += kBlock) {
    int64_t c1 = std::min(c, c0 + kBlock);
    for (int64_t i = 0; i < n; i++) {
      float* row = pt + pid[i] * c;
      const float* src = pd + i * c;
#pragma omp simd
      for (int64_t j = c0; j < c1; j++) row[j] += src[j];
    }
  }
}

}  // namespace nanoddp::ops::cpu
