// cuDNN's fused attention through the graph backend API, and the attention route switch.
//
// Note [cuDNN attention graphs]. cuDNN 9 has no single "causal attention" call on Hopper-era
// versions; it recognises attention as a graph of primitive operations and runs the whole graph as
// one fused flash kernel (the composite graph of cuDNN's own frontend; PyTorch builds the same).
// Our tensors are [B, T, H, D] in memory and go in as [B, H, T, D] views through their strides,
// K (and V in the backward) as transposed views; S is the number of tokens (Tq == kv_len).
//   forward:  S = Q K^T * scale; causal mask (row >= col keeps, else -inf); m = rowmax; E =
//             exp(S - m); l = rowsum E; lse = m + log l (f32 [B, H, S], our lse exactly);
//             P = E / l rounded to the input type; O = P V.
//   backward: delta = rowsum(dO * O) (f32, a buffer of ours); P = exp(mask(S * scale - lse));
//             dV = P^T dO; dS = P (dO V^T - delta) * scale; dK = dS^T Q; dQ = dS K.
// With grouped-query heads dK and dV are computed per query head and summed over each group by a
// reduction. The deterministic backward writes dQ straight from its matmul; the nondeterministic
// one (PyTorch's) accumulates dQ in an f32 buffer of ours with atomic adds and copies it out.
#include "ops/cuda/cudnn_attention.h"

#include <fmt/format.h>

#include <compare>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "core/cuda_util.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/cuda/cudnn_library.h"

#if NANODDP_HAVE_CUDNN_HEADERS
#include "ops/cuda/cudnn_graph.h"
#endif

namespace nanoddp::cuda {

AttentionRoute parse_attention_route(const char* value) {
  if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return AttentionRoute::kAuto;
  if (std::strcmp(value, "cudnn") == 0) return AttentionRoute::kCudnn;
  if (std::strcmp(value, "cudnn_nondeterministic") == 0) return AttentionRoute::kCudnnNondeterministic;
  if (std::strcmp(value, "flash") == 0) return AttentionRoute::kFlash;
  if (std::strcmp(value, "hopper") == 0) return AttentionRoute::kHopper;
  if (std::strcmp(value, "reference") == 0) return AttentionRoute::kReference;
  NANODDP_FAIL("NANODDP_CUDA_ATTENTION={} is not a route: use auto, cudnn, cudnn_nondeterministic, flash, hopper or "
               "reference",
               value);
}

std::string describe_attention_route(AttentionRoute r) {
  const CudnnLibrary& lib = cudnn_library();
  const std::string cudnn = lib.loaded ? fmt::format("cuDNN {} ({})", lib.version_string(), lib.path) : "";
  const std::string missing = "cuDNN not found, so the calls it would take fail";
  switch (r) {
    case AttentionRoute::kAuto:
      return lib.loaded ? "auto: " + cudnn + " where it takes the call, else flash"
                        : "auto: flash (cuDNN not found)";
    case AttentionRoute::kCudnn: return "cudnn (deterministic backward): " + (lib.loaded ? cudnn : missing);
    case AttentionRoute::kCudnnNondeterministic: return "cudnn_nondeterministic: " + (lib.loaded ? cudnn : missing);
    case AttentionRoute::kFlash: return "flash (our mma.sync kernels)";
    case AttentionRoute::kHopper: return "hopper (our wgmma forward for sm_90a, the mma.sync backward)";
    case AttentionRoute::kReference: return "reference (slow, for debugging)";
  }
  return "unknown";
}

bool cudnn_attention_takes(DType t, const AttentionShape& s, const void* const* ptrs, int nptrs) {
  if (t != DType::BF16 && t != DType::F16) return false;
  if (s.tq != s.kv_len || s.tk < s.kv_len || s.hkv <= 0 || s.hq % s.hkv != 0) return false;
  if (s.window != 0) return false;  // a sliding window: our flash kernels (cuDNN's own is not wired up)
  if (s.d % 8 != 0 || s.d < 8 || s.d > 128) return false;
  for (int i = 0; i < nptrs; i++)
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0) return false;
  return true;
}

