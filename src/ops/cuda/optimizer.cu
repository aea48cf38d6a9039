// AdamW and Muon momentum: one thread per element (four with 16-byte accesses when aligned),
// reading and writing each state buffer once.
#include "ops/cuda/common.cuh"
#include "ops/cuda/optimizer.cuh"

namespace nanoddp::cuda {

namespace {

// torch.optim.AdamW's order of operations (as the CPU kernel): decay, moments, then the step.
__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  m = m * s.beta1 + (1.f - s.beta1) * g;
  v = v * s.beta2 + (1.f - s.beta2) * g * g;
  p = p * s.decay - s.step_size * m / (sqrtf(v) / s.bc2_sqrt + s.eps);
}

template <int V>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamWScalars s) {
  const int64_t packs = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < packs; i += stride) {
    Pack<float, V> pp = load_pack<float, V>(p + i * V), gg = load_pack<float, V>(g + i * V);
    Pack<float, V> mm = load_pack<float, V>(m + i * V), vv = load_pack<float, V>(v + i * V);
#pragma unroll
    for (int j = 0; j < V; j++) adamw_one(pp.v[j], gg.v[j], mm.v[j], vv.v[j], s);
    store_pack<float, V>(p + i * V, pp);
    store_pack<float, V>(m + i * V, mm);
    store_pack<float, V>(v + i * V, vv);
  }
  const int64_t i = packs * V + tid;
  if (i < n) adamw_one(p[i], g[i], m[i], v[i], s);
}

// torch.lerp: a + w (b - a) for w < 0.5, else b - (b - a)(1 - w). Written with explicitly
// rounded operations so that nvcc does not contract them into FMAs: the result is then the one
// the CPU kernel computes, bit for bit.
__device__ __forceinline__ float torch_lerp(float a, float b, float w) {
  const float d = __fsub_rn(b, a);
  return w < 0.5f ? __fadd_rn(a, __fmul_rn(w, d)) : __fsub_rn(b, __fmul_rn(d, __fsub_rn(1.f, w)));
}

template <int V>
__global__ void muon_momentum_kernel(float* g, float* buf, int64_t n, float w_buf, float momentum) {
  const int64_t packs = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < packs; i += stride) {
    Pack<float, V> gg = load_pack<float, V>(g + i * V), bb = load_pack<float, V>(buf + i * V);
#pragma unroll
    for (int j = 0; j < V; j++) {
      bb.v[j] = torch_lerp(bb.v[j], gg.v[j], w_buf);
      gg.v[j] = torch_lerp(gg.v[j], bb.v[j], momentum);
    }
    store_pack<float, V>(g + i * V, gg);
    store_pack<float, V>(buf + i * V, bb);
  }
  const int64_t i = packs * V + tid;
  if (i < n) {
    buf[i] = torch_lerp(buf[i], g[i], w_buf);
    g[i] = torch_lerp(g[i], buf[i], momentum);
  }
}

}  // namespace

cudaError_t launch_adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  if (aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16))
    adamw_kernel<4><<<grid_for(n / 4 + 1, kThreads, 8192), kThreads, 0, stream>>>(p, g, m, v, n, s);
  else
    adamw_kernel<1><<<grid_for(n, kThreads, 8192), kThreads, 0, stream>>>(p, g, m, v, n, s);
  return cudaGetLastError();
}

cudaError_t launch_muon_momentum(float* g, float* buf, int64_t n, float momentum, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const float w_buf = 1.f - momentum;  // the CPU kernel's weight for buf, rounded the same way
  if (aligned(g, 16) && aligned(buf, 16))
    muon_momentum_kernel<4><<<grid_for(n / 4 + 1, kThreads, 8192), kThreads, 0, stream>>>(g, buf, n, w_buf,
                                                                                           momentum);
  else
    muon_momentum_kernel<1><<<grid_for(n, kThreads, 8192), kThreads, 0, stream>>>(g, buf, n, w_buf, momentum);
  return cudaGetLastError();
}

namespace {

constexpr int kSumThreads = 256;

__global__ void sum_squares_partial_kernel(const float* x, int64_t n, float* partials) {
  __shared__ float shared[kSumThreads];
  float s = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s = fmaf(x[i], x[i], s);
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

__global__ void sum_squares_final_kernel(const float* partials, int count, float* out) {
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int i = 0; i < count; i++) s += partials[i];
  out[0] = static_cast<float>(s);
}

}  // namespace

