// Sampling one id per row, one block per row and one thread per chunk of the draw order (Note
// [sampling on the device] in ops/sample_math.h), so that the id is the CPU twin's
// (ops/cpu/sample.cpp). Per row:
//  1. the capped logits z into scratch, and their largest (lowest id among equals): greedy ends here;
//  2. with top_k, the k-th largest value t by a binary search over the 32 bits of an order-keeping
//     key (each step counts the z at or above a candidate: 33 passes of integer counts, exact in
//     any order), and need = k - #(z > t) ties at t to keep;
//  3. each thread's tie count, their exclusive prefix (the ranks in draw order), and each chunk's
//     sum of weights in double, in id order;
//  4. thread 0 adds the chunk sums in chunk order and walks to the drawn id, as the CPU does.
// A row of 65,536 logits is 256 KB of f32 scratch, read again by each pass from L2. The logits
// are not copied to the host: only the ids are, by the caller.
#include <climits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/sample.cuh"
#include "ops/sample_math.h"

namespace nanoddp::cuda {

namespace {

using namespace ops::sampling;

constexpr int kThreads = kChunks;

// Floats to unsigned keys in the same order (no NaN; -0 was made +0 by capped()).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Sum of one count per thread; every thread gets it. Integer: exact whatever the order.
__device__ __forceinline__ long long block_count(long long x, long long* scratch) {
  __syncthreads();  // scratch may still be read by a previous call
  scratch[threadIdx.x] = x;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  return scratch[0];
}

// The largest value (lowest id among equals) over the block: (value, id) of thread 0's slot.
__device__ __forceinline__ void block_argmax(float& v, int64_t& id, float* sv, int64_t* si) {
  sv[threadIdx.x] = v;
  si[threadIdx.x] = id;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = sv[threadIdx.x + s];
      const int64_t oi = si[threadIdx.x + s];
      if (ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  v = sv[0];
  id = si[0];
}

struct Shared {
  double sums[kThreads];     // each chunk's sum of weights
  long long counts[kThreads];  // block_count's scratch
  long long tie_start[kThreads];
  float best[kThreads];
  int64_t best_id[kThreads];
};

// Step 2: the k-th largest value of z [vocab] and how many ties at it are kept.
__device__ void top_k_threshold(const float* z, const SampleArgs& a, Shared& sh, float& t, long long& need) {
  uint32_t key = 0;
  for (int bit = 31; bit >= 0; bit--) {
    const uint32_t cand = key | (1u << bit);
    long long n = 0;
    for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) n += order_key(z[j]) >= cand ? 1 : 0;
    if (block_count(n, sh.counts) >= a.top_k) key = cand;
  }
  t = key_value(key);
  long long above = 0;
  for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) above += z[j] > t ? 1 : 0;
  need = a.top_k - block_count(above, sh.counts);
}

// Step 4, thread 0: the drawn id, walking the chunks and then the chosen chunk in draw order.
__device__ int64_t draw(const float* z, const SampleArgs& a, const Shared& sh, bool all, float t, long long need,
                        float mx, float u, int64_t fallback) {
  double total = 0;
  for (int c = 0; c < kThreads; c++) total = dadd(total, sh.sums[c]);
  const double target = dmul(static_cast<double>(u), total);
  double run = 0;
  for (int c = 0; c < kThreads; c++) {
    const double next = dadd(run, sh.sums[c]);
    if (!(target < next)) {
      run = next;
      continue;
    }
    double r = dsub(target, run);
    long long rank = sh.tie_start[c];
    int64_t last = -1;
    for (int64_t j = c; j < a.vocab; j += kThreads) {
      const bool tie = !all && z[j] == t;
      const bool keep = kept(all, z[j], t, rank, need);
      rank += tie ? 1 : 0;
      if (!keep) continue;
      last = j;
      r = dsub(r, static_cast<double>(weight(z[j], mx, a.temperature)));
      if (r < 0) return j;
    }
    return last;
  }
  return fallback;
}

template <typename T>
__global__ void sample_kernel(int32_t* ids, const T* logits, const float* uniforms, float* zbuf, SampleArgs a) {
  __shared__ Shared sh;
  const int64_t row = blockIdx.x;
  const T* l = logits + row * a.vpad;
  float* z = zbuf + row * a.vocab;
  // 1. capped logits and their largest
  float mx = -INFINITY;
  int64_t arg = LLONG_MAX;
  for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) {
    const float v = capped(to_f32(l[j]), a.softcap);
    z[j] = v;
    if (v > mx || (v == mx && j < arg)) mx = v, arg = j;
  }
  block_argmax(mx, arg, sh.best, sh.best_id);
  if (a.temperature <= 0.f) {
    if (threadIdx.x == 0) ids[row] = static_cast<int32_t>(arg == LLONG_MAX ? 0 : arg);  // all NaN: 0
    return;
  }
  // 2. the top-k threshold (the global writes of step 1 are seen: block_count's barriers)
  const bool all = a.top_k <= 0 || a.top_k >= a.vocab;
  float t = -INFINITY;
  long long need = 0;
  if (!all) top_k_threshold(z, a, sh, t, need);
  __syncthreads();
  // 3. tie ranks and chunk sums
  long long ties = 0;
  if (!all)
    for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) ties += z[j] == t ? 1 : 0;
  sh.tie_start[threadIdx.x] = ties;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long run = 0;
    for (int c = 0; c < kThreads; c++) {
      const long long n = sh.tie_start[c];
      sh.tie_start[c] = run;
      run += n;
    }
  }
  __syncthreads();
  long long rank = sh.tie_start[threadIdx.x];
  double s = 0;
  for (int64_t j = threadIdx.x; j < a.vocab; j += kThreads) {
    const bool tie = !all && z[j] == t;
    if (kept(all, z[j], t, rank, need)) s = dadd(s, static_cast<double>(weight(z[j], mx, a.temperature)));
    rank += tie ? 1 : 0;
  }
  sh.sums[threadIdx.x] = s;
  __syncthreads();
  // 4. the draw
  if (threadIdx.x == 0) ids[row] = static_cast<int32_t>(draw(z, a, sh, all, t, need, mx, uniforms[row], arg));
}

}  // namespace

cudaError_t launch_sample_tokens(DType t, int32_t* ids, const void* logits, const float* uniforms, float* z,
                                 const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  return with_dtype(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    sample_kernel<T><<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(ids, static_cast<const T*>(logits),
                                                                             uniforms, z, a);
    return cudaGetLastError();
  });
}

}  // namespace nanoddp::cuda
