// Flash attention on the tensor cores (bf16 or f16 in, f32 accumulate), forward and backward,
// causal, grouped-query heads, head_dim a multiple of 8 from 64 to 128 (FlashAttention-2's
// algorithm, re-derived here).
// The kernels are templates over the 16-bit storage type T; only the MMA instruction and the
// rounding of register products (P, dS) back to T differ between bf16 and f16.
//
// Head sizes: each kernel is compiled for a compute width HD of 64, 96 or 128 columns (a multiple of
// the MMA's k of 16) and runs any head_dim d <= HD that is a multiple of 8 (one 16-byte cp.async
// chunk): columns [d, HD) of the shared tiles are zero-filled by cp.async, add nothing to Q K^T
// or dO V^T, give zero columns in P V and the gradients, and are never stored. The odd depths of
// nanochat's sizing give head_dim 96, 112 and 120 (model_dim 64 * depth in heads of about 128).
//
// Tiles: the forward and dq kernels run blocks of 4 warps, each warp owning 32 query rows (two
// 16-row m-tiles, Note [two m-tiles per warp]); the dk/dv kernel runs 8 warps on 128 keys (Note
// [dk/dv in two phases]). All compute with mma.sync.m16n8k16 (T x T -> f32).
// Operands come from shared memory through ldmatrix; rows are padded by 16 bytes so the 8 rows an
// ldmatrix reads fall in distinct banks. Global tiles are copied with cp.async (16 bytes per
// thread, zero-filled past the end), overlapping the next tile's load with the current tile's math.
//
// Forward (per block: 128 queries of one head): for each 64-key tile up to the causal limit,
// S = Q K^T, masked and scaled by scale * log2(e); online softmax in base 2 (running row max m
// and sum l, the output rescaled by 2^(m_old - m_new)); O += P V with P rounded to T. At the
// end O /= l and lse = (m + log2 l) ln 2, the natural log-sum-exp of the scaled scores.
//
// Sliding window (Note [flash tiles in a window]): a block starts at the first key tile its oldest
// query sees, a warp skips a tile none of its rows sees a key of, and the mask keeps columns in
// [first, last] per row instead of [0, last].
//
// Backward, deterministic (see Note [deterministic attention backward] below): two kernels that
// each own their outputs, so nothing is added with atomics:
//  - dk/dv: a block per 128 keys of one kv head loops over every query head of its group and every
//    64-query tile at or after the diagonal: S^T = K Q^T, dP^T = V dO^T,
//    P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q.
//  - dq: a block per 128 queries of one head loops over the 32-key tiles up to the diagonal:
//    S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
// Note [deterministic attention backward]: FlashAttention-2 computes dq in the dk/dv loop and
// adds it with atomics, whose order varies run to run. Recomputing S and dP in a separate dq
// kernel costs 7 instead of 5 tile GEMMs per backward, and makes the backward bitwise
// reproducible.
#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/attention_flash_common.cuh"

#include <type_traits>

#include "ops/cuda/common.cuh"

namespace nanoddp::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kPad = 8;        // 16-bit elements of padding per shared-memory row
using namespace flash;  // the helpers of attention_flash_common.cuh

// ---- PTX wrappers ------------------------------------------------------------------------------
// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. The address is a
// shared-memory one (smem_addr): the helpers below compute a lane's address once per tile and add
// compile-time offsets, which ptxas folds into the instruction instead of keeping an address
// register per fragment.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d[16x8] += a[16x16] b[16x8], T operands (bf16 or f16), f32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, f16_t>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, bf16_t>, "the flash kernels take bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ldmatrix row addresses inside a shared tile with row stride SD (elements):
//  - a_frag: A operand (rows r0.., cols c0..), row-major storage [m][k];
//  - b_frag: B operand of two n-tiles from storage [n][k] (rows n0.., cols k0..);
//  - bt_frag: B operand of two n-tiles from storage [k][n] (rows k0.., cols n0..), with .trans.
template <int SD, typename T>
__device__ __forceinline__ const T* a_frag(const T* tile, int r0, int c0, int lane) {
  return tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * SD + c0 + (lane >> 4) * 8;
}
template <int SD, typename T>
__device__ __forceinline__ const T* b_frag(const T* tile, int n0, int k0, int lane) {
  return tile + (n0 + (lane & 7) + (lane >> 4) * 8) * SD + k0 + ((lane >> 3) & 1) * 8;
}
template <int SD, typename T>
__device__ __forceinline__ const T* bt_frag(const T* tile, int k0, int n0, int lane) {
  return tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * SD + n0 + (lane >> 4) * 8;
}