cudaError_t launch_sum_squares(float* out, const float* x, int64_t n, float* partials, cudaStream_t stream) {
  sum_squares_partial_kernel<<<kSumSquaresBlocks, kSumThreads, 0, stream>>>(x, n, partials);
  sum_squares_final_kernel<<<1, 32, 0, stream>>>(partials, kSumSquaresBlocks, out);
  return cudaGetLastError();
}

// NorMuon (ops.h normuon_update), in the CPU kernel's order of operations: mean squares along the
// reduced dim summed in double, one block for the step sizes and the two norms (a fixed sum order,
// so reproducible), then one thread per element for the cautious update.
namespace {

constexpr int kNorMuonThreads = 256;

// u[r] = mean over columns of g[r, :]^2: a block per row.
__global__ void normuon_row_squares_kernel(float* u, const float* g, int64_t rows, int64_t cols) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double acc = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const double x = g[r * cols + c];
      acc += x * x;
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) u[r] = static_cast<float>(acc / double(cols));
  }
}

// u[c] = mean over rows of g[:, c]^2: a thread per column, rows in order (coalesced across threads).
__global__ void normuon_col_squares_kernel(float* u, const float* g, int64_t rows, int64_t cols) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0;
    for (int64_t r = 0; r < rows; r++) {
      const double x = g[r * cols + c];
      acc += x * x;
    }
    u[c] = static_cast<float>(acc / double(rows));
  }
}

// One block: v = lerp(v, u, 1 - beta2); scale = rsqrt(max(v, 1e-10)) * ||g|| / max(||g'||, 1e-10).
__global__ void normuon_scales_kernel(float* scale, const float* u, float* v, int64_t k, int64_t red, float beta2) {
  __shared__ double scratch[32];
  double norm_sq = 0, new_sq = 0;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    norm_sq += u[i];
    const float vi = torch_lerp(v[i], u[i], __fsub_rn(1.f, beta2));
    v[i] = vi;
    const float step = __fdiv_rn(1.f, __fsqrt_rn(fmaxf(vi, 1e-10f)));
    scale[i] = step;
    new_sq += double(__fmul_rn(u[i], float(red))) * double(__fmul_rn(step, step));
  }
  norm_sq = block_sum(norm_sq, scratch);
  new_sq = block_sum(new_sq, scratch);
  const float norm = static_cast<float>(sqrt(norm_sq * double(red)));
  const float ratio = __fdiv_rn(norm, fmaxf(static_cast<float>(sqrt(new_sq)), 1e-10f));
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) scale[i] = __fmul_rn(scale[i], ratio);
}

// p -= lr g' + lr wd p [g' p >= 0], g' = g scale[row or column].
__global__ void normuon_apply_kernel(float* p, const float* g, const float* scale, int64_t rows, int64_t cols,
                                     bool per_row, float lr, float lr_wd) {
  const int64_t n = rows * cols, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = __fmul_rn(g[i], scale[per_row ? i / cols : i % cols]);
    const float decay = __fmul_rn(gi, p[i]) >= 0.f ? __fmul_rn(lr_wd, p[i]) : 0.f;
    p[i] = __fsub_rn(p[i], __fadd_rn(__fmul_rn(lr, gi), decay));
  }
}

}  // namespace

cudaError_t launch_normuon_update(float* p, const float* g, float* v, int64_t rows, int64_t cols, float lr,
                                  float weight_decay, float beta2, float* scratch, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  const bool per_row = rows >= cols;
  const int64_t k = per_row ? rows : cols, red = per_row ? cols : rows;
  float *u = scratch, *scale = scratch + k;
  if (per_row)
    normuon_row_squares_kernel<<<grid_for(rows, 1), kNorMuonThreads, 0, stream>>>(u, g, rows, cols);
  else
    normuon_col_squares_kernel<<<grid_for(cols, kNorMuonThreads), kNorMuonThreads, 0, stream>>>(u, g, rows, cols);
  normuon_scales_kernel<<<1, 1024, 0, stream>>>(scale, u, v, k, red, beta2);
  normuon_apply_kernel<<<grid_for(rows * cols, kNorMuonThreads), kNorMuonThreads, 0, stream>>>(
      p, g, scale, rows, cols, per_row, lr, lr * weight_decay);
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
