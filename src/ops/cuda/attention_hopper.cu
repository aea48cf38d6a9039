// Flash attention's forward on Hopper (sm_90a): warpgroup MMAs fed by the tensor memory accelerator,
// the design of FlashAttention-3, re-derived here. Causal, sliding window, grouped-query heads,
// bf16 or f16 in, f32 accumulate, the same out and lse as the mma.sync forward (attention_flash.cu).
// It has never run on a GPU: tests/ops/cuda/kernel_emulation.py checks its index arithmetic on the
// CPU, test_hopper_attention compares it with the mma.sync kernel on an H100 or H200.
//
// A block takes 128 queries of one head with 3 warpgroups (384 threads). Warpgroup 0 produces: one
// of its threads issues the TMA copies (cp.async.bulk.tensor through CUtensorMaps made on the host),
// the Q tile once, then each 64-key tile of K and V into a ring of 2 stages. Warpgroups 1 and 2
// consume, 64 query rows each: per key tile S = Q K^T (wgmma m64n64k16, both operands in shared
// memory), the online softmax of the mma.sync kernel on S's registers (base 2, running max and sum),
// then O += P V (wgmma with P from registers, V from shared memory read transposed). The ring is
// handed over through mbarriers: full[s] completes when the TMA's bytes of stage s have landed,
// empty[s] when the 256 consumer threads are done reading it, so loads of the next tile overlap the
// math of this one, and the two consumer warpgroups interleave on the tensor cores.
//
// Masks, the window and the tiles skipped or run unmasked follow Note [flash tiles in a window]
// with a warpgroup's 64 rows in place of a warp's 32. head_dim runs at a compute width of 64 or 128
// (96 and 112 at 128: TMA fills columns past head_dim with zeros, which add nothing).
// Not done yet: a warpgroup's softmax overlapping its own next MMAs (FlashAttention-3's intra-
// warpgroup pipelining) and setmaxnreg. The backward is attention_hopper_backward.cu.
//
// Note [swizzled tiles] (attention_hopper_common.cuh) gives the shared-memory layout of the tiles.
#include "ops/cuda/attention_hopper.cuh"

#include <type_traits>

#include "ops/cuda/attention_flash_common.cuh"
#include "ops/cuda/attention_hopper_common.cuh"

