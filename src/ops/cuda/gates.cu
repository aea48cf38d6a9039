// nanochat 2026's gates and scalar mixes on CUDA (see gates.cuh). Per-token work runs one thread
// per token (value gate) or one block per token row (smear); the sums over tokens that give weight
// and scalar gradients run in one block each, with a strided loop and block_sum, in a fixed order.
// Those sums read every token once: cheap next to the GEMMs of a layer, but a single block, so
// they use one SM's bandwidth.
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/gates.cuh"

namespace nanoddp::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float z) { return 1.f / (1.f + __expf(-z)); }

template <typename T>
__device__ __forceinline__ float dot(const T* x, const T* w, int64_t k) {
  float z = 0.f;
  for (int64_t j = 0; j < k; j++) z += to_f32(x[j]) * to_f32(w[j]);
  return z;
}

// One thread per (token, group): gate = 3 sigmoid(x[:k] . w[g]); v += gate ve.
template <typename T>
__global__ void value_gate_forward_kernel(T* v, float* gate, const T* x, const T* w, const T* ve, int64_t n, int64_t c,
                                          int64_t groups, int64_t k, int64_t d) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n * groups;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p / groups, g = p % groups;
    const float gt = 3.f * sigmoid(dot(x + i * c, w + g * k, k));
    gate[p] = gt;
    for (int64_t e = 0; e < d; e++) v[p * d + e] = from_f32<T>(to_f32(v[p * d + e]) + gt * to_f32(ve[p * d + e]));
  }
}

// One thread per token: dve, dz over each group (written over gate), dz's share of dx[:k].
template <typename T>
__global__ void value_gate_token_grads(T* dx, T* dve, const T* dv, const T* w, const T* ve, float* gate, int64_t n,
                                       int64_t c, int64_t groups, int64_t k, int64_t d) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    for (int64_t g = 0; g < groups; g++) {
      const int64_t p = i * groups + g;
      const float gt = gate[p];
      float s = 0.f;
      for (int64_t e = 0; e < d; e++) {
        s += to_f32(dv[p * d + e]) * to_f32(ve[p * d + e]);
        dve[p * d + e] = from_f32<T>(gt * to_f32(dv[p * d + e]));
      }
      gate[p] = s * gt * (1.f - gt / 3.f);
    }
    for (int64_t j = 0; j < k; j++) {
      float s = 0.f;
      for (int64_t g = 0; g < groups; g++) s += gate[i * groups + g] * to_f32(w[g * k + j]);
      dx[i * c + j] = from_f32<T>(to_f32(dx[i * c + j]) + s);
    }
  }
}

// One block per (g, j): dw[g, j] = sum_i dz[i, g] x[i, j].
template <typename T>
__global__ void value_gate_weight_grad(float* dw, const float* dz, const T* x, int64_t n, int64_t c, int64_t groups,
                                       int64_t k) {
  __shared__ float scratch[32];
  const int64_t g = blockIdx.x / k, j = blockIdx.x % k;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += dz[i * groups + g] * to_f32(x[i * c + j]);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) dw[blockIdx.x] = s;
}

// One block per token row: gate = sigmoid(x[:k] . w); y = x + lambda gate x_before.
template <typename T>
__global__ void smear_forward_kernel(T* y, float* gate, const T* x, const T* prev, const T* w, const float* lambda,
                                     int64_t c, int64_t k, int64_t seq) {
  const int64_t i = blockIdx.x, t = i % seq;
  const float s = sigmoid(dot(x + i * c, w, k)), mix = lambda[0] * s;
  if (threadIdx.x == 0) gate[i] = s;
  const T* before = t > 0 ? x + (i - 1) * c : prev != nullptr ? prev + (i / seq) * c : nullptr;
  for (int64_t e = threadIdx.x; e < c; e += blockDim.x)
    y[i * c + e] = before ? from_f32<T>(to_f32(x[i * c + e]) + mix * to_f32(before[e])) : x[i * c + e];
}

// One block per token row: dgate = gate (dy[i] . x[i - 1]), 0 at a row's start.
template <typename T>
__global__ void smear_dgate_kernel(float* dgate, const T* dy, const T* x, const float* gate, int64_t c, int64_t seq) {
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x;
  if (i % seq == 0) {
    if (threadIdx.x == 0) dgate[i] = 0.f;
    return;
  }
  float s = 0.f;
  for (int64_t e = threadIdx.x; e < c; e += blockDim.x) s += to_f32(dy[i * c + e]) * to_f32(x[(i - 1) * c + e]);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) dgate[i] = gate[i] * s;
}

// Block 0: dlambda = sum dgate; block 1 + j: dw[j] = sum lambda (1 - gate) dgate x[i, j].
template <typename T>
__global__ void smear_param_grads(float* dw, float* dlambda, const float* dgate, const float* gate, const T* x,
                                  const float* lambda, int64_t n, int64_t c) {
  __shared__ float scratch[32];
  const int64_t j = int64_t(blockIdx.x) - 1;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += j < 0 ? dgate[i] : lambda[0] * (1.f - gate[i]) * dgate[i] * to_f32(x[i * c + j]);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) (j < 0 ? dlambda[0] : dw[j]) = s;
}

