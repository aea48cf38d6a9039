// GEMM on cuBLASLt for one device: f32, bf16 or f16 operands, an output of their type or f32, f32
// accumulation, row-major like ops::matmul. The handle and a 32 MiB workspace are created once per device;
// the algorithm for each problem (shapes, strides, types, pointer alignment) is chosen once by
// cuBLASLt's heuristic and cached with its descriptors.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/tensor.h"
#include "ops/cuda/types.cuh"

namespace nanoddp::cuda {

// One row-major operand: `ld` is the row stride in elements of the matrix as stored.
struct GemmOperand {
  const void* ptr;
  DType type;
  int64_t ld;
  bool trans;
};

// A strided batch of equal GEMMs: problem i reads a + i stride_a, b + i stride_b and writes
// c + i stride_c (strides in elements). count 1 is the single GEMM.
struct GemmBatch {
  int64_t count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// One operand of an FP8 GEMM: codes u8 [rows, k] row-major (K-major: the layout cuBLASLt's FP8 kernels
// take on Hopper, its "TN"), e4m3fn or e5m2, and the device address of its f32 inverse scale.
struct Fp8Operand {
  const uint8_t* codes;
  bool e5m2;
  const float* inv_scale;
};

class CublasLtGemm {
 public:
  explicit CublasLtGemm(int device);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // c[m, n] (row stride ldc, type c_type) = alpha op(a)[m, k] op(b)[k, n] + beta c, on `stream`.
  // With `batch`, that many such products at once (one cuBLASLt call).
  void run(cudaStream_t stream, int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a,
           const GemmOperand& b, float beta, void* c, DType c_type, int64_t ldc, const GemmBatch& batch = {});

  // c[m, n] (row stride ldc, type c_type) = (a[m, k] b[n, k]^T) * a.inv_scale * b.inv_scale + beta c, on
  // cuBLASLt's FP8 kernels (at most one operand e5m2), the scales read on the device. fast_accum: the
  // kernels' faster, less precise accumulation. False (nothing queued) where cuBLASLt has no FP8 kernel
  // for the problem, e.g. for this output type.
  bool run_fp8(cudaStream_t stream, int64_t m, int64_t n, int64_t k, const Fp8Operand& a, const Fp8Operand& b,
               float beta, void* c, DType c_type, int64_t ldc, bool fast_accum);

 private:
  // Everything the heuristic's answer depends on.
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, DType, DType, int64_t, int64_t, int64_t, int, int, int,
                         int64_t, int64_t, int64_t, int64_t>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;  // false: cuBLASLt offered nothing, use the fallback kernel
  };
  Plan& plan(const Key& key);
  void pick_algorithm(Plan& p, int align_first, int align_second, int align_c);
  // FP8: m, n, k, a e5m2, b e5m2, c type, ldc, the alignments of a, b and c, fast accumulation.
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, DType, int64_t, int, int, int, bool>;
  Plan& fp8_plan(const Fp8Key& key);

  int device_;
  cublasLtHandle_t handle_ = nullptr;
  Tensor workspace_;  // u8 [kWorkspaceBytes] on the device
  std::mutex mu_;
  std::map<Key, Plan> plans_;
  std::map<Fp8Key, Plan> fp8_plans_;
};

}  // namespace nanoddp::cuda