namespace nanoddp::cuda {

namespace {

using namespace flash;
using namespace hopper;

constexpr int kM = 128, kN = 64, kWgRows = 64;  // queries per block, keys per tile, rows per warpgroup
constexpr int kStages = 2, kThreads = 384, kConsumers = 256;

// Byte offsets in a block's shared memory, from its first 1024-byte boundary.
template <int HD>
struct Layout {
  static constexpr int kQBlock = kM * kRowBytes, kKvBlock = kN * kRowBytes;  // one 64-column block
  static constexpr int kQ = 0;                                               // Q [HD / 64][128 rows][128 B]
  static constexpr int kTile = kN * HD * 2;                            // K or V of one stage [HD / 64][64 rows][128 B]
  static constexpr int kKv = kM * HD * 2;                              // stage s: K at kKv + 2 s kTile, V after it
  static constexpr int kBars = kKv + kStages * 2 * kTile;              // full[2], empty[2], q_full: 8 bytes each
  static constexpr int kBytes = kBars + (2 * kStages + 1) * 8 + 1024;  // + room to align the base
  __host__ __device__ static constexpr int k(int s) { return kKv + s * 2 * kTile; }
  __host__ __device__ static constexpr int v(int s) { return k(s) + kTile; }
};

template <typename T>
struct HopperParams {
  T* out;      // [B, Tq, Hq, d]
  float* lse;  // [B, Hq, Tq]
  int64_t tq, hq, kv_len, q_pos0, group;
  int64_t window;  // kNoWindow for full causal attention
  float scale_log2;
  int d;
};

// ---- the producer --------------------------------------------------------------------------------
// One thread: Q rows m0 .. m0 + 127 of head h, then key tiles nt0 .. n_tiles - 1 of kv head kh into
// stage i % 2 (tile i of the loop), each after the consumers released the stage's previous tile.
// Rows past the tensor map's extent (tq, kv_len) and columns past head_dim arrive as zeros.
template <int HD>
__device__ void produce(unsigned char* smem, uint64_t* full, uint64_t* empty, uint64_t* q_full, const CUtensorMap* qm,
                        const CUtensorMap* km, const CUtensorMap* vm, int h, int kh, int b, int m0, int nt0,
                        int n_tiles) {
  using L = Layout<HD>;
  mbar_expect_tx(q_full, kM * HD * 2);
  for (int cb = 0; cb < HD / 64; cb++) tma_load(smem + L::kQ + cb * L::kQBlock, qm, q_full, cb * 64, h, m0, b);
  for (int i = 0; nt0 + i < n_tiles; i++) {
    const int s = i % kStages, n0 = (nt0 + i) * kN;
    mbar_wait(&empty[s], ((i / kStages) & 1) ^ 1);  // use u of a stage waits for release u - 1
    mbar_expect_tx(&full[s], 2 * L::kTile);
    for (int cb = 0; cb < HD / 64; cb++) {
      tma_load(smem + L::k(s) + cb * L::kKvBlock, km, &full[s], cb * 64, kh, n0, b);
      tma_load(smem + L::v(s) + cb * L::kKvBlock, vm, &full[s], cb * 64, kh, n0, b);
    }
  }
}

// ---- the consumers -------------------------------------------------------------------------------
// s = Q K^T for the warpgroup's 64 rows (q_base: its rows in block 0 of Q) and the 64 keys of a tile.
template <int HD, typename T>
__device__ __forceinline__ void scores(float (&s)[8][4], uint32_t q_base, uint32_t k_base) {
  using L = Layout<HD>;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) {
    const uint32_t at = (kk % 4) * 32;  // the k-step's 16 columns: 32 bytes into the block's rows
    wgmma_ss<T>(s, sw128_desc(q_base + (kk / 4) * L::kQBlock + at), sw128_desc(k_base + (kk / 4) * L::kKvBlock + at));
  }
  wgmma_commit();
  wgmma_wait_all();
  fence_registers(s);
}

// o += P V: P the warpgroup's probabilities [64 rows x 64 keys] in the accumulator layout, rounded to
// T as A fragments (c_to_a: keys 16 kk .. 16 kk + 15 are column groups 2 kk, 2 kk + 1), V the stage's
// tile [64 keys][HD] in blocks of 64 columns, each block a separate n64 instruction.
template <int HD, typename T>
__device__ __forceinline__ void accumulate_pv(float (&o)[HD / 8][4], const float (&p)[8][4], uint32_t v_base) {
  using L = Layout<HD>;
  uint32_t a[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; kk++) c_to_a<T>(a[kk], p[2 * kk], p[2 * kk + 1]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
#pragma unroll
    for (int cb = 0; cb < HD / 64; cb++)
      wgmma_rs<T>(*reinterpret_cast<float(*)[8][4]>(&o[cb * 8]), a[kk],
                  sw128_desc(v_base + cb * L::kKvBlock + kk * 16 * kRowBytes));
  wgmma_commit();
  wgmma_wait_all();
  fence_registers(o);
}

// The consumer warpgroup wg (0 or 1: rows m0 + 64 wg ..) over the block's key tiles, then its rows
// of out and lse. This thread holds rows w0 + 16 warp + g + 8 rr (rr = 0, 1) of the accumulators.
template <int HD, typename T>
__device__ void consume(const unsigned char* smem, uint64_t* full, uint64_t* empty, uint64_t* q_full,
                        const HopperParams<T>& p, int64_t m0, int64_t h, int64_t b, int nt0, int n_tiles) {
  using L = Layout<HD>;
  // The warpgroup and warp, broadcast from lane 0 so that the compiler knows them warp-uniform.
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0) - 1;
  const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, quad = lane % 4;
  // The warpgroup's rows before tq see keys wg_first ..= wg_last at most; every one of them sees
  // all_first ..= wg_all (Note [flash tiles in a window]).
  const int64_t w0 = m0 + wg * kWgRows;
  const int64_t wg_last = w0 < p.tq ? min(p.q_pos0 + min(w0 + kWgRows, p.tq) - 1, p.kv_len - 1) : -1;
  const int64_t wg_all = p.q_pos0 + w0, wg_first = wg_all - p.window, all_first = wg_all + kWgRows - 1 - p.window;
  const int64_t pos = p.q_pos0 + w0 + warp * 16 + g;  // the position of this thread's row rr = 0
  const uint32_t q_base = smem_addr(smem + L::kQ) + wg * kWgRows * kRowBytes;
  float o[HD / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {};
  mbar_wait(q_full, 0);
  for (int i = 0; nt0 + i < n_tiles; i++) {
    const int s = i % kStages;
    const int64_t n0 = int64_t(nt0 + i) * kN;
    const bool active = n0 <= wg_last && n0 + kN - 1 >= wg_first;  // warpgroup-uniform
    const bool whole = n0 + kN - 1 <= wg_all && n0 >= all_first;
    mbar_wait(&full[s], (i / kStages) & 1);
    if (active) {
      float sc[8][4] = {};
      scores<HD, T>(sc, q_base, smem_addr(smem + L::k(s)));
      const int first[2] = {tile_col(pos - p.window, n0, kN), tile_col(pos + 8 - p.window, n0, kN)};
      const int last[2] = {tile_col(min(pos, p.kv_len - 1), n0, kN), tile_col(min(pos + 8, p.kv_len - 1), n0, kN)};
      if (whole)
        online_softmax<false>(sc, o, row_max, row_sum, first, last, quad, p.scale_log2);
      else
        online_softmax<true>(sc, o, row_max, row_sum, first, last, quad, p.scale_log2);
      accumulate_pv<HD, T>(o, sc, smem_addr(smem + L::v(s)));
    }
    mbar_arrive(&empty[s]);  // this thread's reads of stage s are complete (wgmma waited on)
  }
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    float sum = row_sum[rr];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t row = w0 + warp * 16 + g + rr * 8;
    if (row < p.tq) {
      store_rows<HD>(p.out + ((b * p.tq + row) * p.hq + h) * p.d, o, rr, quad, 1.f / sum, p.d);
      if (quad == 0) p.lse[(b * p.hq + h) * p.tq + row] = (row_max[rr] + log2f(sum)) * kLn2;
    }
  }
}

template <int HD, typename T>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_forward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap v_map, HopperParams<T> p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using L = Layout<HD>;
  unsigned char* smem = smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBars);  // [2], then empty [2], then q_full
  uint64_t *empty = full + kStages, *q_full = full + 2 * kStages;
  // Heaviest (latest) query tiles first, as in the mma.sync forward.
  const int64_t m_tiles = (p.tq + kM - 1) / kM;
  const int64_t m0 = (m_tiles - 1 - blockIdx.x) * kM, h = blockIdx.y, b = blockIdx.z;
  const int64_t keys = min(p.q_pos0 + min(m0 + kM, p.tq), p.kv_len);  // seen by the last row
  const int n_tiles = static_cast<int>((keys + kN - 1) / kN);
  const int nt0 = static_cast<int>(max(int64_t{0}, p.q_pos0 + m0 - p.window) / kN);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; s++) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers);
    }
    mbar_init(q_full, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (__shfl_sync(0xffffffffu, threadIdx.x / 128, 0) == 0) {  // the producer warpgroup (warp-uniform)
    if (threadIdx.x == 0)
      produce<HD>(smem, full, empty, q_full, &q_map, &k_map, &v_map, static_cast<int>(h), static_cast<int>(h / p.group),
                  static_cast<int>(b), static_cast<int>(m0), nt0, n_tiles);
    return;
  }
  consume<HD, T>(smem, full, empty, q_full, p, m0, h, b, nt0, n_tiles);
}

