// Token embedding lookup and its gradient. The table and the output share a storage type (f32, or
// bf16 for a bf16 model's compute copy of the table); the gradient table is always f32.
#include <algorithm>
#include <cstring>

#include "ops/cpu/kernels.h"

namespace nanoddp::ops::cpu {

namespace {

void check_ids(const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; i++)
    NANODDP_CHECK(ids[i] >= 0 && ids[i] < vocab, "token id {} at position {} is outside the vocabulary [0, {})", ids[i],
                  i, vocab);
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) {
  NANODDP_ASSERT(out.dtype() == table.dtype(), "embedding rows are copied: {} table into {} output",
                 dtype_name(table.dtype()), dtype_name(out.dtype()));
  const int64_t n = ids.numel(), c = table.dim(1), v = table.dim(0);
  const size_t row_bytes = static_cast<size_t>(c) * dtype_size(table.dtype());
  const int32_t* pid = ids.data<int32_t>();
  const auto* pt = static_cast<const unsigned char*>(table.raw());
  auto* po = static_cast<unsigned char*>(out.raw());
  check_ids(pid, n, v);
#pragma omp parallel for if (n * c > kParallelGrain)
  for (int64_t i = 0; i < n; i++) std::memcpy(po + i * row_bytes, pt + pid[i] * row_bytes, row_bytes);
}

// Scatter-add. Threads split the channels, not the tokens: each output element is summed by one
// thread in token order, so the result is the same bit for bit whatever the thread count.
void CpuBackend::embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  with_act_type(dout.dtype(), [&](auto tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int64_t n = ids.numel(), c = dtable.dim(1), v = dtable.dim(0);
    const int32_t* pid = ids.data<int32_t>();
    check_ids(pid, n, v);  // the model ran the forward on these ids; a direct caller may not have
    const T* pd = dout.data<T>();
    float* pt = dtable.data<float>();
    constexpr int64_t kBlock = 64;  // channels per task: one cache line of 16 floats x 4
#pragma omp parallel for if (n * c > kParallelGrain)
    for (int64_t c0 = 0; c0 < c; c0 += kBlock) {
      const int64_t c1 = std::min(c, c0 + kBlock);
      for (int64_t i = 0; i < n; i++) {
        float* row = pt + pid[i] * c;
        const T* src = pd + i * c;
#pragma omp simd
        for (int64_t j = c0; j < c1; j++) row[j] += load(src, j);
      }
    }
  });
}

}  // namespace nanoddp::ops::cpu
