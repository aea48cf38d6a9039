// The numeric libraries under the ops backends and their versions, for `nanoddp env` and reports:
// oneDNN (the CPU GEMM) with the instruction set it dispatches to, cuBLASLt on CUDA builds.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace nanoddp::ops {

// {"onednn", "2.7.3 (omp)"}, {"onednn isa", "avx512_core_bf16"}, {"cublaslt", "13.0.0"}, ... in
// that order; only the libraries this build has.
std::vector<std::pair<std::string, std::string>> engine_versions();

// How the CPU backend multiplies f16 matrices: "onednn (<its kernel>)" where oneDNN has an optimised
// f16 matmul on this CPU (AVX512-FP16), else "widened to f32 (sgemm)". See Note [bf16 matmul on
// the CPU] in ops/cpu/matmul.cpp.
std::string cpu_f16_matmul();

// Whether oneDNN multiplies bf16 with bf16 instructions on this CPU (AVX512-BF16 dot products or
// AMX tiles, within any DNNL_MAX_CPU_ISA limit); false without oneDNN. Only then does the CPU
// backend run bf16 GEMMs on oneDNN; elsewhere it widens them to f32 (Note [bf16 matmul on the CPU]).
bool onednn_has_bf16_instructions();

// How the CPU backend multiplies bf16 matrices: "onednn on <isa>", or "widened to f32 (sgemm)"
// and why (no bf16 instructions, or a build without oneDNN).
std::string cpu_bf16_matmul();

}  // namespace nanoddp::ops
