// The CPU backend's kernels (see ops/ops.h for the semantics of each op), f32 activations, and the
// helpers they share.
#pragma once

#include "ops/backend.h"

namespace nanoddp::ops::cpu {

// The CPU backend. Each op is defined in the file named after its family (matmul.cpp,
// attention.cpp, ...); backend_cpu.cpp holds the instance.
class CpuBackend final : public Backend {
 public:
  NANODDP_OPS(NANODDP_OP_OVERRIDE)
  void synchronize() override {}  // every CPU kernel has finished when it returns
};

// Row-major sgemm on raw pointers (leading dimensions in elements), shared by the kernels above.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Elementwise loops below this many elements run on one thread (a parallel region costs ~1 us).
inline constexpr int64_t kParallelGrain = 1 << 14;

}  // namespace nanoddp::ops::cpu