// acc[ms] += C[ms] B for one warp and each of its MS 16-row m-tiles, where C[ms] is a product the
// warp holds in registers (N8 n-tiles of 8, fed back as T A fragments: P in O += P V, dS in
// dQ += dS K) and B rows [0, 8 N8) x columns [0, 8 D8) of a [k][SD] shared tile, read transposed.
// Each B fragment read serves all MS m-tiles.
template <int SD, int MS, int N8, int D8, typename T>
__device__ __forceinline__ void warp_mma_registers_by_tile(float (&acc)[MS][D8][4], const float (&c)[MS][N8][4],
                                                           const T* tile, int lane) {
  const uint32_t base = smem_addr(bt_frag<SD>(tile, 0, 0, lane));
#pragma unroll
  for (int kk = 0; kk < N8 / 2; kk++) {
    uint32_t a[MS][4];
#pragma unroll
    for (int ms = 0; ms < MS; ms++) c_to_a<T>(a[ms], c[ms][2 * kk], c[ms][2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < D8 / 2; dp++) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, base + uint32_t((kk * 16 * SD + dp * 16) * sizeof(T)));
#pragma unroll
      for (int ms = 0; ms < MS; ms++) {
        mma<T>(acc[ms][2 * dp], a[ms], b[0], b[1]);
        mma<T>(acc[ms][2 * dp + 1], a[ms], b[2], b[3]);
      }
    }
  }
}

// acc[ms] += A_ms B' for one warp, where A_ms is rows [a_row + 16 ms, + 16) of an [m][SA] shared
// tile (the warp's MS m-tiles) over KSTEPS k-steps of 16 columns, and B' is either B^T for rows
// [b_at, b_at + 8 N8) of an [n][SB] shared tile B (kTransB false: S = Q K^T) or the columns
// [b_at, b_at + 8 N8) of a [k][SB] shared tile read transposed (kTransB true: dV += P^T dO). Each B
// fragment read serves all MS m-tiles.
template <bool kTransB, int SA, int SB, int KSTEPS, int MS, int N8, typename T>
__device__ __forceinline__ void warp_mma_rows(float (&acc)[MS][N8][4], const T* a, int a_row, const T* b, int b_at,
                                              int lane) {
  const uint32_t a_base = smem_addr(a_frag<SA>(a, a_row, 0, lane));
  const uint32_t b_base = smem_addr(kTransB ? bt_frag<SB>(b, 0, b_at, lane) : b_frag<SB>(b, b_at, 0, lane));
#pragma unroll
  for (int kk = 0; kk < KSTEPS; kk++) {
    uint32_t x[MS][4];
#pragma unroll
    for (int ms = 0; ms < MS; ms++) ldmatrix_x4(x[ms], a_base + uint32_t((ms * 16 * SA + kk * 16) * sizeof(T)));
#pragma unroll
    for (int np = 0; np < N8 / 2; np++) {
      uint32_t y[4];
      if constexpr (kTransB)
        ldmatrix_x4_trans(y, b_base + uint32_t((kk * 16 * SB + np * 16) * sizeof(T)));
      else
        ldmatrix_x4(y, b_base + uint32_t((np * 16 * SB + kk * 16) * sizeof(T)));
#pragma unroll
      for (int ms = 0; ms < MS; ms++) {
        mma<T>(acc[ms][2 * np], x[ms], y[0], y[1]);
        mma<T>(acc[ms][2 * np + 1], x[ms], y[2], y[3]);
      }
    }
  }
}

// Rows [r0, r0 + R) of a head's [rows, d] matrix (row stride `stride` elements) into a shared
// tile [R, HD + kPad]; rows at or past `limit`, and columns [d, HD), are zero-filled.
template <int R, int HD, int NThreads = kThreads, typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int64_t stride, int64_t r0, int64_t limit, int d) {
  constexpr int kChunksPerRow = HD / 8, kChunks = R * kChunksPerRow;
  for (int c = threadIdx.x; c < kChunks; c += NThreads) {
    const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const int64_t row = r0 + r;
    const bool valid = row < limit && col < d;
    cp_async_16(tile + r * (HD + kPad) + col, src + (valid ? row * stride + col : 0), valid);
  }
}

template <typename T>
struct FwdParams {
  const T *q, *k, *v;
  T* out;
  float* lse;
  int64_t tq, tk, hq, hkv, kv_len, q_pos0;
  int64_t group;
  int64_t window;  // kNoWindow for full causal attention (Note [flash tiles in a window])
  float scale_log2;
  int d;  // head_dim: the row length in memory, <= the kernel's HD
};