#if NANODDP_HAVE_CUDNN_HEADERS

namespace {

// What a plan depends on: the direction, the element type and the shape (the layout is fixed).
struct PlanKey {
  bool backward;
  DType t;
  int64_t b, tk, hq, hkv, d, s;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey key_of(bool backward, DType t, const AttentionShape& s) {
  return {backward, t, s.batch, s.tk, s.hq, s.hkv, s.d, s.kv_len};
}

using cudnn::Dims;
using cudnn::Graph;
constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// Tensor uids of the variant packs.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kDelta, kOne, kDQAccum };

// [B, T, H, D] memory (T rows allocated, S used) as a [B, H, S, D] view, and its transpose.
Dims bshd_strides(int64_t t, int64_t h, int64_t d) { return {t * h * d, d, h * d, 1}; }
Dims bhds_strides(int64_t t, int64_t h, int64_t d) { return {t * h * d, d, 1, h * d}; }

// scores with every key after its query set to -inf (row >= col keeps).
int64_t causal_mask(Graph& g, int64_t scores, const Dims& sd) {
  const int64_t row = g.virt(CUDNN_DATA_INT32, sd), col = g.virt(CUDNN_DATA_INT32, sd);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, -1, row, CUDNN_DATA_INT32, -1, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, -1, col, CUDNN_DATA_INT32, -1, 3);
  const int64_t keep = g.virt(CUDNN_DATA_BOOLEAN, sd);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  const int64_t out = g.virt(kF32, sd);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, kNegInf, out, kF32, keep);
  return out;
}

// scale * Q K^T, f32 [B, H, S, S].
int64_t scaled_scores(Graph& g, const Dims& sd) {
  const int64_t qk = g.virt(kF32, sd), scaled = g.virt(kF32, sd);
  g.matmul(kQ, kK, qk);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, kScale, scaled);
  return scaled;
}

void forward_graph(Graph& g, cudnnDataType_t io, const PlanKey& k) {
  const int64_t b = k.b, h = k.hq, hk = k.hkv, s = k.s, d = k.d;
  const Dims qd{b, h, s, d}, sd{b, h, s, s}, rd{b, h, s, 1};
  g.io(kQ, io, qd, bshd_strides(s, h, d));
  g.io(kK, io, {b, hk, d, s}, bhds_strides(k.tk, hk, d));  // K^T
  g.io(kV, io, {b, hk, s, d}, bshd_strides(k.tk, hk, d));
  g.io(kO, io, qd, bshd_strides(s, h, d));
  g.io(kStats, kF32, rd, {h * s, s, 1, 1});
  g.scalar(kScale);
  g.scalar(kNegInf);
  const int64_t masked = causal_mask(g, scaled_scores(g, sd), sd);
  const int64_t m = g.virt(kF32, rd), centred = g.virt(kF32, sd), e = g.virt(kF32, sd);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, m);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, m, centred);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, -1, e);
  const int64_t l = g.virt(kF32, rd), log_l = g.virt(kF32, rd), p = g.virt(io, sd);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, l);
  g.pointwise(CUDNN_POINTWISE_LOG, l, -1, log_l);
  g.pointwise(CUDNN_POINTWISE_ADD, m, log_l, kStats);
  g.pointwise(CUDNN_POINTWISE_DIV, e, l, p);
  g.matmul(p, kV, kO);
}

