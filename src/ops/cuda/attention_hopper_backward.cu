// Flash attention's backward on Hopper (sm_90a): the two deterministic kernels of attention_flash.cu
// (Note [deterministic attention backward]) with wgmma and TMA copies in place of mma.sync and
// cp.async. Causal, sliding window, grouped-query heads, bf16 or f16, head_dim 64-128 at a compute
// width of 64 or 128. It has never run on a GPU: hopper_emulation.py checks its index arithmetic on
// the CPU against exact gradients, test_hopper_attention compares it with the mma.sync backward on
// an H100 or H200.
//
// Both kernels run two warpgroups (256 threads) that both compute, 64 rows each; warp 0 also issues
// the TMA copies (no producer warpgroup: the dK and dV accumulators of a thread, 128 floats at
// head_dim 128, leave no room for a third warpgroup's share of the register file without
// setmaxnreg, not done yet). A block first copies its fixed pair of tiles (128 rows), then streams
// pairs of 64-row tiles through a ring of 2 stages: full[s] completes when the copies of stage s
// have landed, empty[s] when all 256 threads are done with it; warp 0 then refills the stage with
// the tile two ahead, so a copy overlaps the math of the tile before it.
//  - dK/dV (a block per 128 keys of one kv head; fixed K and V, streamed Q and dO): for every query
//    head of the group and every 64-query tile that sees a key of the block, in (head, tile)
//    order, S^T = K Q^T and dP^T = V dO^T (wgmma, both operands K-major in shared memory),
//    P^T = 2^(scale_log2 S^T - lse log2 e), dS^T = P^T (dP^T - delta) in registers, then
//    dV += P^T dO and dK += dS^T Q (wgmma with A from registers, dO and Q read transposed).
//    Grouped-query heads are summed in registers, in the fixed (head, tile) order, by the one block
//    that owns the keys: no atomics, the same bits every run.
//  - dQ (a block per 128 queries of one head; fixed Q and dO, streamed K and V): over the 64-key
//    tiles that its queries see, S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
// A warpgroup skips a tile none of whose (key, query) pairs lies in the causal band (its terms are
// exact zeros); every other tile is masked per element as in the mma.sync kernels
// (Note [flash tiles in a window]: key j is seen by queries j ..= j + window).
#include <type_traits>

#include "ops/cuda/attention_flash_common.cuh"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/attention_hopper_common.cuh"

