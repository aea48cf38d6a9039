// nanochat 2026's gates and scalar mixes (ops.h: value_gate_*, smear_*, scalar_mix_*; Note [2026
// gates] in ops.cpp). Act buffers of type t; gates, scalars and weight gradients f32. Every
// reduction over tokens runs in one block in a fixed order, so results repeat bit for bit.
// x [n, c]; w [groups, k]; v, ve [n, groups * d]; gate [n, groups].
#pragma once

#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

cudaError_t launch_value_gate_forward(DType t, void* v, float* gate, const void* x, const void* w, const void* ve,
                                      int64_t n, int64_t c, int64_t groups, int64_t k, int64_t d, cudaStream_t stream);
// gate in, dz out; dw [groups, k] overwritten; dx[:, :k] += dz w.
cudaError_t launch_value_gate_backward(DType t, void* dx, float* dw, void* dve, const void* dv, const void* x,
                                       const void* w, const void* ve, float* gate, int64_t n, int64_t c, int64_t groups,
                                       int64_t k, int64_t d, cudaStream_t stream);
// x, y [n, c] in rows of seq; w [k]; lambda [1]; prev [n / seq, c] or null.
cudaError_t launch_smear_forward(DType t, void* y, float* gate, const void* x, const void* prev, const void* w,
                                 const float* lambda, int64_t n, int64_t c, int64_t k, int64_t seq,
                                 cudaStream_t stream);
cudaError_t launch_smear_backward(DType t, void* dx, float* dw, float* dlambda, float* dgate, const void* dy,
                                  const void* x, const void* w, const float* lambda, const float* gate, int64_t n,
                                  int64_t c, int64_t k, int64_t seq, cudaStream_t stream);
// y = a y + s b x (a null: 1), over n elements.
cudaError_t launch_scalar_mix_forward(DType t, void* y, const void* x, const float* a, const float* b, float s,
                                      int64_t n, cudaStream_t stream);
// da = sum dy y_in (a not null), db = s sum dy x; dx += s b dy; dy *= a.
cudaError_t launch_scalar_mix_backward(DType t, void* dy, void* dx, float* da, float* db, const void* y_in,
                                       const void* x, const float* a, const float* b, float s, int64_t n,
                                       cudaStream_t stream);

}  // namespace nanoddp::cuda