// out = a @ b into a kv-head gradient: straight for one query head per kv head, else per query
// head (io [B, Hq, S, D]) then summed over each group.
void kv_head_gradient(Graph& g, cudnnDataType_t io, const PlanKey& k, int64_t a, int64_t b, int64_t out) {
  if (k.hq == k.hkv) return g.matmul(a, b, out);
  const int64_t full = g.virt(io, {k.b, k.hq, k.s, k.d});
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

void backward_graph(Graph& g, cudnnDataType_t io, const PlanKey& k, bool deterministic) {
  const int64_t b = k.b, h = k.hq, hk = k.hkv, s = k.s, d = k.d;
  const Dims qd{b, h, s, d}, qs = bshd_strides(s, h, d), sd{b, h, s, s}, rd{b, h, s, 1}, rs{h * s, s, 1, 1};
  const Dims sd_t_strides{h * s * s, s * s, 1, s};  // a [B, H, S, S] tensor read transposed
  for (int64_t uid : {kQ, kO, kDO, kDQ}) g.io(uid, io, qd, qs);
  g.io(kK, io, {b, hk, d, s}, bhds_strides(k.tk, hk, d));  // K^T
  g.io(kV, io, {b, hk, d, s}, bhds_strides(k.tk, hk, d));  // V^T
  for (int64_t uid : {kDK, kDV}) g.io(uid, io, {b, hk, s, d}, bshd_strides(s, hk, d));
  g.io(kStats, kF32, rd, rs);
  g.io(kDelta, kF32, rd, rs);
  for (int64_t uid : {kScale, kNegInf, kOne}) g.scalar(uid);
  // delta = rowsum(dO * O)
  const int64_t prod = g.virt(kF32, qd, qs), rsum = g.virt(kF32, rd);
  g.pointwise(CUDNN_POINTWISE_MUL, kDO, kO, prod);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, rsum);
  g.pointwise(CUDNN_POINTWISE_MUL, rsum, kOne, kDelta);
  // P = exp(mask(S * scale - lse)); dV = P^T dO
  const int64_t shifted = g.virt(kF32, sd), p = g.virt(kF32, sd);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled_scores(g, sd), kStats, shifted);
  g.pointwise(CUDNN_POINTWISE_EXP, causal_mask(g, shifted, sd), -1, p);
  const int64_t p_t = g.virt(io, sd, sd_t_strides);
  g.reshape(p, p_t);
  kv_head_gradient(g, io, k, p_t, kDO, kDV);
  // dS = P (dO V^T - delta) * scale; dK = dS^T Q
  const int64_t dp = g.virt(kF32, sd), centred = g.virt(kF32, sd), ds = g.virt(kF32, sd), ds_scaled = g.virt(kF32, sd);
  g.matmul(kDO, kV, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, kDelta, centred);
  g.pointwise(CUDNN_POINTWISE_MUL, centred, p, ds);
  g.pointwise(CUDNN_POINTWISE_MUL, ds, kScale, ds_scaled);
  const int64_t ds_t = g.virt(io, sd, sd_t_strides);
  g.reshape(ds_scaled, ds_t);
  kv_head_gradient(g, io, k, ds_t, kQ, kDK);
  // dQ = dS K
  const int64_t k_rows = g.virt(io, {b, hk, s, d}, bshd_strides(k.tk, hk, d));
  g.reshape(kK, k_rows);
  if (deterministic) return g.matmul(ds_scaled, k_rows, kDQ);
  g.io(kDQAccum, kF32, qd, cudnn::packed_strides(qd));
  g.matmul(ds_scaled, k_rows, kDQAccum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, -1, kDQ);
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

std::string cudnn_attention_graph_problem(DType t, const AttentionShape& s, bool deterministic) {
  const CudnnLibrary& lib = cudnn_library();
  if (!lib.loaded) return "cuDNN 9 not found (" + lib.why_not + ")";
  const cudnn::Api api(lib);
  const cudnnDataType_t io = t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  try {
    Graph fwd(api), bwd(api);
    forward_graph(fwd, io, key_of(false, t, s));
    backward_graph(bwd, io, key_of(true, t, s), deterministic);
    fwd.finalize_without_handle();
    bwd.finalize_without_handle();
  } catch (const cudnn::BuildError& e) {
    return e.what;
  }
  return "";
}

struct CudnnAttention::Impl {
  Impl(int dev, bool det) : device(dev), deterministic(det) {}
  ~Impl() = default;  // the handle is left to the process's end, like the backend that owns it