template <typename T>
struct BwdParams {
  const T *q, *k, *v, *dout;
  T *dq, *dk, *dv;
  const float *lse, *delta;
  int64_t t, hq, hkv, group;
  int64_t window;  // kNoWindow for full causal attention (Note [flash tiles in a window])
  float scale, scale_log2;
  int d;  // head_dim: the row length in memory, <= the kernel's HD
};

// ---- forward -----------------------------------------------------------------------------------
// Note [two m-tiles per warp]: a warp owning 16 query rows feeds each K or V fragment it reads
// from shared memory (an ldmatrix.x4, 512 bytes) to two m16n8k16 MMAs, and a multiprocessor's
// shared memory delivers 128 bytes a clock: the old 16-row forward issued 64 ldmatrix.x4 per 128
// MMAs per warp and key tile, the dq kernel 112 per 192, which points at shared memory as their
// bound (an estimate from counts; on the H200 the forward ran at about 180 TFLOP/s and the
// backward at 120). A warp owning 32 rows, two m-tiles, feeds each B fragment to four MMAs: the
// forward issues 80 per 256 and the dq kernel 80 per 192 (with 32-key tiles, which keep its
// registers under 255). The MMAs and their order are unchanged, so are the results. Near the
// diagonal a 128-query block has key tiles that some of its warps see no key of: those warps skip
// the tile (its terms would be exactly zero: P = 0 and the rescale factor 1), and a warp skips the
// mask on a tile every one of its rows sees whole. The dk/dv kernel gets the same reuse another
// way (Note [dk/dv in two phases]).
constexpr int kFwdM = 128, kFwdN = 64, kFwdWarpRows = kFwdM / 4;  // queries per block, keys per tile

template <int HD>
constexpr size_t fwd_smem_bytes() {
  return size_t(kFwdM + 2 * kFwdN) * (HD + kPad) * sizeof(uint16_t);
}