namespace nanoddp::cuda {

namespace {

using namespace flash;
using namespace hopper;

constexpr int kFixedRows = 128, kTileRows = 64, kWgRows = 64;  // rows of the fixed tiles, streamed tiles, a warpgroup
constexpr int kStages = 2, kThreads = 256;

// Byte offsets in a block's shared memory, from its first 1024-byte boundary (Note [swizzled tiles]):
// the fixed pair a, b [HD / 64][128 rows][128 B] each, then stage s's pair [HD / 64][64 rows][128 B].
template <int HD>
struct Layout {
  static constexpr int kFixedBlock = kFixedRows * kRowBytes, kTileBlock = kTileRows * kRowBytes;
  static constexpr int kFixed = kFixedRows * HD * 2, kTile = kTileRows * HD * 2;
  static constexpr int kA = 0, kB = kFixed;
  static constexpr int kBars = 2 * kFixed + kStages * 2 * kTile;       // full[2], empty[2], fixed
  static constexpr int kBytes = kBars + (2 * kStages + 1) * 8 + 1024;  // + room to align the base
  __host__ __device__ static constexpr int a(int s) { return 2 * kFixed + s * 2 * kTile; }
  __host__ __device__ static constexpr int b(int s) { return a(s) + kTile; }
};

template <typename T>
struct BwdParams {
  T *dq, *dk, *dv;           // [B, T, Hq or Hkv, d]
  const float *lse, *delta;  // [B, Hq, T]
  int64_t t, hq, hkv, group;
  int64_t window;  // kNoWindow for full causal attention
  float scale, scale_log2;
  int d;
};

// The block's shared memory, its barriers, and who this thread is.
struct Block {
  unsigned char* smem;
  uint64_t *full, *empty, *fixed;  // [2], [2], one
  int wg, warp, lane;              // warpgroup (0, 1), warp within it, lane
};

template <int HD>
__device__ Block start_block(unsigned char* smem_raw) {
  using L = Layout<HD>;
  Block k;
  k.smem = smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024;
  k.full = reinterpret_cast<uint64_t*>(k.smem + L::kBars);
  k.empty = k.full + kStages;
  k.fixed = k.full + 2 * kStages;
  // Broadcast from lane 0 so that the compiler knows them warp-uniform.
  k.wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  k.warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0) % 4;
  k.lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; s++) {
      mbar_init(&k.full[s], 1);
      mbar_init(&k.empty[s], kThreads);
    }
    mbar_init(k.fixed, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  return k;
}

// One thread: rows row0 .. row0 + rows - 1 of `head` from maps ma and mb into a and b, completing
// on bar (rows past the map's extent and columns past head_dim arrive as zeros).
template <int HD>
__device__ void load_pair(unsigned char* a, unsigned char* b, const CUtensorMap* ma, const CUtensorMap* mb,
                          uint64_t* bar, int rows, int64_t head, int64_t row0, int64_t batch) {
  mbar_expect_tx(bar, 2 * rows * HD * 2);
  for (int cb = 0; cb < HD / 64; cb++) {
    tma_load(a + cb * rows * kRowBytes, ma, bar, cb * 64, int(head), int(row0), int(batch));
    tma_load(b + cb * rows * kRowBytes, mb, bar, cb * 64, int(head), int(row0), int(batch));
  }
}

// After tile i of `count` is done: every thread releases stage i % 2, and warp 0 refills it with
// tile i + 2 once all 256 threads have released it (load(j) issues tile j's copies).
template <typename Load>
__device__ __forceinline__ void release(const Block& k, int i, int count, Load&& load) {
  const int s = i % kStages;
  mbar_arrive(&k.empty[s]);
  if (k.wg == 0 && k.warp == 0 && i + kStages < count) {
    mbar_wait(&k.empty[s], (i / kStages) & 1);
    if (k.lane == 0) load(i + kStages);
    __syncwarp();
  }
}

// acc [64 x 64] += A B^T over HD columns, A's 64 rows at a (K-major, column blocks a_block bytes
// apart), B's 64 rows at b (the same, b_block apart). Issued, not waited for.
template <int HD, typename T>
__device__ __forceinline__ void issue_kmajor(float (&acc)[8][4], uint32_t a, int a_block, uint32_t b, int b_block) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) {
    const uint32_t at = (kk % 4) * 32;  // the k-step's 16 columns: 32 bytes into the block's rows
    wgmma_ss<T>(acc, sw128_desc(a + (kk / 4) * a_block + at), sw128_desc(b + (kk / 4) * b_block + at));
  }
}

// acc [64 x HD] += A B: A [64 x 64] as the warpgroup's A fragments (to_a), k-step kk in a[kk],
// B [64 rows][HD] at b read transposed (MN-major, column blocks b_block bytes apart, a k-step of 16
// rows 16 * 128 bytes further). Issued, not waited for.
template <int HD, typename T>
__device__ __forceinline__ void issue_rows(float (&acc)[HD / 8][4], const uint32_t (&a)[4][4], uint32_t b,
                                           int b_block) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int cb = 0; cb < HD / 64; cb++)
      wgmma_rs<T>(*reinterpret_cast<float(*)[8][4]>(&acc[cb * 8]), a[kk],
                  sw128_desc(b + cb * b_block + kk * 16 * kRowBytes));
}

// A [64 x 64] in the accumulator layout as A fragments rounded to T: columns 16 kk .. 16 kk + 15 are
// column groups 2 kk, 2 kk + 1 (c_to_a).
template <typename T>
__device__ __forceinline__ void to_a(uint32_t (&a)[4][4], const float (&c)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) c_to_a<T>(a[kk], c[2 * kk], c[2 * kk + 1]);
}

// The first two products of a tile for the warpgroup: x = A1 B1^T and y = A2 B2^T, waited for;
// while they run, `meanwhile()` (loads that do not depend on them, whose latency they hide).
template <int HD, typename T, typename F>
__device__ __forceinline__ void two_products(float (&x)[8][4], float (&y)[8][4], uint32_t a1, uint32_t b1, uint32_t a2,
                                             uint32_t b2, int a_block, int b_block, F&& meanwhile) {
  wgmma_fence();
  issue_kmajor<HD, T>(x, a1, a_block, b1, b_block);
  issue_kmajor<HD, T>(y, a2, a_block, b2, b_block);
  wgmma_commit();
  meanwhile();
  wgmma_wait_all();
  fence_registers(x);
  fence_registers(y);
}

