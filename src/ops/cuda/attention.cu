// Attention dispatch, the reference kernels, and the backward's delta = rowsum(dout * out).
//
// The reference kernels are simple and exact (f32 math, one block per query or key row, scores
// of a row held in shared memory): they serve f32 activations, shapes the flash kernels do not
// cover, and NANODDP_CUDA_ATTENTION=reference. The fast path is attention_flash.cu.
//
// Both backward paths are deterministic: dq is computed per query row and dk, dv per key row,
// each summing its terms in a fixed order, instead of scattering partial sums with atomics.
// With a sliding window (s.window > 0) a query row's loops start at its oldest visible key and a
// key row's end at the newest query that sees it, so no term outside the window is computed.
#include "ops/cuda/attention.cuh"
#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/common.cuh"

#include <algorithm>
#include <type_traits>

namespace nanoddp::cuda {

namespace {

constexpr int kThreads = 128;

// Row (b, t, h) of a [B, T, H, D] tensor.
__device__ __forceinline__ int64_t row_of(int64_t b, int64_t t, int64_t h, int64_t seq, int64_t heads) {
  return (b * seq + t) * heads + h;
}

// The oldest key the query at position `pos` sees (0 without a window).
__device__ __forceinline__ int64_t first_key(int64_t pos, int64_t window) {
  return window > 0 && pos > window ? pos - window : 0;
}

template <typename T>
__device__ __forceinline__ float dot_row(const float* a, const T* b, int64_t d) {
  float acc = 0.f;
  for (int64_t e = 0; e < d; e++) acc += a[e] * to_f32(b[e]);
  return acc;
}

// One block per (query i, head h, batch b). Shared: q row [D], then scores/probabilities [keys]
// of the keys first .. first + keys - 1 the query sees.
template <typename T>
__global__ void ref_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, AttentionShape s,
                                   float scale) {
  extern __shared__ float smem[];
  __shared__ float red[32];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = s.d;
  const int64_t pos = s.kv_len - s.tq + i, first = first_key(pos, s.window);
  const int64_t kh = h / (s.hq / s.hkv), keys = pos + 1 - first;
  float *qs = smem, *p = smem + d;
  const int64_t qrow = row_of(b, i, h, s.tq, s.hq) * d;
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) qs[e] = to_f32(q[qrow + e]);
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    p[j] = scale * dot_row(qs, k + row_of(b, first + j, kh, s.tk, s.hkv) * d, d);
    mx = fmaxf(mx, p[j]);
  }
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    p[j] = expf(p[j] - mx);
    sum += p[j];
  }
  sum = block_sum(sum, red);  // its barriers also make p visible to every thread
  if (threadIdx.x == 0) lse[(b * s.hq + h) * s.tq + i] = mx + logf(sum);
  const float inv = 1.f / sum;
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < keys; j++) acc += p[j] * to_f32(v[row_of(b, first + j, kh, s.tk, s.hkv) * d + e]);
    out[qrow + e] = from_f32<T>(acc * inv);
  }
}

// delta[b, h, t] = sum_e dout[b, t, h, e] * out[b, t, h, e]: a warp per row.
template <typename T>
__global__ void delta_kernel(float* delta, const T* dout, const T* out, int64_t rows, int64_t seq, int64_t heads,
                             int64_t d) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= rows) return;
  float acc = 0.f;
  for (int64_t e = lane; e < d; e += 32) acc += to_f32(dout[r * d + e]) * to_f32(out[r * d + e]);
  acc = warp_sum(acc);
  const int64_t h = r % heads, bt = r / heads, t = bt % seq, b = bt / seq;
  if (lane == 0) delta[(b * heads + h) * seq + t] = acc;
}

// dq for one (query i, head h, batch b): recompute P and dP of the row, then dq = scale dS K.
// Shared: q row [D], dout row [D], dS [i + 1 - first] of the keys first ..= i the query sees.
template <typename T>
__global__ void ref_dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                              const float* delta, AttentionShape s, float scale) {
  extern __shared__ float smem[];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = s.d, t = s.tq;
  const int64_t kh = h / (s.hq / s.hkv), first = first_key(i, s.window), keys = i + 1 - first;
  float *qs = smem, *dos = smem + d, *ds = smem + 2 * d;
  const int64_t qrow = row_of(b, i, h, t, s.hq) * d;
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    qs[e] = to_f32(q[qrow + e]);
    dos[e] = to_f32(dout[qrow + e]);
  }
  __syncthreads();
  const float l = lse[(b * s.hq + h) * t + i], dl = delta[(b * s.hq + h) * t + i];
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const int64_t kv = row_of(b, first + j, kh, t, s.hkv) * d;
    const float p = expf(scale * dot_row(qs, k + kv, d) - l);
    ds[j] = p * (dot_row(dos, v + kv, d) - dl);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < keys; j++) acc += ds[j] * to_f32(k[row_of(b, first + j, kh, t, s.hkv) * d + e]);
    dq[qrow + e] = from_f32<T>(scale * acc);
  }
}