template <int HD, typename T>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(FwdParams<T> p) {
  constexpr int SD = HD + kPad, KSTEPS = HD / 16, DT = HD / 8, NT = kFwdN / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);  // [128 queries][SD]
  T* sK = sQ + kFwdM * SD;              // [64 keys][SD]
  T* sV = sK + kFwdN * SD;              // [64 keys][SD]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  // Heaviest (latest) query tiles first: causal rows near the end see the most keys.
  const int64_t m_tiles = (p.tq + kFwdM - 1) / kFwdM;
  const int64_t m0 = (m_tiles - 1 - blockIdx.x) * kFwdM, h = blockIdx.y, b = blockIdx.z, kh = h / p.group;
  const int64_t q_stride = p.hq * p.d, kv_stride = p.hkv * p.d;
  const int64_t q_off = (b * p.tq * p.hq + h) * p.d, kv_off = (b * p.tk * p.hkv + kh) * p.d;
  const int64_t keys = min(p.q_pos0 + min(m0 + kFwdM, p.tq), p.kv_len);  // seen by the last row
  const int n_tiles = static_cast<int>((keys + kFwdN - 1) / kFwdN);
  // The first tile holding a key the block's first row sees (Note [flash tiles in a window]).
  const int nt0 = static_cast<int>(max(int64_t{0}, p.q_pos0 + m0 - p.window) / kFwdN);

  load_tile<kFwdM, HD>(sQ, p.q + q_off, q_stride, m0, p.tq, p.d);
  load_tile<kFwdN, HD>(sK, p.k + kv_off, kv_stride, int64_t(nt0) * kFwdN, p.kv_len, p.d);
  cp_async_commit();

  // This warp's rows are w0 .. w0 + 31 (the thread's: w0 + 16 ms + g + 8 rr). Of the keys, its rows
  // before tq see at most warp_first ..= warp_last, and every one of its rows sees all_first ..= warp_all.
  const int64_t w0 = m0 + warp * kFwdWarpRows;
  const int64_t warp_last = w0 < p.tq ? min(p.q_pos0 + min(w0 + kFwdWarpRows, p.tq) - 1, p.kv_len - 1) : -1;
  const int64_t warp_all = p.q_pos0 + w0;  // below kv_len wherever warp_last >= 0
  const int64_t warp_first = warp_all - p.window, all_first = warp_all + kFwdWarpRows - 1 - p.window;
  float o[2][DT][4] = {};
  float row_max[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, row_sum[2][2] = {};

  for (int nt = nt0; nt < n_tiles; nt++) {
    const int64_t n0 = int64_t(nt) * kFwdN;
    // warp-uniform
    const bool active = n0 <= warp_last && n0 + kFwdN - 1 >= warp_first;
    const bool whole = n0 + kFwdN - 1 <= warp_all && n0 >= all_first;
    cp_async_wait<0>();
    __syncthreads();  // K[nt] landed; every warp is done with V[nt - 1]
    load_tile<kFwdN, HD>(sV, p.v + kv_off, kv_stride, n0, p.kv_len, p.d);
    cp_async_commit();

    // S = Q K^T for this warp's 32 rows and the tile's 64 keys.
    float s[2][NT][4] = {};
    if (active) warp_mma_rows<false, SD, SD, KSTEPS, 2, NT>(s, sQ, warp * kFwdWarpRows, sK, 0, lane);
    __syncthreads();  // every warp is done with K[nt]
    const bool more = nt + 1 < n_tiles;
    if (more) {
      load_tile<kFwdN, HD>(sK, p.k + kv_off, kv_stride, n0 + kFwdN, p.kv_len, p.d);
      cp_async_commit();
    }

    // Mask, scale to base 2, and fold the tile into the running max and sum of each row.
    if (active) {
#pragma unroll
      for (int ms = 0; ms < 2; ms++) {
        // Keys in the row's window, up to its position and before kv_len: columns first ..= last of
        // this tile.
        const int64_t pos_lo = p.q_pos0 + w0 + ms * 16 + g;
        const int first[2] = {tile_col(pos_lo - p.window, n0, kFwdN), tile_col(pos_lo + 8 - p.window, n0, kFwdN)};
        const int last[2] = {tile_col(min(pos_lo, p.kv_len - 1), n0, kFwdN),
                             tile_col(min(pos_lo + 8, p.kv_len - 1), n0, kFwdN)};
        if (whole)
          online_softmax<false>(s[ms], o[ms], row_max[ms], row_sum[ms], first, last, quad, p.scale_log2);
        else
          online_softmax<true>(s[ms], o[ms], row_max[ms], row_sum[ms], first, last, quad, p.scale_log2);
      }
    }

    if (more)
      cp_async_wait<1>();  // V[nt] landed; K[nt + 1] may still be in flight
    else
      cp_async_wait<0>();
    __syncthreads();
    // O += P V, P from the score registers.
    if (active) warp_mma_registers_by_tile<SD, 2, NT, DT>(o, s, sV, lane);
  }

#pragma unroll
  for (int ms = 0; ms < 2; ms++) {
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      float sum = row_sum[ms][rr];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int64_t row = w0 + ms * 16 + g + rr * 8;
      if (row < p.tq) {
        store_rows<HD>(p.out + q_off + row * q_stride, o[ms], rr, quad, 1.f / sum, p.d);
        if (quad == 0) p.lse[(b * p.hq + h) * p.tq + row] = (row_max[ms][rr] + log2f(sum)) * kLn2;
      }
    }
  }
}

// ---- backward: dk, dv --------------------------------------------------------------------------
// Note [dk/dv in two phases]: a block of 8 warps takes 128 keys and loops over 64-query tiles.
// Phase 1: warps in a 4 x 2 layout each compute S^T = K Q^T and dP^T = V dO^T for 32 keys x 32
// queries (two m-tiles sharing every Q and dO fragment), then P^T and dS^T, which they store to
// shared memory in T (the rounding the MMA operands get anyway). Phase 2: warps in a 4 x 2 layout
// over keys and head columns each add dV += P^T dO and dK += dS^T Q for 32 keys x HD/2 columns,
// reading P^T and dS^T back as A operands. Before, each of 4 warps owned 16 keys and every
// column, so its dK and dV accumulators (128 floats a thread at head_dim 128) left no registers for
// a second m-tile, and it read every Q and dO fragment for two MMAs: 80 ldmatrix.x4 per 128 MMAs
// per warp and 32-query tile. Now a warp issues 64 in phase 1 and 48 in phase 2 per 256 MMAs, plus
// stores of P^T and dS^T worth about 16 more (counted from the code; whether shared memory bounds
// this kernel is what the ncu stage is for). The 16-query chunks reach the accumulators in the same
// order as before, so the results are the same bits. A warp whose 32 keys all come after its 32
// queries (causal) skips phase 1's MMAs and stores zeros.
constexpr int kKvN = 128, kKvM = 64;         // keys per block, queries per inner tile
constexpr int kKvWarps = 8, kKvThreads = 32 * kKvWarps;
constexpr int kPS = kKvM + kPad;             // row stride of the P^T and dS^T tiles (elements)