// ---- dK, dV --------------------------------------------------------------------------------------
// One tile for the warpgroup's 64 keys from k0 (this thread's: k0 + 16 warp + g + 8 rr) and the
// 64 queries from m0 of head h in stage s: the terms of dV and dK.
template <int HD, typename T>
__device__ __forceinline__ void dkdv_tile(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4], const Block& k,
                                          const BwdParams<T>& p, int s, int64_t k0, int64_t m0, int64_t h, int64_t b) {
  using L = Layout<HD>;
  const int g = k.lane / 4, quad = k.lane % 4;
  const uint32_t base = smem_addr(k.smem), rows = k.wg * kWgRows * kRowBytes;
  float st[8][4] = {}, dpt[8][4] = {};
  // This thread's query columns 8 j + 2 quad + e of the tile: their lse, loaded from global memory
  // (L2) while S^T and dP^T are computed (delta too would spill at width 128: it is loaded after).
  float lse[8][2];
  const int64_t stat = (b * p.hq + h) * p.t + m0;
  auto load_lse = [&] {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int col = j * 8 + quad * 2 + e;
        lse[j][e] = m0 + col < p.t ? p.lse[stat + col] : 0.f;
      }
  };
  two_products<HD, T>(st, dpt, base + L::kA + rows, base + L::a(s), base + L::kB + rows, base + L::b(s), L::kFixedBlock,
                      L::kTileBlock, load_lse);  // S^T = K Q^T, dP^T = V dO^T
#pragma unroll
  for (int j = 0; j < 8; j++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int col = j * 8 + quad * 2 + e;  // the query m0 + col
      const float lse_l2 = lse[j][e] * kLog2e, delta = m0 + col < p.t ? p.delta[stat + col] : 0.f;
#pragma unroll
      for (int rr = 0; rr < 2; rr++) {
        const int64_t key = k0 + k.warp * 16 + g + rr * 8;
        const int first = tile_col(key, m0, kTileRows), last = tile_col(min(p.t - 1, key + p.window), m0, kTileRows);
        const bool valid = col >= first && col <= last;
        const float pv = valid ? exp2f(st[j][rr * 2 + e] * p.scale_log2 - lse_l2) : 0.f;
        st[j][rr * 2 + e] = pv;
        dpt[j][rr * 2 + e] = pv * (dpt[j][rr * 2 + e] - delta);
      }
    }
  }
  uint32_t pa[4][4], sa[4][4];
  to_a<T>(pa, st);
  to_a<T>(sa, dpt);
  wgmma_fence();
  issue_rows<HD, T>(dv, pa, base + L::b(s), L::kTileBlock);  // dV += P^T dO
  issue_rows<HD, T>(dk, sa, base + L::a(s), L::kTileBlock);  // dK += dS^T Q
  wgmma_commit();
  wgmma_wait_all();
  fence_registers(dv);
  fence_registers(dk);
}

template <int HD, typename T>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_dkdv_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap o_map,
                       const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                       BwdParams<T> p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using L = Layout<HD>;
  const Block k = start_block<HD>(smem_raw);
  const int64_t n0 = int64_t(blockIdx.x) * kFixedRows, kh = blockIdx.y, b = blockIdx.z;
  // Query tiles from the diagonal to the newest query that sees a key of the block, per head.
  const int64_t m_first = n0 / kTileRows,
                per_head = min(p.t - 1, n0 + kFixedRows - 1 + p.window) / kTileRows + 1 - m_first;
  const int count = static_cast<int>(p.group * per_head);
  auto load = [&](int i) {  // tile i: query head kh group + i / per_head, queries from (m_first + i % per_head) 64
    const int s = i % kStages;
    load_pair<HD>(k.smem + L::a(s), k.smem + L::b(s), &q_map, &o_map, &k.full[s], kTileRows,
                  kh * p.group + i / per_head, (m_first + i % per_head) * kTileRows, b);
  };
  if (threadIdx.x == 0) {
    load_pair<HD>(k.smem + L::kA, k.smem + L::kB, &k_map, &v_map, k.fixed, kFixedRows, kh, n0, b);
    for (int i = 0; i < min(count, kStages); i++) load(i);
  }
  const int64_t k0 = n0 + k.wg * kWgRows;  // the warpgroup's first key
  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  mbar_wait(k.fixed, 0);
  for (int i = 0; i < count; i++) {
    const int64_t h = kh * p.group + i / per_head, m0 = (m_first + i % per_head) * kTileRows;
    // Any (key, query) of the warpgroup and tile in the band key <= query <= key + window, query < t?
    const bool active = k0 <= min(m0 + kTileRows - 1, p.t - 1) && m0 <= k0 + kWgRows - 1 + p.window;
    mbar_wait(&k.full[i % kStages], (i / kStages) & 1);
    if (active) dkdv_tile<HD, T>(dk, dv, k, p, i % kStages, k0, m0, h, b);
    release(k, i, count, load);
  }
  const int g = k.lane / 4, quad = k.lane % 4;
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const int64_t key = k0 + k.warp * 16 + g + rr * 8;
    if (key < p.t) {
      const int64_t at = ((b * p.t + key) * p.hkv + kh) * p.d;
      store_rows<HD>(p.dk + at, dk, rr, quad, p.scale, p.d);
      store_rows<HD>(p.dv + at, dv, rr, quad, 1.f, p.d);
    }
  }
}