template <int HD, typename T>
cudaError_t forward_hd(DType t, const void* q, const void* k, const void* v, const AttentionShape& s,
                       const HopperParams<T>& p, cudaStream_t stream) {
  CUtensorMap qm, km, vm;
  if (cudaError_t e = make_tensor_map(&qm, t, q, s.batch, s.tq, s.tq, s.hq, s.d, kM); e != cudaSuccess) return e;
  if (cudaError_t e = make_tensor_map(&km, t, k, s.batch, s.kv_len, s.tk, s.hkv, s.d, kN); e != cudaSuccess) return e;
  if (cudaError_t e = make_tensor_map(&vm, t, v, s.batch, s.kv_len, s.tk, s.hkv, s.d, kN); e != cudaSuccess) return e;
  constexpr int smem = Layout<HD>::kBytes;
  if (cudaError_t e = set_smem<hopper_forward_kernel<HD, T>>(smem); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s.tq + kM - 1) / kM), static_cast<unsigned>(s.hq),
                  static_cast<unsigned>(s.batch));
  hopper_forward_kernel<HD, T><<<grid, kThreads, smem, stream>>>(qm, km, vm, p);
  return cudaGetLastError();
}

}  // namespace

std::string hopper_attention_unavailable(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return "its compute capability could not be read";
  if (major != 9 || minor != 0)
    return "it is compute capability " + std::to_string(major) + "." + std::to_string(minor) +
           ", and the Hopper kernel is sm_90a code, which runs on 9.0 (H100, H200) only";
  if (tensor_map_encoder() == nullptr) return "the CUDA driver has no cuTensorMapEncodeTiled (a driver before CUDA 12)";
  return "";
}

cudaError_t launch_hopper_forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                                  const AttentionShape& s, float scale, cudaStream_t stream) {
  // The TMA takes 32-bit coordinates; the tensor maps at least one row.
  constexpr int64_t kMaxRows = int64_t{1} << 31;
  if (s.tq >= kMaxRows || s.tk >= kMaxRows || s.kv_len < 1) return cudaErrorInvalidValue;
  const int64_t window = s.window > 0 ? s.window : kNoWindow;
  auto run = [&](auto* tag, auto hd) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const HopperParams<T> p{static_cast<T*>(out), lse,          s.tq,   s.hq,           s.kv_len,
                            s.kv_len - s.tq,      s.hq / s.hkv, window, scale * kLog2e, static_cast<int>(s.d)};
    return forward_hd<decltype(hd)::value, T>(t, q, k, v, s, p, stream);
  };
  return hopper::dispatch_type_and_width(t, s.d, run);
}

}  // namespace nanoddp::cuda