template <int HD>
constexpr size_t dkdv_smem_bytes() {
  return (size_t(2 * kKvN + 4 * kKvM) * (HD + kPad) + size_t(2 * kKvN) * kPS) * sizeof(uint16_t) +
         4 * kKvM * sizeof(float);
}

template <int HD, typename T>
__global__ void __launch_bounds__(kKvThreads) flash_dkdv_kernel(BwdParams<T> p) {
  constexpr int SD = HD + kPad, KSTEPS = HD / 16, HALF = HD / 2, H8 = HALF / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);  // [128 keys][SD]
  T* sV = sK + kKvN * SD;              // [128 keys][SD]
  T* sQ = sV + kKvN * SD;              // [2 buffers][64 queries][SD]
  T* sO = sQ + 2 * kKvM * SD;          // [2][64][SD]: dout
  T* sP = sO + 2 * kKvM * SD;          // [128 keys][kPS]: P^T of the current query tile
  T* sS = sP + kKvN * kPS;             // [128 keys][kPS]: dS^T
  float* sL = reinterpret_cast<float*>(sS + kKvN * kPS);  // [2][64]: lse
  float* sD = sL + 2 * kKvM;                               // [2][64]: delta
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  // Both phases: keys wk * 32 .. + 32 of the block; phase 1 takes queries wh * 32 .. + 32 of the
  // tile, phase 2 head columns wh * HALF .. + HALF.
  const int wk = warp >> 1, wh = warp & 1;
  const int64_t n0 = int64_t(blockIdx.x) * kKvN, kh = blockIdx.y, b = blockIdx.z;
  const int64_t q_stride = p.hq * p.d, kv_stride = p.hkv * p.d, kv_off = (b * p.t * p.hkv + kh) * p.d;
  // Query tiles at or after the diagonal, up to the newest query that sees a key of the block, for
  // each query head of the group, in (head, tile) order.
  const int64_t m_first = n0 / kKvM, per_head = min(p.t - 1, n0 + kKvN - 1 + p.window) / kKvM + 1 - m_first;
  const int64_t count = p.group * per_head;

  // Tile (hg, mt): query head kh * group + hg, queries from (m_first + mt) * kKvM.
  auto issue = [&](int64_t hg, int64_t mt, int buf) {
    const int64_t h = kh * p.group + hg, m0 = (m_first + mt) * kKvM;
    const int64_t q_off = (b * p.t * p.hq + h) * p.d, stat = (b * p.hq + h) * p.t;
    load_tile<kKvM, HD, kKvThreads>(sQ + buf * kKvM * SD, p.q + q_off, q_stride, m0, p.t, p.d);
    load_tile<kKvM, HD, kKvThreads>(sO + buf * kKvM * SD, p.dout + q_off, q_stride, m0, p.t, p.d);
    const int i = threadIdx.x & (kKvM - 1);
    const int64_t row = m0 + i;
    const bool valid = row < p.t;
    if (threadIdx.x < kKvM)
      cp_async_4(sL + buf * kKvM + i, p.lse + stat + (valid ? row : 0), valid);
    else if (threadIdx.x < 2 * kKvM)
      cp_async_4(sD + buf * kKvM + i, p.delta + stat + (valid ? row : 0), valid);
  };
  load_tile<kKvN, HD, kKvThreads>(sK, p.k + kv_off, kv_stride, n0, p.t, p.d);
  load_tile<kKvN, HD, kKvThreads>(sV, p.v + kv_off, kv_stride, n0, p.t, p.d);
  issue(0, 0, 0);
  cp_async_commit();

  float dk[2][H8][4] = {}, dv[2][H8][4] = {};
  const int64_t key0 = n0 + wk * 32;  // this warp's first key; the thread's: key0 + 16 ms + g + 8 rr
  int64_t hg = 0, mt = 0;  // tile `it` in (head, tile) order, counted rather than divided out of it
  for (int64_t it = 0; it < count; it++) {
    const int buf = static_cast<int>(it & 1);
    const int64_t m0 = (m_first + mt) * kKvM;
    if (++mt == per_head) {  // (hg, mt) is now tile it + 1
      mt = 0;
      hg++;
    }
    cp_async_wait<0>();
    __syncthreads();  // tile `it` landed; every warp is done with tile it - 1 (its buffer, P^T, dS^T)
    if (it + 1 < count) {
      issue(hg, mt, buf ^ 1);
      cp_async_commit();
    }
    const T* q_s = sQ + buf * kKvM * SD;
    const T* o_s = sO + buf * kKvM * SD;
    const float* l_s = sL + buf * kKvM;
    const float* d_s = sD + buf * kKvM;

    // Phase 1. The causal band: key <= query <= key + window, query < t. A warp none of whose 32
    // keys any of its valid queries sees computes nothing and stores zeros.
    const int64_t q0 = m0 + wh * 32;
    const bool any = q0 < p.t && key0 <= min(q0 + 31, p.t - 1) && q0 <= key0 + 31 + p.window;
    float s[2][4][4] = {}, dp[2][4][4] = {};
    if (any) {
      warp_mma_rows<false, SD, SD, KSTEPS, 2, 4>(s, sK, wk * 32, q_s, wh * 32, lane);
      warp_mma_rows<false, SD, SD, KSTEPS, 2, 4>(dp, sV, wk * 32, o_s, wh * 32, lane);
    }
#pragma unroll
    for (int ms = 0; ms < 2; ms++) {
#pragma unroll
      for (int rr = 0; rr < 2; rr++) {
        const int kr = wk * 32 + ms * 16 + g + rr * 8;  // the key's row in the block's tiles
        const int first = tile_col(n0 + kr, m0, kKvM), last = tile_col(min(p.t - 1, n0 + kr + p.window), m0, kKvM);
#pragma unroll
        for (int j = 0; j < 4; j++) {
          float pv[2], ds[2];
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int qi = wh * 32 + j * 8 + quad * 2 + e;  // the query's column in the tile
            const bool valid = qi >= first && qi <= last;
            pv[e] = valid ? exp2f(s[ms][j][rr * 2 + e] * p.scale_log2 - l_s[qi] * kLog2e) : 0.f;
            ds[e] = pv[e] * (dp[ms][j][rr * 2 + e] - d_s[qi]);
          }
          const int at = kr * kPS + wh * 32 + j * 8 + quad * 2;
          *reinterpret_cast<uint32_t*>(sP + at) = pack2<T>(pv[0], pv[1]);
          *reinterpret_cast<uint32_t*>(sS + at) = pack2<T>(ds[0], ds[1]);
        }
      }
    }
    __syncthreads();  // P^T and dS^T of the tile are complete

    // Phase 2: dV += P^T dO and dK += dS^T Q over the tile's 64 queries, for this warp's keys and
    // head columns.
    warp_mma_rows<true, kPS, SD, kKvM / 16, 2, H8>(dv, sP, wk * 32, o_s, wh * HALF, lane);
    warp_mma_rows<true, kPS, SD, kKvM / 16, 2, H8>(dk, sS, wk * 32, q_s, wh * HALF, lane);
  }