// One thread per element: dx = dy + lambda gate[i + 1] dy[i + 1] + dz[i] w (first k channels).
template <typename T>
__global__ void smear_dx_kernel(T* dx, const T* dy, const T* w, const float* lambda, const float* gate,
                                const float* dgate, int64_t n, int64_t c, int64_t k, int64_t seq) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n * c; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p / c, e = p % c;
    float g = to_f32(dy[p]);
    if ((i % seq) + 1 < seq) g += lambda[0] * gate[i + 1] * to_f32(dy[p + c]);
    if (e < k) g += lambda[0] * (1.f - gate[i]) * dgate[i] * to_f32(w[e]);
    dx[p] = from_f32<T>(g);
  }
}

template <typename T>
__global__ void scalar_mix_forward_kernel(T* y, const T* x, const float* a, const float* b, float s, int64_t n) {
  const float av = a != nullptr ? a[0] : 1.f, bv = s * b[0];
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x)
    y[p] = from_f32<T>(av * to_f32(y[p]) + bv * to_f32(x[p]));
}

// One block: out = s sum(u v).
template <typename T>
__global__ void scaled_dot(float* out, const T* u, const T* v, float s, int64_t n) {
  __shared__ float scratch[32];
  float sum = 0.f;
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x) sum += to_f32(u[p]) * to_f32(v[p]);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) out[0] = s * sum;
}

template <typename T>
__global__ void scalar_mix_grads(T* dy, T* dx, const float* a, const float* b, float s, int64_t n) {
  const float av = a != nullptr ? a[0] : 1.f, bv = s * b[0];
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_f32(dy[p]);
    dx[p] = from_f32<T>(to_f32(dx[p]) + bv * g);
    dy[p] = from_f32<T>(av * g);
  }
}

}  // namespace

cudaError_t launch_value_gate_forward(DType t, void* v, float* gate, const void* x, const void* w, const void* ve,
                                      int64_t n, int64_t c, int64_t groups, int64_t k, int64_t d, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    value_gate_forward_kernel<T>
        <<<grid_for(n * groups, kThreads), kThreads, 0, stream>>>(static_cast<T*>(v), gate, static_cast<const T*>(x),
                                                                  static_cast<const T*>(w), static_cast<const T*>(ve),
                                                                  n, c, groups, k, d);
  });
  return cudaGetLastError();
}

cudaError_t launch_value_gate_backward(DType t, void* dx, float* dw, void* dve, const void* dv, const void* x,
                                       const void* w, const void* ve, float* gate, int64_t n, int64_t c, int64_t groups,
                                       int64_t k, int64_t d, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    value_gate_token_grads<T>
        <<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dx), static_cast<T*>(dve),
                                                         static_cast<const T*>(dv), static_cast<const T*>(w),
                                                         static_cast<const T*>(ve), gate, n, c, groups, k, d);
    value_gate_weight_grad<T>
        <<<unsigned(groups * k), kThreads, 0, stream>>>(dw, gate, static_cast<const T*>(x), n, c, groups, k);
  });
  return cudaGetLastError();
}

cudaError_t launch_smear_forward(DType t, void* y, float* gate, const void* x, const void* prev, const void* w,
                                 const float* lambda, int64_t n, int64_t c, int64_t k, int64_t seq,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    smear_forward_kernel<T><<<unsigned(n), kThreads, 0, stream>>>(static_cast<T*>(y), gate, static_cast<const T*>(x),
                                                                  static_cast<const T*>(prev), static_cast<const T*>(w),
                                                                  lambda, c, k, seq);
  });
  return cudaGetLastError();
}

cudaError_t launch_smear_backward(DType t, void* dx, float* dw, float* dlambda, float* dgate, const void* dy,
                                  const void* x, const void* w, const float* lambda, const float* gate, int64_t n,
                                  int64_t c, int64_t k, int64_t seq, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T *pdy = static_cast<const T*>(dy), *px = static_cast<const T*>(x);
    smear_dgate_kernel<T><<<unsigned(n), kThreads, 0, stream>>>(dgate, pdy, px, gate, c, seq);
    smear_param_grads<T><<<unsigned(1 + k), kThreads, 0, stream>>>(dw, dlambda, dgate, gate, px, lambda, n, c);
    smear_dx_kernel<T><<<grid_for(n * c, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dx), pdy,
                                                                           static_cast<const T*>(w), lambda, gate,
                                                                           dgate, n, c, k, seq);
  });
  return cudaGetLastError();
}

cudaError_t launch_scalar_mix_forward(DType t, void* y, const void* x, const float* a, const float* b, float s,
                                      int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scalar_mix_forward_kernel<T>
        <<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), a, b, s, n);
  });
  return cudaGetLastError();
}

cudaError_t launch_scalar_mix_backward(DType t, void* dy, void* dx, float* da, float* db, const void* y_in,
                                       const void* x, const float* a, const float* b, float s, int64_t n,
                                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T *pdy = static_cast<const T*>(dy), *pyi = static_cast<const T*>(y_in), *px = static_cast<const T*>(x);
    if (a != nullptr) scaled_dot<T><<<1, 1024, 0, stream>>>(da, pdy, pyi, 1.f, n);
    scaled_dot<T><<<1, 1024, 0, stream>>>(db, pdy, px, s, n);
    scalar_mix_grads<T>
        <<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dy), static_cast<T*>(dx), a, b, s, n);
  });
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