// ---- dQ ------------------------------------------------------------------------------------------
// One key tile from n0 (stage s) for the warpgroup's 64 queries (this thread's rows rr: row[rr]):
// the terms of dQ.
template <int HD, typename T>
__device__ __forceinline__ void dq_tile(float (&dq)[HD / 8][4], const Block& k, const BwdParams<T>& p, int s,
                                        int64_t n0, const int64_t (&row)[2], const float (&lse_l2)[2],
                                        const float (&delta)[2]) {
  using L = Layout<HD>;
  const int quad = k.lane % 4;
  const uint32_t base = smem_addr(k.smem), rows = k.wg * kWgRows * kRowBytes;
  float sc[8][4] = {}, dp[8][4] = {};
  two_products<HD, T>(sc, dp, base + L::kA + rows, base + L::a(s), base + L::kB + rows, base + L::b(s), L::kFixedBlock,
                      L::kTileBlock, [] {});  // S = Q K^T, dP = dO V^T
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const int first = tile_col(row[rr] - p.window, n0, kTileRows);
    const int last = row[rr] < p.t ? tile_col(row[rr], n0, kTileRows) : -1;
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int col = j * 8 + quad * 2 + e;
        const bool valid = col >= first && col <= last;
        const float pv = valid ? exp2f(sc[j][rr * 2 + e] * p.scale_log2 - lse_l2[rr]) : 0.f;
        sc[j][rr * 2 + e] = pv * (dp[j][rr * 2 + e] - delta[rr]);
      }
    }
  }
  uint32_t sa[4][4];
  to_a<T>(sa, sc);
  wgmma_fence();
  issue_rows<HD, T>(dq, sa, base + L::a(s), L::kTileBlock);  // dQ += dS K
  wgmma_commit();
  wgmma_wait_all();
  fence_registers(dq);
}

template <int HD, typename T>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_dq_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap o_map,
                     const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                     BwdParams<T> p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using L = Layout<HD>;
  const Block k = start_block<HD>(smem_raw);
  // Heaviest (latest) query tiles first, as in the mma.sync kernel.
  const int64_t m_tiles = (p.t + kFixedRows - 1) / kFixedRows;
  const int64_t m0 = (m_tiles - 1 - blockIdx.x) * kFixedRows, h = blockIdx.y, b = blockIdx.z, kh = h / p.group;
  const int64_t n_tiles = (min(m0 + kFixedRows, p.t) + kTileRows - 1) / kTileRows;
  const int64_t nt0 = max(int64_t{0}, m0 - p.window) / kTileRows;  // the first tile the block's first row sees
  const int count = static_cast<int>(n_tiles - nt0);
  auto load = [&](int i) {  // tile i: keys from (nt0 + i) 64
    const int s = i % kStages;
    load_pair<HD>(k.smem + L::a(s), k.smem + L::b(s), &k_map, &v_map, &k.full[s], kTileRows, kh, (nt0 + i) * kTileRows,
                  b);
  };
  if (threadIdx.x == 0) {
    load_pair<HD>(k.smem + L::kA, k.smem + L::kB, &q_map, &o_map, k.fixed, kFixedRows, h, m0, b);
    for (int i = 0; i < min(count, kStages); i++) load(i);
  }
  // The warpgroup's rows before t see keys wg_first ..= wg_last at most.
  const int64_t w0 = m0 + k.wg * kWgRows;
  const int64_t wg_last = w0 < p.t ? min(w0 + kWgRows, p.t) - 1 : -1, wg_first = w0 - p.window;
  const int64_t row[2] = {w0 + k.warp * 16 + k.lane / 4, w0 + k.warp * 16 + k.lane / 4 + 8};
  float lse_l2[2], delta[2];
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const int64_t stat = (b * p.hq + h) * p.t + row[rr];
    lse_l2[rr] = row[rr] < p.t ? p.lse[stat] * kLog2e : 0.f;
    delta[rr] = row[rr] < p.t ? p.delta[stat] : 0.f;
  }
  float dq[HD / 8][4] = {};
  mbar_wait(k.fixed, 0);
  for (int i = 0; i < count; i++) {
    const int64_t n0 = (nt0 + i) * kTileRows;
    mbar_wait(&k.full[i % kStages], (i / kStages) & 1);
    if (n0 <= wg_last && n0 + kTileRows - 1 >= wg_first) dq_tile<HD, T>(dq, k, p, i % kStages, n0, row, lse_l2, delta);
    release(k, i, count, load);
  }