#pragma unroll
  for (int ms = 0; ms < 2; ms++) {
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      const int64_t key = key0 + ms * 16 + g + rr * 8;
      if (key < p.t) {
        const int64_t at = kv_off + key * kv_stride + wh * HALF;
        store_rows<HALF>(p.dk + at, dk[ms], rr, quad, p.scale, p.d - wh * HALF);
        store_rows<HALF>(p.dv + at, dv[ms], rr, quad, 1.f, p.d - wh * HALF);
      }
    }
  }
}

// ---- backward: dq ------------------------------------------------------------------------------
// 128 queries per block, 32 per warp as two m-tiles (Note [two m-tiles per warp]); 32-key tiles.
constexpr int kQM = 128, kQN = 32, kQWarpRows = kQM / 4;  // queries per block, keys per inner tile

template <int HD>
constexpr size_t dq_smem_bytes() {
  return size_t(2 * kQM + 4 * kQN) * (HD + kPad) * sizeof(uint16_t) + 2 * kQM * sizeof(float);
}

template <int HD, typename T>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(BwdParams<T> p) {
  constexpr int SD = HD + kPad, KSTEPS = HD / 16, DT = HD / 8, NT = kQN / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);  // [128 queries][SD]
  T* sO = sQ + kQM * SD;               // [128 queries][SD]: dout
  T* sK = sO + kQM * SD;               // [2 buffers][32 keys][SD]
  T* sV = sK + 2 * kQN * SD;           // [2][32][SD]
  // [128 queries]: lse in base 2, and delta; in shared memory rather than in 8 registers a thread,
  // which the two m-tiles' accumulators need.
  float* sL = reinterpret_cast<float*>(sV + 2 * kQN * SD);
  float* sD = sL + kQM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, quad = lane & 3;
  const int64_t m_tiles = (p.t + kQM - 1) / kQM;
  const int64_t m0 = (m_tiles - 1 - blockIdx.x) * kQM, h = blockIdx.y, b = blockIdx.z, kh = h / p.group;
  const int64_t q_stride = p.hq * p.d, kv_stride = p.hkv * p.d;
  const int64_t q_off = (b * p.t * p.hq + h) * p.d, kv_off = (b * p.t * p.hkv + kh) * p.d;
  const int n_tiles = static_cast<int>((min(m0 + kQM, p.t) + kQN - 1) / kQN);
  // The first tile holding a key the block's first row sees (Note [flash tiles in a window]).
  const int nt0 = static_cast<int>(max(int64_t{0}, m0 - p.window) / kQN);

  load_tile<kQM, HD>(sQ, p.q + q_off, q_stride, m0, p.t, p.d);
  load_tile<kQM, HD>(sO, p.dout + q_off, q_stride, m0, p.t, p.d);
  load_tile<kQN, HD>(sK, p.k + kv_off, kv_stride, int64_t(nt0) * kQN, p.t, p.d);
  load_tile<kQN, HD>(sV, p.v + kv_off, kv_stride, int64_t(nt0) * kQN, p.t, p.d);
  cp_async_commit();

  // This warp's rows are w0 .. w0 + 31 (the thread's: w0 + 16 ms + g + 8 rr); its rows before t
  // see keys w0 - window ..= warp_last at most, and every one of them sees all_first ..= w0.
  const int64_t w0 = m0 + warp * kQWarpRows, warp_last = w0 < p.t ? min(w0 + kQWarpRows, p.t) - 1 : -1;
  const int64_t warp_first = w0 - p.window, all_first = w0 + kQWarpRows - 1 - p.window;
  for (int i = threadIdx.x; i < kQM; i += kThreads) {
    const int64_t row = m0 + i, stat = (b * p.hq + h) * p.t + row;
    sL[i] = row < p.t ? p.lse[stat] * kLog2e : 0.f;
    sD[i] = row < p.t ? p.delta[stat] : 0.f;
  }
  float dq[2][DT][4] = {};
  for (int nt = nt0; nt < n_tiles; nt++) {
    const int buf = (nt - nt0) & 1;
    cp_async_wait<0>();
    __syncthreads();  // K, V[nt] landed; every warp is done with tile nt - 1 (the other buffer)
    if (nt + 1 < n_tiles) {
      load_tile<kQN, HD>(sK + (buf ^ 1) * kQN * SD, p.k + kv_off, kv_stride, int64_t(nt + 1) * kQN, p.t, p.d);
      load_tile<kQN, HD>(sV + (buf ^ 1) * kQN * SD, p.v + kv_off, kv_stride, int64_t(nt + 1) * kQN, p.t, p.d);
      cp_async_commit();
    }
    const int64_t n0 = int64_t(nt) * kQN;
    // No row of this warp sees a key of the tile (warp-uniform)?
    if (n0 > warp_last || n0 + kQN - 1 < warp_first) continue;
    const bool whole = n0 + kQN - 1 <= w0 && n0 >= all_first;  // every row sees every key of the tile
    const T* k_s = sK + buf * kQN * SD;
    const T* v_s = sV + buf * kQN * SD;

    // S = Q K^T and dP = dO V^T for this warp's 32 queries and the tile's 32 keys.
    float s[2][NT][4] = {}, dpv[2][NT][4] = {};
    warp_mma_rows<false, SD, SD, KSTEPS, 2, NT>(s, sQ, warp * kQWarpRows, k_s, 0, lane);
    warp_mma_rows<false, SD, SD, KSTEPS, 2, NT>(dpv, sO, warp * kQWarpRows, v_s, 0, lane);
    // dS = P (dP - delta) on the causal band, into s. Visible keys of row w0 + 16 ms + g + 8 rr:
    // tile columns first ..= last (none for a row past the end).
#pragma unroll
    for (int ms = 0; ms < 2; ms++) {
#pragma unroll
      for (int rr = 0; rr < 2; rr++) {
        const int i = warp * kQWarpRows + ms * 16 + g + rr * 8;  // the block's row m0 + i
        const int64_t row = m0 + i;
        const int first = whole ? 0 : tile_col(row - p.window, n0, kQN);
        const int last = whole ? kQN - 1 : row < p.t ? tile_col(row, n0, kQN) : -1;
        const float lse_l2 = sL[i], delta = sD[i];
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
          for (int e = 0; e < 2; e++) {
            float& x = s[ms][j][rr * 2 + e];
            const int col = j * 8 + quad * 2 + e;
            const bool valid = col >= first && col <= last;
            const float pv = valid ? exp2f(x * p.scale_log2 - lse_l2) : 0.f;
            x = pv * (dpv[ms][j][rr * 2 + e] - delta);
          }
        }
      }
    }
    // dQ += dS K, reducing over the tile's keys.
    warp_mma_registers_by_tile<SD, 2, NT, DT>(dq, s, k_s, lane);
  }