  int device;
  bool deterministic;
  std::mutex mu;  // plans, workspace and the handle's stream
  std::unique_ptr<cudnn::Api> api;
  cudnnHandle_t handle = nullptr;
  std::string unavailable;  // why cuDNN cannot run at all, once known
  std::map<PlanKey, std::unique_ptr<Graph>> plans;
  std::map<PlanKey, std::string> refused;  // shapes no engine took, and why
  Tensor workspace;
  std::string last_engine;

  bool ready(std::string& why);
  Graph* plan(const PlanKey& k, std::string& why);
  void* workspace_for(size_t bytes);
  void run(const Graph& g, cudaStream_t stream, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
           void* ws);
};

// The library, its entry points and a handle, once; false with the reason when any is missing.
bool CudnnAttention::Impl::ready(std::string& why) {
  if (handle != nullptr) return true;
  if (unavailable.empty()) {
    const CudnnLibrary& lib = cudnn_library();
    if (!lib.loaded) {
      unavailable = "cuDNN 9 not found (" + lib.why_not + "): set NANODDP_CUDNN_PATH to its libcudnn.so.9";
    } else if (lib.version == 91000 || lib.version == 91001) {
      // NVIDIA's frontend refuses these two for 16-bit fused attention: known wrong results.
      unavailable = fmt::format("cuDNN {} has known bugs in bf16/fp16 fused attention: use 9.10.2 or later, or "
                                "another cuDNN 9 through NANODDP_CUDNN_PATH",
                                lib.version_string());
    } else {
      api = std::make_unique<cudnn::Api>(lib);
      cudnn_load_engines(lib);
      try {
        api->check(api->create_handle(&handle), "cudnnCreate");
      } catch (const cudnn::BuildError& e) {
        handle = nullptr;
        unavailable = e.what;
      }
    }
  }
  why = unavailable;
  return handle != nullptr;
}

Graph* CudnnAttention::Impl::plan(const PlanKey& k, std::string& why) {
  if (auto it = plans.find(k); it != plans.end()) return it->second.get();
  if (auto it = refused.find(k); it != refused.end()) {
    why = it->second;
    return nullptr;
  }
  const cudnnDataType_t io = k.t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  auto g = std::make_unique<Graph>(*api);
  try {
    if (k.backward) {
      backward_graph(*g, io, k, deterministic);
    } else {
      forward_graph(*g, io, k);
    }
    g->build(handle, deterministic && k.backward);
  } catch (const cudnn::BuildError& e) {
    why = fmt::format("cuDNN {} builds no {} plan for batch {}, {} tokens, {}/{} heads of {}: {}",
                      api->version, k.backward ? "backward" : "forward", k.b, k.s, k.hq, k.hkv, k.d, e.what);
    refused.emplace(k, why);
    return nullptr;
  }
  last_engine = g->engine();
  return plans.emplace(k, std::move(g)).first->second.get();
}

// The one workspace, grown (never shrunk) to `bytes`.
void* CudnnAttention::Impl::workspace_for(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (!workspace.defined() || static_cast<size_t>(workspace.numel()) < bytes)
    workspace = Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8, Device::cuda(device));
  return workspace.raw();
}

void CudnnAttention::Impl::run(const Graph& g, cudaStream_t stream, const std::vector<int64_t>& uids,
                               const std::vector<void*>& ptrs, void* ws) {
  try {
    api->check(api->set_stream(handle, stream), "cudnnSetStream");
    g.execute(handle, uids, ptrs, ws);
  } catch (const cudnn::BuildError& e) {
    NANODDP_FAIL("cuDNN attention failed on cuda:{}: {}: run with NANODDP_CUDA_ATTENTION=flash to use our kernels",
                 device, e.what);
  }
}