// dk, dv for one (key j, kv head kh, batch b): every query head of the group and every query
// i >= j that sees the key (i <= j + window with a window), in (head, query) order. Shared: k row [D],
// v row [D], P and dS [group * span], span <= T - j.
template <typename T>
__global__ void ref_dkdv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                                const float* delta, AttentionShape s, float scale) {
  extern __shared__ float smem[];
  const int64_t j = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, d = s.d, t = s.tq;
  const int64_t last = s.window > 0 ? min(t - 1, j + s.window) : t - 1;  // the newest query that sees key j
  const int64_t group = s.hq / s.hkv, span = last + 1 - j, terms = group * span;
  float *ks = smem, *vs = smem + d, *pp = smem + 2 * d, *ds = pp + terms;
  const int64_t kv = row_of(b, j, kh, t, s.hkv) * d;
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    ks[e] = to_f32(k[kv + e]);
    vs[e] = to_f32(v[kv + e]);
  }
  __syncthreads();
  for (int64_t x = threadIdx.x; x < terms; x += blockDim.x) {
    const int64_t h = kh * group + x / span, i = j + x % span;
    const int64_t qrow = row_of(b, i, h, t, s.hq) * d, stat = (b * s.hq + h) * t + i;
    const float p = expf(scale * dot_row(ks, q + qrow, d) - lse[stat]);
    pp[x] = p;
    ds[x] = p * (dot_row(vs, dout + qrow, d) - delta[stat]);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float acc_k = 0.f, acc_v = 0.f;
    for (int64_t x = 0; x < terms; x++) {
      const int64_t h = kh * group + x / span, i = j + x % span;
      const int64_t qrow = row_of(b, i, h, t, s.hq) * d;
      acc_v += pp[x] * to_f32(dout[qrow + e]);
      acc_k += ds[x] * to_f32(q[qrow + e]);
    }
    dk[kv + e] = from_f32<T>(scale * acc_k);
    dv[kv + e] = from_f32<T>(acc_v);
  }
}

// Floats of slack after each kernel's shared arrays. compute-sanitizer's memcheck on an H200 found
// ref_dq_kernel<float> reading 8 bytes at the last float of its 17-float allocation (one key, head
// dim 8). The PTX reads dS one float at a time there, so the wider load is ptxas's (the machine
// code was not read); its extra lane goes unused, and the hardware allocates shared memory in
// larger units, so the results were right. The slack keeps every load inside the allocation.
constexpr int64_t kSmemSlack = 4;

// Raises the kernel's dynamic shared-memory limit when it needs more than the default 48 KB.
template <typename K>
cudaError_t allow_smem(K kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

size_t ref_forward_smem(const AttentionShape& s) {
  return static_cast<size_t>(s.d + s.kv_len + kSmemSlack) * sizeof(float);
}
size_t ref_dq_smem(const AttentionShape& s) { return static_cast<size_t>(2 * s.d + s.tq + kSmemSlack) * sizeof(float); }
size_t ref_dkdv_smem(const AttentionShape& s) {
  return static_cast<size_t>(2 * s.d + 2 * (s.hq / s.hkv) * s.tq + kSmemSlack) * sizeof(float);
}

template <typename T>
cudaError_t ref_forward(void* out, float* lse, const void* q, const void* k, const void* v, const AttentionShape& s,
                        float scale, cudaStream_t stream) {
  const size_t smem = ref_forward_smem(s);
  if (cudaError_t e = allow_smem(ref_forward_kernel<T>, smem); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(s.tq), static_cast<unsigned>(s.hq), static_cast<unsigned>(s.batch));
  ref_forward_kernel<T><<<grid, kThreads, smem, stream>>>(static_cast<T*>(out), lse, static_cast<const T*>(q),
                                                          static_cast<const T*>(k), static_cast<const T*>(v), s,
                                                          scale);
  return cudaGetLastError();
}

template <typename T>
cudaError_t ref_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k, const void* v,
                         const float* lse, const float* delta, const AttentionShape& s, float scale,
                         cudaStream_t stream) {
  const int64_t t = s.tq;
  const size_t smem_q = ref_dq_smem(s), smem_kv = ref_dkdv_smem(s);
  if (cudaError_t e = allow_smem(ref_dq_kernel<T>, smem_q); e != cudaSuccess) return e;
  if (cudaError_t e = allow_smem(ref_dkdv_kernel<T>, smem_kv); e != cudaSuccess) return e;
  const dim3 grid_q(static_cast<unsigned>(t), static_cast<unsigned>(s.hq), static_cast<unsigned>(s.batch));
  ref_dq_kernel<T><<<grid_q, kThreads, smem_q, stream>>>(static_cast<T*>(dq), static_cast<const T*>(dout),
                                                         static_cast<const T*>(q), static_cast<const T*>(k),
                                                         static_cast<const T*>(v), lse, delta, s, scale);
  const dim3 grid_kv(static_cast<unsigned>(t), static_cast<unsigned>(s.hkv), static_cast<unsigned>(s.batch));
  ref_dkdv_kernel<T><<<grid_kv, kThreads, smem_kv, stream>>>(
      static_cast<T*>(dk), static_cast<T*>(dv), static_cast<const T*>(dout), static_cast<const T*>(q),
      static_cast<const T*>(k), static_cast<const T*>(v), lse, delta, s, scale);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_delta(float* delta, const void* dout, const void* out, const AttentionShape& s,
                         cudaStream_t stream) {
  const int64_t rows = s.batch * s.tq * s.hq;
  constexpr int kWarps = 8;
  delta_kernel<T><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(
      delta, static_cast<const T*>(dout), static_cast<const T*>(out), rows, s.tq, s.hq, s.d);
  return cudaGetLastError();
}

}  // namespace