#pragma unroll
  for (int ms = 0; ms < 2; ms++) {
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      const int64_t row = w0 + ms * 16 + g + rr * 8;
      if (row < p.t) store_rows<HD>(p.dq + q_off + row * q_stride, dq[ms], rr, quad, p.scale, p.d);
    }
  }
}

// ---- launchers ---------------------------------------------------------------------------------

template <int HD, typename T>
cudaError_t forward_hd(const FwdParams<T>& p, int64_t batch, cudaStream_t stream) {
  constexpr size_t smem = fwd_smem_bytes<HD>();
  if (cudaError_t e = set_smem<flash_forward_kernel<HD, T>>(smem); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.tq + kFwdM - 1) / kFwdM), static_cast<unsigned>(p.hq),
                  static_cast<unsigned>(batch));
  flash_forward_kernel<HD, T><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <int HD, typename T>
cudaError_t backward_hd(const BwdParams<T>& p, int64_t batch, cudaStream_t stream) {
  constexpr size_t smem_kv = dkdv_smem_bytes<HD>(), smem_q = dq_smem_bytes<HD>();
  if (cudaError_t e = set_smem<flash_dkdv_kernel<HD, T>>(smem_kv); e != cudaSuccess) return e;
  if (cudaError_t e = set_smem<flash_dq_kernel<HD, T>>(smem_q); e != cudaSuccess) return e;
  const dim3 grid_kv(static_cast<unsigned>((p.t + kKvN - 1) / kKvN), static_cast<unsigned>(p.hkv),
                     static_cast<unsigned>(batch));
  flash_dkdv_kernel<HD, T><<<grid_kv, kKvThreads, smem_kv, stream>>>(p);
  const dim3 grid_q(static_cast<unsigned>((p.t + kQM - 1) / kQM), static_cast<unsigned>(p.hq),
                    static_cast<unsigned>(batch));
  flash_dq_kernel<HD, T><<<grid_q, kThreads, smem_q, stream>>>(p);
  return cudaGetLastError();
}

