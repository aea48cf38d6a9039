// Note [sampling on the device]
// The arithmetic of ops::sample_tokens, shared by its CPU kernel (ops/cpu/sample.cpp) and its CUDA
// kernel (ops/cuda/sample.cu), so that both pick the same id from the same logits and uniform:
//   z_j = cap tanh(l_j / cap)  (l_j itself when cap <= 0), -0 made +0;
//   greedy (temperature <= 0): the largest z, the lowest id among equals;
//   else the kept ids: all, or with top_k the k largest z, where the ties at the k-th value are
//   kept in draw order (below) until there are k;
//   w_j = exp((z_j - max z) / temperature) for kept ids, 0 for the others;
//   draw order: the vocabulary in kChunks chunks, chunk c = ids c, c + kChunks, c + 2 kChunks, ...
//   (on the GPU one thread a chunk, its reads coalesced); chunk sums s_c = the w of chunk c added
//   in id order in double; total = the s_c added in chunk order; target = u * total; the chosen
//   chunk is the first whose running sum passes target, and in it the first id whose w, taken
//   off target - (the sums before it), leaves a negative remainder.
// Every operation is one IEEE operation with round-to-nearest (the __f*_rn intrinsics on the
// device; on the host the file that includes this is built with -ffp-contract=off, so no multiply
// and add are fused), and exp and tanh are our own from those operations and fma (which is exact
// on both), not the libraries' (glibc's and CUDA's differ in the last bits). So the same inputs
// give the same bits and the same id on both: the kernel test compares them exactly.
#pragma once

#include <math.h>

#include <cstdint>

// static: each file has its own copy, compiled with that file's flags (a shared inline copy could
// be one compiled with contraction).
#if defined(__CUDACC__)
#define NANODDP_HD static __host__ __device__ __forceinline__
#else
#define NANODDP_HD static inline
#endif

namespace nanoddp::ops::sampling {

// Chunks of the draw order; the CUDA kernel runs one thread per chunk.
constexpr int kChunks = 256;

#if defined(__CUDA_ARCH__)
NANODDP_HD float add(float a, float b) { return __fadd_rn(a, b); }
NANODDP_HD float sub(float a, float b) { return __fsub_rn(a, b); }
NANODDP_HD float mul(float a, float b) { return __fmul_rn(a, b); }
NANODDP_HD float div(float a, float b) { return __fdiv_rn(a, b); }
NANODDP_HD double dadd(double a, double b) { return __dadd_rn(a, b); }
NANODDP_HD double dsub(double a, double b) { return __dsub_rn(a, b); }
NANODDP_HD double dmul(double a, double b) { return __dmul_rn(a, b); }
#else
NANODDP_HD float add(float a, float b) { return a + b; }
NANODDP_HD float sub(float a, float b) { return a - b; }
NANODDP_HD float mul(float a, float b) { return a * b; }
NANODDP_HD float div(float a, float b) { return a / b; }
NANODDP_HD double dadd(double a, double b) { return a + b; }
NANODDP_HD double dsub(double a, double b) { return a - b; }
NANODDP_HD double dmul(double a, double b) { return a * b; }
#endif

// e^x within 2 units in the last place: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so
// that n ln2 is exact), e^r by its Taylor polynomial to r^7 (error under 1e-8), times 2^n.
// 0 below -87 (under float's normal range), inf above 88.
NANODDP_HD float portable_exp(float x) {
  if (x != x) return x;
  if (x < -87.f) return 0.f;
  if (x > 88.f) return INFINITY;
  const float n = floorf(fmaf(x, 1.44269504f, 0.5f));
  float r = fmaf(n, -0.693145751953125f, x);  // ln2's high part: 16 bits, so n * it is exact
  r = fmaf(n, -1.42860677e-06f, r);           // ln2's low part
  float p = 1.98412698e-04f;                  // 1/7!
  p = fmaf(p, r, 1.38888889e-03f);
  p = fmaf(p, r, 8.33333333e-03f);
  p = fmaf(p, r, 4.16666667e-02f);
  p = fmaf(p, r, 1.66666667e-01f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.f);
  p = fmaf(p, r, 1.f);
  return ldexpf(p, static_cast<int>(n));
}

// tanh x = (1 - e^-2|x|) / (1 + e^-2|x|), with x's sign. Near 0 the subtraction loses relative
// digits (absolute error about 1e-7), which moves a soft-capped logit by about cap * 1e-7: far
// below what changes a sampling probability.
NANODDP_HD float portable_tanh(float x) {
  const float t = portable_exp(mul(-2.f, fabsf(x)));
  return copysignf(div(sub(1.f, t), add(1.f, t)), x);
}

// The soft-capped logit (cap <= 0: none), with -0 made +0 so that equal values compare and order
// alike everywhere.
NANODDP_HD float capped(float logit, float cap) {
  const float z = cap > 0.f ? mul(cap, portable_tanh(div(logit, cap))) : logit;
  return add(z, 0.f);
}

// The weight of a kept id: exp((z - max z) / temperature), in [0, 1].
NANODDP_HD float weight(float z, float max_z, float temperature) {
  return portable_exp(div(sub(z, max_z), temperature));
}

// Whether id j with value z is kept: all of them, or those above the k-th value t, or a tie at t
// whose rank among the ties (in draw order) is below `need`.
NANODDP_HD bool kept(bool all, float z, float t, int64_t tie_rank, int64_t need) {
  return all || z > t || (z == t && tie_rank < need);
}

}  // namespace nanoddp::ops::sampling