#if !NANODDP_HAVE_HOPPER_ATTENTION
// A build without sm_90a code has no Hopper kernel (src/ops/cuda/CMakeLists.txt).
std::string hopper_attention_unavailable(int) {
  return "this build has no sm_90a code (configure with CMAKE_CUDA_ARCHITECTURES naming 90)";
}
cudaError_t launch_hopper_forward(DType, void*, float*, const void*, const void*, const void*, const AttentionShape&,
                                  float, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t launch_hopper_backward(DType, void*, void*, void*, const void*, const void*, const void*, const void*,
                                   const float*, const float*, const AttentionShape&, float, cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

size_t reference_attention_smem_bytes(const AttentionShape& s, bool backward) {
  return backward ? std::max(ref_dq_smem(s), ref_dkdv_smem(s)) : ref_forward_smem(s);
}

bool attention_uses_flash(DType t, const AttentionShape& s, const void* const* ptrs, int nptrs, bool reference_only) {
  if (reference_only || t == DType::F32 || !flash_supports_head_dim(s.d)) return false;
  for (int i = 0; i < nptrs; i++)
    if (!aligned(ptrs[i], 16)) return false;
  return true;
}

cudaError_t launch_attention_forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                                     const AttentionShape& s, float scale, bool reference_only, cudaStream_t stream) {
  if (s.batch * s.tq * s.hq == 0) return cudaSuccess;
  const void* ptrs[] = {out, q, k, v};
  if (attention_uses_flash(t, s, ptrs, 4, reference_only))
    return launch_flash_forward(t, out, lse, q, k, v, s, scale, stream);
  return with_dtype(t, [&](auto* tag) {
    return ref_forward<std::remove_pointer_t<decltype(tag)>>(out, lse, q, k, v, s, scale, stream);
  });
}

size_t attention_backward_scratch_bytes(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.hq * s.tq) * sizeof(float);
}

cudaError_t launch_attention_backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                      const void* k, const void* v, const void* out, const float* lse,
                                      const AttentionShape& s, float scale, void* scratch, bool reference_only,
                                      cudaStream_t stream, bool hopper) {
  if (s.batch * s.tq * s.hq == 0) return cudaSuccess;
  float* delta = static_cast<float*>(scratch);
  cudaError_t e = with_dtype(
      t, [&](auto* tag) { return launch_delta<std::remove_pointer_t<decltype(tag)>>(delta, dout, out, s, stream); });
  if (e != cudaSuccess) return e;
  const void* ptrs[] = {dq, dk, dv, dout, q, k, v};
  if (hopper && attention_uses_flash(t, s, ptrs, 7, reference_only))
    return launch_hopper_backward(t, dq, dk, dv, dout, q, k, v, lse, delta, s, scale, stream);
  if (attention_uses_flash(t, s, ptrs, 7, reference_only))
    return launch_flash_backward(t, dq, dk, dv, dout, q, k, v, lse, delta, s, scale, stream);
  return with_dtype(t, [&](auto* tag) {
    return ref_backward<std::remove_pointer_t<decltype(tag)>>(dq, dk, dv, dout, q, k, v, lse, delta, s, scale,
                                                              stream);
  });
}

}  // namespace nanoddp::cuda