// The 16-bit storage type of t (bf16 unless t is F16): the launchers below are only called for
// bf16 and f16 (attention_uses_flash).
template <typename F>
cudaError_t with_half_type(DType t, F&& f) {
  return t == DType::F16 ? f(static_cast<f16_t*>(nullptr)) : f(static_cast<bf16_t*>(nullptr));
}

// The compute width a head_dim d runs at (flash_supports_head_dim(d)): the smallest of the compiled
// 64, 96 and 128 that holds it.
template <typename F>
cudaError_t with_compute_width(int64_t d, F&& f) {
  if (d <= 64) return f(std::integral_constant<int, 64>{});
  if (d <= 96) return f(std::integral_constant<int, 96>{});
  return f(std::integral_constant<int, 128>{});
}

}  // namespace

bool flash_supports_head_dim(int64_t d) { return d % 8 == 0 && d >= 64 && d <= 128; }

cudaError_t launch_flash_forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                                 const AttentionShape& s, float scale, cudaStream_t stream) {
  return with_half_type(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const FwdParams<T> p{static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                         static_cast<T*>(out), lse, s.tq, s.tk, s.hq, s.hkv, s.kv_len, s.kv_len - s.tq,
                         s.hq / s.hkv, s.window > 0 ? s.window : kNoWindow, scale * kLog2e, static_cast<int>(s.d)};
    return with_compute_width(s.d, [&](auto hd) { return forward_hd<decltype(hd)::value>(p, s.batch, stream); });
  });
}

cudaError_t launch_flash_backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                  const void* k, const void* v, const float* lse, const float* delta,
                                  const AttentionShape& s, float scale, cudaStream_t stream) {
  return with_half_type(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const BwdParams<T> p{static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                         static_cast<const T*>(dout), static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv),
                         lse, delta, s.tq, s.hq, s.hkv, s.hq / s.hkv, s.window > 0 ? s.window : kNoWindow, scale,
                         scale * kLog2e, static_cast<int>(s.d)};
    return with_compute_width(s.d, [&](auto hd) { return backward_hd<decltype(hd)::value>(p, s.batch, stream); });
  });
}

}  // namespace nanoddp::cuda