bool CudnnAttention::forward(DType t, void* out, float* lse, const void* q, const void* k, const void* v,
                             const AttentionShape& s, float scale, cudaStream_t stream, std::string& why) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->ready(why)) return false;
  Graph* g = impl_->plan(key_of(false, t, s), why);
  if (g == nullptr) return false;
  float neg_inf = impl_->api->version < 91000 ? std::numeric_limits<float>::lowest()
                                              : -std::numeric_limits<float>::infinity();
  void* ws = impl_->workspace_for(static_cast<size_t>(g->workspace_bytes()));
  impl_->run(*g, stream, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
             {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), out, lse, &scale, &neg_inf}, ws);
  return true;
}

bool CudnnAttention::backward(DType t, void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k,
                              const void* v, const void* out, const float* lse, const AttentionShape& s, float scale,
                              cudaStream_t stream, std::string& why) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->ready(why)) return false;
  Graph* g = impl_->plan(key_of(true, t, s), why);
  if (g == nullptr) return false;
  // Workspace: cuDNN's, then delta f32 [B, H, S], then (nondeterministic) dQ's f32 accumulator.
  const size_t rows = static_cast<size_t>(s.batch * s.hq * s.tq);
  const size_t own = align_up(static_cast<size_t>(g->workspace_bytes()));
  const size_t accum = impl_->deterministic ? 0 : rows * static_cast<size_t>(s.d) * sizeof(float);
  char* ws = static_cast<char*>(impl_->workspace_for(own + align_up(rows * sizeof(float)) + accum));
  void* delta = ws + own;
  void* dq_accum = ws + own + align_up(rows * sizeof(float));
  // cuDNN before 9.6 adds into the accumulator without clearing it first.
  if (accum != 0 && impl_->api->version < 90600) NANODDP_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, accum, stream));
  float neg_inf = impl_->api->version < 91000 ? std::numeric_limits<float>::lowest()
                                              : -std::numeric_limits<float>::infinity();
  float one = 1.f;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kDelta, kScale, kNegInf, kOne};
  std::vector<void*> ptrs{const_cast<void*>(q),    const_cast<void*>(k),  const_cast<void*>(v),
                          const_cast<void*>(out),  const_cast<void*>(dout), const_cast<float*>(lse),
                          dq, dk, dv, delta, &scale, &neg_inf, &one};
  if (!impl_->deterministic) {
    uids.push_back(kDQAccum);
    ptrs.push_back(dq_accum);
  }
  impl_->run(*g, stream, uids, ptrs, ws);
  return true;
}

int CudnnAttention::plans() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->plans.size());
}

size_t CudnnAttention::workspace_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->workspace.defined() ? static_cast<size_t>(impl_->workspace.numel()) : 0;
}

std::string CudnnAttention::last_engine() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_engine;
}

#else  // built without cuDNN's headers: the route exists, and always says why it cannot run

struct CudnnAttention::Impl {
  Impl(int, bool) {}
};

bool CudnnAttention::forward(DType, void*, float*, const void*, const void*, const void*, const AttentionShape&,
                             float, cudaStream_t, std::string& why) {
  why = "this build had no cuDNN headers (cudnn_graph.h) to compile the cuDNN route against";
  return false;
}

bool CudnnAttention::backward(DType, void*, void*, void*, const void*, const void*, const void*, const void*,
                              const void*, const float*, const AttentionShape&, float, cudaStream_t,
                              std::string& why) {
  why = "this build had no cuDNN headers (cudnn_graph.h) to compile the cuDNN route against";
  return false;
}

std::string cudnn_attention_graph_problem(DType, const AttentionShape&, bool) {
  return "this build had no cuDNN headers (cudnn_graph.h) to compile the cuDNN route against";
}

int CudnnAttention::plans() const { return 0; }
size_t CudnnAttention::workspace_bytes() const { return 0; }
std::string CudnnAttention::last_engine() const { return {}; }

#endif

CudnnAttention::CudnnAttention(int device, bool deterministic)
    : impl_(std::make_unique<Impl>(device, deterministic)) {}
CudnnAttention::~CudnnAttention() = default;

}  // namespace nanoddp::cuda
