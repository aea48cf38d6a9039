// The PTX of the Hopper attention kernels (attention_hopper.cu, the forward, and
// attention_hopper_backward.cu): mbarriers, TMA tensor copies, wgmma descriptors and instructions,
// and the host side's tensor maps. sm_90a only: included by those two files alone.
//
// Note [swizzled tiles]: a tile of R rows and HD 16-bit columns is kept as HD / 64 column blocks
// of [R rows][128 bytes]. The TMA (CU_TENSOR_MAP_SWIZZLE_128B) writes the 16-byte chunk c of row r
// to chunk c ^ (r % 8) of that row, and a wgmma descriptor in 128-byte swizzle mode reads the same
// pattern back: rows 128 bytes apart, 8-row groups 1024 bytes apart (the stride byte offset), the
// pattern's phase taken from address bits 7-9, so every tile starts at a 1024-byte boundary. A
// k-step of 16 columns of a K-major operand (Q, K, V, dO read along head_dim) starts 32 bytes further
// into the rows; a k-step of 16 rows of an MN-major operand (V, K, Q or dO read transposed, one
// 64-column block per instruction) starts 16 rows, 2048 bytes, further.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#include "ops/cuda/attention.cuh"
#include "ops/cuda/attention_flash_common.cuh"

namespace nanoddp::cuda::hopper {

using flash::smem_addr;

constexpr int kRowBytes = 128;  // a swizzled row: 64 16-bit columns
// ---- PTX wrappers: mbarrier, TMA, wgmma ------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival that also expects `bytes` of TMA transactions before the phase completes.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts its phase 1 done).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile("{\n .reg .pred done;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               " @!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
               "r"(parity)
               : "memory");
}
// One box of a 4-d tensor map (coordinates innermost first) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                         int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// A wgmma shared-memory descriptor (PTX ISA, "matrix descriptor"): start address, leading and stride
// byte offsets (each >> 4), 128-byte swizzle (mode 1 in bits 62-63), base offset 0. Note [swizzled
// tiles]: the stride byte offset is 1024; the leading one is not read for these operands (K-major
// k-steps stay inside a 128-byte row; the MN-major V spans one 64-column block), and is given as
// 1024 so that either reading of it in the transposed case lands on the next 8-row group.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(1024 >> 4) << 16 | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving reads or writes of accumulators across the asm around it.
template <int N>
__device__ __forceinline__ void fence_registers(float (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+f"(x[i][e])::"memory");
}

#define NANODDP_WGMMA_D                                                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31}"
#define NANODDP_WGMMA_ACC(d)                                                                                   \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),     \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
      "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
      "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

// scale-d, a predicate: true, so that d += A B (the operand after the others, set from a register
// as the PTX ISA's predicate operand wants).
#define NANODDP_WGMMA_ADD(i) "{\n .reg .pred scale_d;\n setp.ne.b32 scale_d, %" #i ", 0;\n "
// d[64 x 64] += A B for the warpgroup, A [64 x 16] and B [16 x 64] in shared memory, both K-major
// (A's rows and B's columns have their 16 k values contiguous, before the swizzle). d's layout is
// the header's of attention_flash_common.cuh: warp w of the group holds rows 16 w .. 16 w + 15.
template <typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, f16_t>)
    asm volatile(NANODDP_WGMMA_ADD(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " NANODDP_WGMMA_D
                                       ", %32, %33, scale_d, 1, 1, 0, 0;\n}\n"
                 : NANODDP_WGMMA_ACC(d)
                 : "l"(a), "l"(b), "r"(1));
  else
    asm volatile(NANODDP_WGMMA_ADD(34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " NANODDP_WGMMA_D
                                       ", %32, %33, scale_d, 1, 1, 0, 0;\n}\n"
                 : NANODDP_WGMMA_ACC(d)
                 : "l"(a), "l"(b), "r"(1));
}
// d += A B with A [64 x 16] in registers (the m16n8k16 A fragment per warp) and B [16 x 64] in
// shared memory MN-major (its 64 columns contiguous per k row), read transposed (imm-trans-b 1).
template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (std::is_same_v<T, f16_t>)
    asm volatile(NANODDP_WGMMA_ADD(37) "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " NANODDP_WGMMA_D
                                       ", {%32, %33, %34, %35}, %36, scale_d, 1, 1, 1;\n}\n"
                 : NANODDP_WGMMA_ACC(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  else
    asm volatile(NANODDP_WGMMA_ADD(37) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " NANODDP_WGMMA_D
                                       ", {%32, %33, %34, %35}, %36, scale_d, 1, 1, 1;\n}\n"
                 : NANODDP_WGMMA_ACC(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
#undef NANODDP_WGMMA_D
#undef NANODDP_WGMMA_ACC
#undef NANODDP_WGMMA_ADD

// ---- host side -----------------------------------------------------------------------------------
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                                           &found);
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f)
               : nullptr;
  }();
  return fn;
}

// A [batch, rows_alloc, heads, d] tensor as the TMA reads it: dimensions innermost first (d, heads,
// rows, batch), the first `rows` rows visible (the rest, and columns past d, read as zeros), boxes of
// 64 columns x box_rows rows of one head, 128-byte swizzled (Note [swizzled tiles]).
inline cudaError_t make_tensor_map(CUtensorMap* map, DType t, const void* base, int64_t batch, int64_t rows,
                                   int64_t rows_alloc, int64_t heads, int64_t d, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(heads), cuuint64_t(rows), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(d * 2), cuuint64_t(heads * d * 2), cuuint64_t(rows_alloc * heads * d * 2)};
  const cuuint32_t box[4] = {64, 1, cuuint32_t(box_rows), 1}, steps[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, t == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            4, const_cast<void*>(base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Calls run(T* tag, std::integral_constant<int, W>) with the element type of t (f16, else bf16)
// and the compute width of head_dim d (64, else 128): the instantiations the Hopper kernels have.
template <typename Run>
cudaError_t dispatch_type_and_width(DType t, int64_t d, Run&& run) {
  const bool narrow = d <= 64;
  if (t == DType::F16)
    return narrow ? run(static_cast<f16_t*>(nullptr), std::integral_constant<int, 64>{})
                  : run(static_cast<f16_t*>(nullptr), std::integral_constant<int, 128>{});
  return narrow ? run(static_cast<bf16_t*>(nullptr), std::integral_constant<int, 64>{})
                : run(static_cast<bf16_t*>(nullptr), std::integral_constant<int, 128>{});
}

}  // namespace nanoddp::cuda::hopper
