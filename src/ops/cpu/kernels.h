// CPU kernels, one function per op of ops/ops.h (see there for the semantics). f32 activations.
// Each lives in the file named after its family (matmul.cpp, attention.cpp, ...).
#pragma once

#include "ops/ops.h"

namespace nanoddp::ops::cpu {

void matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
            float beta);
void fill(const Tensor& x, float value);
void scale(const Tensor& x, float s);
void axpy(const Tensor& y, const Tensor& x, float alpha);
void cast(const Tensor& dst, const Tensor& src);
void embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids);
void embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids);
void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps);
void rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, bool accumulate);
void rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0, bool inverse);
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       int64_t kv_len, float scale);
void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, float scale);
void relu2_forward(const Tensor& y, const Tensor& x);
void relu2_backward(const Tensor& dx, const Tensor& dy, const Tensor& x);
void softcap_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                           float softcap, float grad_scale);
void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& s);
void muon_momentum(const Tensor& g, const Tensor& buf, float momentum);
void newton_schulz(const Tensor& x, int steps, bool bf16);

// Row-major sgemm on raw pointers (leading dimensions in elements), shared by the kernels above.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Elementwise loops below this many elements run on one thread (a parallel region costs ~1 us).
inline constexpr int64_t kParallelGrain = 1 << 14;

}  // namespace nanoddp::ops::cpu
