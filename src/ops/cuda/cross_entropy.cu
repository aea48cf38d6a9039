// Soft-capped cross-entropy, one block per row, two passes over the row and no stored
// probabilities.
//
// Every capped logit z = cap tanh(l / cap) lies in [-cap, cap], so exp(z - cap) can neither
// overflow nor underflow to zero over any realistic vocabulary (e^-2cap = e^-30 for cap 15):
// the softmax needs no running maximum, and the first pass is a single sum
//   S = sum_j exp(z_j - cap),  lse = cap + log S,  loss = lse - z_target.
// The second pass (training) recomputes z and writes, in place of the logits,
//   dl_j = grad_scale (exp(z_j - cap) / S - [j == target]) (1 - (z_j / cap)^2),
// with 0 in the padding columns [vocab, vpad). A row is 128 KB at vocab 65,536 in bf16, so the
// second read is mostly served by L2. Math in f32 whatever the logits' type.
#include "ops/cuda/common.cuh"
#include "ops/cuda/cross_entropy.cuh"
#include "ops/cuda/error_record.cuh"

#include <type_traits>

namespace nanoddp::cuda {

namespace {

constexpr int kThreads = 512;

struct Row {
  float cap, inv_cap, grad_scale;
  int64_t vocab, vpad;
};

template <typename T, int V>
__global__ void softcap_ce_kernel(float* losses, T* logits, const int32_t* targets, Row r, ErrorSink err) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  T* l = logits + row * r.vpad;
  int32_t target = targets[row];
  if (target != -1 && (target < 0 || target >= r.vocab)) {
    if (threadIdx.x == 0) report_error(err, kTargetOutOfRange, row, target, r.vocab);
    target = -1;
  }
  const bool train = r.grad_scale != 0.f;
  if (target < 0) {  // ignored row: no loss, no gradient
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (train)
      for (int64_t j = threadIdx.x; j < r.vpad; j += blockDim.x) l[j] = from_f32<T>(0.f);
    return;
  }
  // Read before pass 2 overwrites the row (block_sum's barriers separate the passes).
  const float z_target = threadIdx.x == 0 ? r.cap * tanhf(to_f32(l[target]) * r.inv_cap) : 0.f;

  // Pass 1: S = sum over the vocabulary of exp(z - cap).
  float sum = 0.f;
  for (int64_t j = int64_t(threadIdx.x) * V; j < r.vpad; j += int64_t(blockDim.x) * V) {
    const Pack<T, V> p = load_pack<T, V>(l + j);
#pragma unroll
    for (int u = 0; u < V; u++) {
      if (j + u < r.vocab) sum += __expf(r.cap * tanhf(to_f32(p.v[u]) * r.inv_cap) - r.cap);
    }
  }
  sum = block_sum(sum, scratch);
  const float lse = r.cap + logf(sum);
  if (threadIdx.x == 0) losses[row] = lse - z_target;
  if (!train) return;

  // Pass 2: the gradient over the logits, in place. Each element is read and written by the same
  // thread, and the target logit was read before the barrier above.
  const float inv_sum = 1.f / sum;
  for (int64_t j = int64_t(threadIdx.x) * V; j < r.vpad; j += int64_t(blockDim.x) * V) {
    Pack<T, V> p = load_pack<T, V>(l + j);
#pragma unroll
    for (int u = 0; u < V; u++) {
      float g = 0.f;
      if (j + u < r.vocab) {
        const float z = r.cap * tanhf(to_f32(p.v[u]) * r.inv_cap), t = z * r.inv_cap;
        const float prob = __expf(z - r.cap) * inv_sum;
        g = r.grad_scale * (prob - (j + u == target ? 1.f : 0.f)) * (1.f - t * t);
      }
      p.v[u] = from_f32<T>(g);
    }
    store_pack<T, V>(l + j, p);
  }
}

}  // namespace

cudaError_t launch_softcap_cross_entropy(DType t, float* losses, void* logits, const int32_t* targets, int64_t n,
                                         int64_t vpad, int64_t vocab, float softcap, float grad_scale,
                                         ErrorSink err, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const Row r{softcap, 1.f / softcap, grad_scale, vocab, vpad};
  auto go = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    constexpr int V = kVec16<T>;
    T* l = static_cast<T*>(logits);
    if (vpad % V == 0 && aligned(l, 16))
      softcap_ce_kernel<T, V><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(losses, l, targets, r, err);
    else
      softcap_ce_kernel<T, 1><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(losses, l, targets, r, err);
  };
  with_dtype(t, go);
  return cudaGetLastError();
}

}  // namespace nanoddp::cuda
