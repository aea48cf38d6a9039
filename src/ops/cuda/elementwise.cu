// Elementwise kernels through one grid-stride "map" kernel: out[i] = f(out[i], a[i], b[i]),
// computed in f32 and stored in the output's type. When every pointer is 16-byte aligned each
// thread moves 16 bytes per access (the vector path); otherwise one element (views at odd
// offsets). Memory-bound: one read of each input and one write, nothing more.
#include "ops/cuda/common.cuh"
#include "ops/cuda/elementwise.cuh"

#include <type_traits>

namespace nanoddp::cuda {

namespace {

// Functors: kArity inputs besides the output; kReadsOut when the old output value is used.
struct FillOp {
  static constexpr int kArity = 0;
  static constexpr bool kReadsOut = false;
  float value;
  __device__ float operator()(float, float, float) const { return value; }
};
struct ScaleOp {
  static constexpr int kArity = 0;
  static constexpr bool kReadsOut = true;
  float s;
  __device__ float operator()(float o, float, float) const { return o * s; }
};
struct AxpyOp {
  static constexpr int kArity = 1;
  static constexpr bool kReadsOut = true;
  float alpha;
  __device__ float operator()(float o, float a, float) const { return o + alpha * a; }
};
struct CopyOp {
  static constexpr int kArity = 1;
  static constexpr bool kReadsOut = false;
  __device__ float operator()(float, float a, float) const { return a; }
};
// max(x, 0) written as the CPU kernel writes it (ops/cpu/elementwise.cpp), NaN included.
__device__ __forceinline__ float relu(float x) { return x > 0.f ? x : 0.f; }
struct Relu2Op {
  static constexpr int kArity = 1;
  static constexpr bool kReadsOut = false;
  __device__ float operator()(float, float x, float) const {
    const float r = relu(x);
    return r * r;
  }
};
struct Relu2GradOp {  // a = dy, b = x
  static constexpr int kArity = 2;
  static constexpr bool kReadsOut = false;
  __device__ float operator()(float, float dy, float x) const { return dy * 2.f * relu(x); }
};

template <typename TO, typename TA, typename TB, int V, typename F>
__device__ __forceinline__ void map_one(TO* out, const TA* a, const TB* b, int64_t i, const F& f) {
  Pack<TO, V> o;
  Pack<TA, V> x;
  Pack<TB, V> y;
  if constexpr (F::kReadsOut) o = load_pack<TO, V>(out + i);
  if constexpr (F::kArity >= 1) x = load_pack<TA, V>(a + i);
  if constexpr (F::kArity >= 2) y = load_pack<TB, V>(b + i);
#pragma unroll
  for (int j = 0; j < V; j++) {
    float ov = 0.f, av = 0.f, bv = 0.f;
    if constexpr (F::kReadsOut) ov = to_f32(o.v[j]);
    if constexpr (F::kArity >= 1) av = to_f32(x.v[j]);
    if constexpr (F::kArity >= 2) bv = to_f32(y.v[j]);
    o.v[j] = from_f32<TO>(f(ov, av, bv));
  }
  store_pack<TO, V>(out + i, o);
}

// Packs of V elements over [0, n / V * V), then single elements for the remainder.
template <typename TO, typename TA, typename TB, int V, typename F>
__global__ void map_kernel(TO* out, const TA* a, const TB* b, int64_t n, F f) {
  const int64_t packs = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = tid; p < packs; p += stride) map_one<TO, TA, TB, V>(out, a, b, p * V, f);
  if (tid < n - packs * V) map_one<TO, TA, TB, 1>(out, a, b, packs * V + tid, f);
}

template <typename TO, typename TA, typename TB, typename F>
cudaError_t launch_map(TO* out, const TA* a, const TB* b, int64_t n, F f, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr size_t kMax = sizeof(TO) > sizeof(TA) ? (sizeof(TO) > sizeof(TB) ? sizeof(TO) : sizeof(TB))
                                                  : (sizeof(TA) > sizeof(TB) ? sizeof(TA) : sizeof(TB));
  constexpr int V = static_cast<int>(16 / kMax);
  const bool vec = aligned(out, sizeof(TO) * V) && (F::kArity < 1 || aligned(a, sizeof(TA) * V)) &&
                   (F::kArity < 2 || aligned(b, sizeof(TB) * V));
  constexpr int kThreads = 256;
  if (vec) {
    map_kernel<TO, TA, TB, V><<<grid_for(n / V + 1, kThreads, 8192), kThreads, 0, stream>>>(out, a, b, n, f);
  } else {
    map_kernel<TO, TA, TB, 1><<<grid_for(n, kThreads, 8192), kThreads, 0, stream>>>(out, a, b, n, f);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fill(DType t, void* x, int64_t n, float value, cudaStream_t stream) {
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch_map(static_cast<T*>(x), static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), n,
                      FillOp{value}, stream);
  });
}

cudaError_t launch_scale(DType t, void* x, int64_t n, float s, cudaStream_t stream) {
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch_map(static_cast<T*>(x), static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), n,
                      ScaleOp{s}, stream);
  });
}

namespace {

__global__ void scale_rows_kernel(float* x, const float* s, int64_t n, int64_t cols) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= s[i / cols];
}

}  // namespace

cudaError_t launch_scale_rows(float* x, const float* s, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  scale_rows_kernel<<<grid_for(n, kThreads, 8192), kThreads, 0, stream>>>(x, s, n, cols);
  return cudaGetLastError();
}

cudaError_t launch_axpy(DType t, void* y, const void* x, int64_t n, float alpha, cudaStream_t stream) {
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch_map(static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(nullptr), n,
                      AxpyOp{alpha}, stream);
  });
}

cudaError_t launch_cast(DType dst_t, void* dst, DType src_t, const void* src, int64_t n, cudaStream_t stream) {
  if (dst_t == src_t) {
    const size_t bytes = static_cast<size_t>(n) * dtype_size(dst_t);
    return dst == src || n == 0 ? cudaSuccess : cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  }
  // Through f32: exact for the source, one rounding to the destination (as the CPU's cast).
  return with_dtype(dst_t, [&](auto* dst_tag) {
    using TO = std::remove_pointer_t<decltype(dst_tag)>;
    return with_dtype(src_t, [&](auto* src_tag) {
      using TA = std::remove_pointer_t<decltype(src_tag)>;
      return launch_map(static_cast<TO*>(dst), static_cast<const TA*>(src), static_cast<const TA*>(nullptr), n,
                        CopyOp{}, stream);
    });
  });
}

cudaError_t launch_relu2_forward(DType t, void* y, const void* x, int64_t n, cudaStream_t stream) {
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch_map(static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(nullptr), n, Relu2Op{},
                      stream);
  });
}

cudaError_t launch_relu2_backward(DType t, void* dx, const void* dy, const void* x, int64_t n, cudaStream_t stream) {
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return launch_map(static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), n, Relu2GradOp{},
                      stream);
  });
}

}  // namespace nanoddp::cuda