#pragma unroll
  for (int rr = 0; rr < 2; rr++)
    if (row[rr] < p.t) store_rows<HD>(p.dq + ((b * p.t + row[rr]) * p.hq + h) * p.d, dq, rr, k.lane % 4, p.scale, p.d);
}

// ---- host side -----------------------------------------------------------------------------------
template <int HD, typename T>
cudaError_t backward_hd(DType t, const void* dout, const void* q, const void* k, const void* v, const AttentionShape& s,
                        const BwdParams<T>& p, cudaStream_t stream) {
  // Each kernel's maps: the fixed pair in boxes of 128 rows, the streamed pair in boxes of 64.
  CUtensorMap q_kv, o_kv, k_kv, v_kv, q_q, o_q, k_q, v_q;
  const auto map = [&](CUtensorMap* m, const void* x, int64_t heads, int64_t alloc, int box) {
    return make_tensor_map(m, t, x, s.batch, s.tq, alloc, heads, s.d, box);
  };
  for (cudaError_t e : {map(&q_kv, q, s.hq, s.tq, kTileRows), map(&o_kv, dout, s.hq, s.tq, kTileRows),
                        map(&k_kv, k, s.hkv, s.tk, kFixedRows), map(&v_kv, v, s.hkv, s.tk, kFixedRows),
                        map(&q_q, q, s.hq, s.tq, kFixedRows), map(&o_q, dout, s.hq, s.tq, kFixedRows),
                        map(&k_q, k, s.hkv, s.tk, kTileRows), map(&v_q, v, s.hkv, s.tk, kTileRows)})
    if (e != cudaSuccess) return e;
  constexpr int smem = Layout<HD>::kBytes;
  if (cudaError_t e = set_smem<hopper_dkdv_kernel<HD, T>>(smem); e != cudaSuccess) return e;
  if (cudaError_t e = set_smem<hopper_dq_kernel<HD, T>>(smem); e != cudaSuccess) return e;
  const unsigned blocks = static_cast<unsigned>((s.tq + kFixedRows - 1) / kFixedRows);
  hopper_dkdv_kernel<HD, T>
      <<<dim3(blocks, unsigned(s.hkv), unsigned(s.batch)), kThreads, smem, stream>>>(q_kv, o_kv, k_kv, v_kv, p);
  hopper_dq_kernel<HD, T>
      <<<dim3(blocks, unsigned(s.hq), unsigned(s.batch)), kThreads, smem, stream>>>(q_q, o_q, k_q, v_q, p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_hopper_backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q,
                                   const void* k, const void* v, const float* lse, const float* delta,
                                   const AttentionShape& s, float scale, cudaStream_t stream) {
  constexpr int64_t kMaxRows = int64_t{1} << 31;  // the TMA's coordinates are 32-bit
  if (s.tq >= kMaxRows || s.tk >= kMaxRows || s.tq != s.kv_len || s.tq > s.tk) return cudaErrorInvalidValue;
  const int64_t window = s.window > 0 ? s.window : kNoWindow;
  auto run = [&](auto* tag, auto hd) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const BwdParams<T> p{static_cast<T*>(dq),
                         static_cast<T*>(dk),
                         static_cast<T*>(dv),
                         lse,
                         delta,
                         s.tq,
                         s.hq,
                         s.hkv,
                         s.hq / s.hkv,
                         window,
                         scale,
                         scale * kLog2e,
                         static_cast<int>(s.d)};
    return backward_hd<decltype(hd)::value, T>(t, dout, q, k, v, s, p, stream);
  };
  return hopper::dispatch_type_and_width(t, s.d, run);
}

}  // namespace nanoddp::cuda
