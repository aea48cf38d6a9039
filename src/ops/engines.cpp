#include "ops/engines.h"

#include <fmt/format.h>

#include "nanoddp/build_config.h"

#if NANODDP_HAVE_ONEDNN
#include <dnnl.h>
#include <dnnl.hpp>
#endif
#if NANODDP_HAVE_CUDA
#include <cublasLt.h>

#include <cstdlib>

#include "core/error.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/cudnn_library.h"
#endif

namespace nanoddp::ops {

namespace {

#if NANODDP_HAVE_ONEDNN
// The widest instruction set oneDNN's JIT uses on this CPU (dnnl_types.h's dnnl_cpu_isa_t).
const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx (bf16 on AMX tiles)";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni (no bf16 instructions)";
    case dnnl_cpu_isa_avx512_core: return "avx512_core (no bf16 instructions)";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni (no bf16 instructions)";
    case dnnl_cpu_isa_avx2: return "avx2 (no bf16 instructions)";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_sse41: return "sse41";
    default: return "other";
  }
}
#endif

}  // namespace

std::vector<std::pair<std::string, std::string>> engine_versions() {
  std::vector<std::pair<std::string, std::string>> v;
#if NANODDP_HAVE_ONEDNN
  const dnnl_version_t* d = dnnl_version();
  const char* runtime = d->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : d->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                                                                            : "threads";
  v.emplace_back("onednn", fmt::format("{}.{}.{} ({})", d->major, d->minor, d->patch, runtime));
  v.emplace_back("onednn isa", isa_name(dnnl_get_effective_cpu_isa()));
#else
  v.emplace_back("cpu gemm", "portable kernel (built without oneDNN)");
#endif
#if NANODDP_HAVE_CUDA
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  v.emplace_back("cublaslt", fmt::format("{}.{}.{}", lt / 10000, lt % 10000 / 100, lt % 100));
  // cuDNN is opened at run time (ops/cuda/cudnn_library.h) for the attention route that uses it.
  const cuda::CudnnLibrary& dnn = cuda::cudnn_library();
  v.emplace_back("cudnn",
                 dnn.loaded ? fmt::format("{} ({})", dnn.version_string(), dnn.path) : "not found: " + dnn.why_not);
  try {
    v.emplace_back("cuda attention", cuda::describe_attention_route(
                                         cuda::parse_attention_route(std::getenv("NANODDP_CUDA_ATTENTION"))));
  } catch (const Error& e) {
    v.emplace_back("cuda attention", e.what());
  }
#endif
  return v;
}

bool onednn_has_bf16_instructions() {
#if NANODDP_HAVE_ONEDNN
  // The ISA values are nested bit sets: every ISA with bf16 dot products contains avx512_core_bf16's.
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & bf16) == bf16;
#else
  return false;
#endif
}

std::string cpu_bf16_matmul() {
#if NANODDP_HAVE_ONEDNN
  if (onednn_has_bf16_instructions()) return fmt::format("onednn on {}", isa_name(dnnl_get_effective_cpu_isa()));
  return "widened to f32 (sgemm), no bf16 instructions";
#else
  return "widened to f32 (sgemm), built without oneDNN";
#endif
}

std::string cpu_f16_matmul() {
#if NANODDP_HAVE_ONEDNN
  using dnnl::memory;
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const memory::desc f16({64, 64}, memory::data_type::f16, memory::format_tag::ab),
        f32({64, 64}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(f16, f16, f32), engine);
    const std::string impl = pd.impl_info_str();
    if (!impl.starts_with("ref")) return "onednn (" + impl + ")";
  } catch (const dnnl::error&) {
    // no f16 matmul on this CPU
  }
#endif
  return "widened to f32 (sgemm)";
}

}  // namespace nanoddp::ops
