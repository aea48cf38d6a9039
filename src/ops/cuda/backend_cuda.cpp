// The CUDA backend: unpacks tensors and launches the kernels of ops/cuda on the device's compute
// stream (core/cuda_util.h). No op synchronises with the host; scratch buffers come from the
// device's caching allocator, and since every op runs on the one compute stream, a scratch block
// freed here is only reused by work queued after this op.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda_util.h"
#include "core/log.h"
#include "ops/backend.h"
#include "ops/cuda/attention.cuh"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/cross_entropy.cuh"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/cudnn_library.h"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/embedding.cuh"
#include "ops/cuda/fp8.cuh"
#include "ops/cuda/gates.cuh"
#include "ops/cuda/matmul.h"
#include "ops/cuda/newton_schulz.cuh"
#include "ops/cuda/optimizer.cuh"
#include "ops/cuda/rmsnorm.cuh"
#include "ops/cuda/rotary.cuh"
#include "ops/cuda/sample.cuh"

namespace nanoddp::ops {

namespace {

// The activation dtype of t, checked: the kernels of ops/cuda take f32, bf16 or f16 buffers.
DType elem(const Tensor& t) {
  NANODDP_ASSERT(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
                 "CUDA kernels take f32, bf16 or f16, got {}", dtype_name(t.dtype()));
  return t.dtype();
}

void same_dtype(const Tensor& a, const Tensor& b) {
  NANODDP_ASSERT(a.dtype() == b.dtype(), "dtypes {} and {} differ", dtype_name(a.dtype()), dtype_name(b.dtype()));
}

// The routes that may run cuDNN's attention get one CudnnAttention (its plans and workspace).
std::unique_ptr<cuda::CudnnAttention> cudnn_for(cuda::AttentionRoute r, int device) {
  if (r != cuda::AttentionRoute::kAuto && r != cuda::AttentionRoute::kCudnn &&
      r != cuda::AttentionRoute::kCudnnNondeterministic)
    return nullptr;
  return std::make_unique<cuda::CudnnAttention>(device, r != cuda::AttentionRoute::kCudnnNondeterministic);
}

// How newton_schulz and polar_express cut a list of same-shape [rows, cols] matrices into batches:
// each matrix seen as [m, n] with m <= n, `per` matrices to a batch, a batch's X at most 2^25
// elements (64 MiB in bf16) so that its scratch stays small beside the model's memory.
struct NsBatches {
  static constexpr int64_t kMaxBatchElements = int64_t{1} << 25;
  int64_t rows, cols, m, n, total, per;
  bool tall;  // more rows than columns

  explicit NsBatches(const std::vector<Tensor>& xs)
      : rows(xs[0].dim(0)),
        cols(xs[0].dim(1)),
        m(std::min(rows, cols)),
        n(std::max(rows, cols)),
        total(static_cast<int64_t>(xs.size())),
        tall(rows > cols) {
    const int64_t fit = std::max<int64_t>(1, kMaxBatchElements / std::max<int64_t>(1, m * n));
    per = std::min<int64_t>({cuda::kNsMaxBatch, fit, total});
  }

  // The scratch of launch_ns_normalise for one batch.
  Tensor normalise_scratch(Device dev) const {
    return Tensor::empty({static_cast<int64_t>(cuda::ns_normalise_scratch_bytes(static_cast<int>(per)))}, DType::U8,
                         dev);
  }

  // The matrices [first, first + count) of xs, as the load and store kernels take them.
  static cuda::NsMatrices pointers(const std::vector<Tensor>& xs, int64_t first, int64_t count) {
    cuda::NsMatrices ptrs{};
    for (int64_t i = 0; i < count; i++) ptrs.p[i] = xs[static_cast<size_t>(first + i)].data<float>();
    return ptrs;
  }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device)
      : device_(device), stream_(cuda::compute_stream(device)), gemm_(device),
        route_(cuda::parse_attention_route(std::getenv("NANODDP_CUDA_ATTENTION"))),
        reference_attention_(route_ == cuda::AttentionRoute::kReference), cudnn_(cudnn_for(route_, device)) {
    cuda::set_device(device);
    NANODDP_CUDA_CHECK(cudaHostAlloc(&errors_, sizeof(cuda::ErrorRecord), cudaHostAllocMapped));
    std::memset(errors_, 0, sizeof(cuda::ErrorRecord));
    NANODDP_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sink_.record), errors_, 0));
    claim_ = Tensor::zeros({1}, DType::I32, Device::cuda(device));
    sink_.claim = claim_.data<int32_t>();
    if (route_ == cuda::AttentionRoute::kHopper) {
      const std::string why = cuda::hopper_attention_unavailable(device);
      NANODDP_CHECK(why.empty(), "NANODDP_CUDA_ATTENTION=hopper on cuda:{}, but {}: unset it (auto) or use flash",
                    device, why);
    }
  }

  NANODDP_OPS(NANODDP_OP_OVERRIDE)

  // cuBLASLt's FP8 kernels need Hopper (9.0) or newer; Ada (8.9) has some, which nanoddp does not try.
  std::string fp8_unsupported() override {
    int major = 0, minor = 0;
    NANODDP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    NANODDP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
    if (major >= 9) return {};
    return fmt::format("FP8 GEMMs need an NVIDIA GPU of compute capability 9.0 (Hopper) or newer; GPU {} is {}.{}",
                       device_, major, minor);
  }

  void synchronize() override {
    begin();
    NANODDP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    raise_kernel_error();
  }

  // Markers for ops/profile.h: a pool of CUDA events, created as needed and reused after
  // reset_markers (the profiler holds its lock around all three calls).
  int record_marker() override {
    cuda::set_device(device_);
    if (next_marker_ == markers_.size()) {
      cudaEvent_t e = nullptr;
      NANODDP_CUDA_CHECK(cudaEventCreate(&e));
      markers_.push_back(e);
    }
    NANODDP_CUDA_CHECK(cudaEventRecord(markers_[next_marker_], stream_));
    return static_cast<int>(next_marker_++);
  }

  double marker_seconds(int from, int to) override {
    cuda::set_device(device_);
    NANODDP_CUDA_CHECK(cudaEventSynchronize(markers_.at(static_cast<size_t>(to))));
    float ms = 0;
    NANODDP_CUDA_CHECK(cudaEventElapsedTime(&ms, markers_.at(static_cast<size_t>(from)),
                                            markers_.at(static_cast<size_t>(to))));
    return 1e-3 * ms;
  }

  void reset_markers() override { next_marker_ = 0; }

 private:
  // cuDNN's attention first where the route allows it and cuDNN takes the call (cudnn_attention.h).
  bool cudnn_takes(DType t, const cuda::AttentionShape& shape, const void* const* ptrs, int n) const {
    return cudnn_ != nullptr && cuda::cudnn_attention_takes(t, shape, ptrs, n);
  }

  // cuDNN declined a call it should take: an error where the user asked for cuDNN by name; under
  // auto, our flash kernels run, said once when cuDNN is there but refuses the shape (where it is
  // absent, `nanoddp env` says so).
  void cudnn_declined(const std::string& why) {
    NANODDP_CHECK(route_ == cuda::AttentionRoute::kAuto,
                  "NANODDP_CUDA_ATTENTION={} on cuda:{}, but {}: unset it (auto) to run our flash kernels where "
                  "cuDNN cannot",
                  route_ == cuda::AttentionRoute::kCudnn ? "cudnn" : "cudnn_nondeterministic", device_, why);
    if (cuda::cudnn_library().loaded && !warned_cudnn_.exchange(true))
      log::warn("{}; attention runs on nanoddp's flash kernels instead", why);
  }

  // The reference kernels are several times slower than the flash kernels; falling back to them
  // for bf16 or f16 (a head_dim below 64, above 128 or not a multiple of 8, odd alignment) is
  // said once, not silently.
  void warn_if_slow_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out) {
    if (reference_attention_ || q.dtype() == DType::F32 || warned_slow_attention_) return;
    const void* ptrs[] = {q.raw(), k.raw(), v.raw(), out.raw()};
    const cuda::AttentionShape shape{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3), k.dim(1)};
    if (cuda::attention_uses_flash(q.dtype(), shape, ptrs, 4, false) || warned_slow_attention_.exchange(true)) return;
    log::warn("attention with head_dim {} runs on the reference CUDA kernels, several times slower than the flash "
              "kernels (head_dim a multiple of 8 from 64 to 128): pick --head_dim so that the model width splits "
              "into such heads",
              q.dim(3));
  }

  // The reference kernels hold a row of scores per block in shared memory: a sequence too long for
  // the GPU's per-block limit is said in words, not as CUDA's "invalid argument" at the launch.
  void check_reference_attention_fits(const cuda::AttentionShape& shape, DType t, const void* const* ptrs, int n,
                                      bool backward) {
    if (cuda::attention_uses_flash(t, shape, ptrs, n, reference_attention_)) return;
    const size_t need = cuda::reference_attention_smem_bytes(shape, backward);
    if (smem_limit_ == 0)
      NANODDP_CUDA_CHECK(cudaDeviceGetAttribute(&smem_limit_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    NANODDP_CHECK(need <= static_cast<size_t>(smem_limit_),
                  "attention over {} keys with head_dim {} on the reference CUDA kernels ({}) needs {} KiB of shared "
                  "memory per block, more than this GPU's {} KiB: use --dtype bf16 with a head_dim that is a multiple "
                  "of 8 from 64 to 128 (the flash kernels), or a shorter --max_seq_len",
                  shape.kv_len, shape.d,
                  reference_attention_ ? "NANODDP_CUDA_ATTENTION=reference" : "f32, or a head_dim they do not take",
                  (need + 1023) / 1024, smem_limit_ / 1024);
  }

  // Every op: make the device current on this thread, report bad input an earlier kernel found.
  cudaStream_t begin() {
    cuda::set_device(device_);
    raise_kernel_error();
    return stream_;
  }

  // Kernels cannot throw: they leave bad ids in the ErrorRecord, which this turns into an Error
  // at the next op (or synchronize) after the kernel has run.
  void raise_kernel_error() {
    const int kind = *reinterpret_cast<volatile int*>(&errors_->kind);
    if (kind == cuda::kNoError) return;
    std::atomic_thread_fence(std::memory_order_acquire);  // the record's other fields after its kind
    const cuda::ErrorRecord r = *errors_;
    std::memset(errors_, 0, sizeof(cuda::ErrorRecord));
    NANODDP_CUDA_CHECK(cudaMemsetAsync(claim_.raw(), 0, sizeof(int32_t), stream_));
    const char* what = kind == cuda::kTokenIdOutOfRange ? "token id" : "target id";
    NANODDP_FAIL("{} {} at position {} is outside [0, {}) (found by a CUDA kernel of an earlier op on cuda:{}): "
                 "check the data's vocabulary against the model's vocab_size",
                 what, r.value, r.index, r.limit, device_);
  }

  int device_;
  cudaStream_t stream_;
  cuda::CublasLtGemm gemm_;
  cuda::AttentionRoute route_;  // NANODDP_CUDA_ATTENTION (cudnn_attention.h)
  bool reference_attention_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_;  // null under the flash and reference routes
  int smem_limit_ = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, read at the first reference attention
  cuda::ErrorRecord* errors_ = nullptr;  // pinned host memory, mapped
  Tensor claim_;                        // i32 [1] on the device
  cuda::ErrorSink sink_{};               // what kernels get: the record's device address and claim_
  std::atomic<bool> warned_slow_attention_{false};
  std::atomic<bool> warned_cudnn_{false};
  std::vector<cudaEvent_t> markers_;  // never destroyed, like the backend itself
  size_t next_marker_ = 0;
};

void CudaBackend::matmul(const Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, float alpha, float beta) {
  cudaStream_t s = begin();
  const int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  gemm_.run(s, m, n, k, alpha, {a.raw(), elem(a), a.dim(1), ta}, {b.raw(), elem(b), b.dim(1), tb}, beta,
            out.raw(), elem(out), n);
}

namespace {

// x [rows, cols] (any float dtype) quantized whole on the device into codes, as an operand of
// CublasLtGemm::run_fp8: transposed into [cols, rows] when x is stored with K as its rows.
// scalars: f32 [2] scratch, amax then the inverse scale.
cuda::Fp8Operand quantize_operand(cudaStream_t s, const Tensor& x, bool transpose, ops::Fp8Format format,
                                  const Tensor& codes, float* scalars) {
  const bool e5m2 = format == ops::Fp8Format::E5M2;
  NANODDP_CUDA_CHECK(cuda::launch_fp8_amax(elem(x), x.raw(), x.numel(), scalars, s));
  NANODDP_CUDA_CHECK(cuda::launch_fp8_quantize(elem(x), x.raw(), x.dim(0), x.dim(1), transpose, e5m2, scalars,
                                               static_cast<uint8_t*>(codes.raw()), scalars + 1, s));
  return {static_cast<const uint8_t*>(codes.raw()), e5m2, scalars + 1};
}

}  // namespace

// Note [FP8 GEMM layout] (ops/cuda/matmul.cpp): cuBLASLt takes a as [m, k] and b as [n, k], K innermost,
// so a is transposed while quantized when stored [k, m] (trans_a), and b when stored [k, n] (not
// trans_b). A Linear layer's forward needs neither; dx = dy W transposes W, dW = dy^T x both.
void CudaBackend::matmul_fp8(const Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb,
                             const ops::Fp8Gemm& how, float beta) {
  cudaStream_t s = begin();
  const int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  const Device dev = out.device();
  const Tensor codes_a = Tensor::empty({m * k}, DType::U8, dev), codes_b = Tensor::empty({n * k}, DType::U8, dev);
  const Tensor scalars = Tensor::empty({4}, DType::F32, dev);  // amax and inverse scale of a, then of b
  const cuda::Fp8Operand qa = quantize_operand(s, a, ta, how.a, codes_a, scalars.data<float>());
  const cuda::Fp8Operand qb = quantize_operand(s, b, !tb, how.b, codes_b, scalars.data<float>() + 2);
  if (gemm_.run_fp8(s, m, n, k, qa, qb, beta, out.raw(), elem(out), n, how.fast_accum)) return;
  // No FP8 kernel writes this output type (an f32 weight gradient, where cuBLASLt lacks f32 outputs):
  // the product in bf16, as nanochat's _scaled_mm returns it, then added in f32. beta is 0 or 1 here.
  const Tensor product = Tensor::empty({m, n}, DType::BF16, dev);
  NANODDP_CHECK(out.dtype() == DType::F32 && (beta == 0.f || beta == 1.f) &&
                    gemm_.run_fp8(s, m, n, k, qa, qb, 0.f, product.raw(), DType::BF16, n, how.fast_accum),
                "cuBLASLt offers no FP8 GEMM for {}x{}x{} into {} on this GPU: run without --fp8", m, n, k,
                dtype_name(out.dtype()));
  if (beta == 0.f) {
    cast(out, product);
  } else {
    const Tensor widened = Tensor::empty({m, n}, DType::F32, dev);
    cast(widened, product);
    axpy(out, widened, 1.f);
  }
}

void CudaBackend::fill(const Tensor& x, float value) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_fill(elem(x), x.raw(), x.numel(), value, s));
}

void CudaBackend::scale(const Tensor& x, float v) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_scale(elem(x), x.raw(), x.numel(), v, s));
}

void CudaBackend::scale_rows(const Tensor& x, const Tensor& v) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_scale_rows(x.data<float>(), v.data<float>(), x.dim(0), x.dim(1), s));
}

void CudaBackend::axpy(const Tensor& y, const Tensor& x, float alpha) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_axpy(elem(y), y.raw(), x.raw(), y.numel(), alpha, s));
}

void CudaBackend::cast(const Tensor& dst, const Tensor& src) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_cast(elem(dst), dst.raw(), elem(src), src.raw(), dst.numel(), s));
}

void CudaBackend::embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) {
  cudaStream_t s = begin();
  same_dtype(out, table);
  NANODDP_CUDA_CHECK(cuda::launch_embedding_forward(elem(out), out.raw(), table.raw(), ids.data<int32_t>(),
                                                   ids.numel(), table.dim(0), table.dim(1), sink_, s));
}

void CudaBackend::embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  cudaStream_t s = begin();
  const int64_t n = ids.numel(), c = dtable.dim(1);
  const size_t bytes = cuda::embedding_backward_scratch_bytes(n, c);
  Tensor scratch = Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8, dtable.device());
  NANODDP_CUDA_CHECK(cuda::launch_embedding_backward(elem(dout), dtable.data<float>(), dout.raw(),
                                                    ids.data<int32_t>(), n, dtable.dim(0), c, scratch.raw(), bytes,
                                                    sink_, s));
}

void CudaBackend::rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) {
  cudaStream_t s = begin();
  same_dtype(y, x);
  const int64_t c = x.dim(-1);
  NANODDP_CUDA_CHECK(cuda::launch_rmsnorm_forward(elem(x), y.raw(), rstd.data<float>(), x.raw(), x.numel() / c, c,
                                                 eps, s));
}

void CudaBackend::rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, bool accumulate) {
  cudaStream_t s = begin();
  same_dtype(dx, dy);
  same_dtype(dy, y);
  const int64_t c = y.dim(-1);
  NANODDP_CUDA_CHECK(cuda::launch_rmsnorm_backward(elem(y), dx.raw(), dy.raw(), y.raw(), rstd.data<float>(),
                                                  y.numel() / c, c, accumulate, s));
}

void CudaBackend::rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0, bool inverse) {
  cudaStream_t s = begin();
  same_dtype(y, x);
  NANODDP_CUDA_CHECK(cuda::launch_rotary(elem(x), y.raw(), x.raw(), cos.data<float>(), sin.data<float>(), x.dim(0),
                                        x.dim(1), x.dim(2), x.dim(3), pos0, inverse, s));
}

void CudaBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, int64_t kv_len, float scale, int64_t window) {
  cudaStream_t s = begin();
  same_dtype(out, q);
  same_dtype(q, k);
  same_dtype(k, v);
  const cuda::AttentionShape shape{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3), kv_len, window};
  const void* cudnn_ptrs[] = {out.raw(), lse.raw(), q.raw(), k.raw(), v.raw()};
  if (cudnn_takes(q.dtype(), shape, cudnn_ptrs, 5)) {
    std::string why;
    if (cudnn_->forward(q.dtype(), out.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(), shape, scale, s, why))
      return;
    cudnn_declined(why);
  }
  warn_if_slow_attention(q, k, v, out);
  const void* ptrs[] = {out.raw(), q.raw(), k.raw(), v.raw()};
  // The Hopper forward takes what the flash forward takes (attention_hopper.cuh).
  if (route_ == cuda::AttentionRoute::kHopper && cuda::attention_uses_flash(q.dtype(), shape, ptrs, 4, false)) {
    NANODDP_CUDA_CHECK(cuda::launch_hopper_forward(elem(q), out.raw(), lse.data<float>(), q.raw(), k.raw(), v.raw(),
                                                  shape, scale, s));
    return;
  }
  check_reference_attention_fits(shape, q.dtype(), ptrs, 4, /*backward=*/false);
  NANODDP_CUDA_CHECK(cuda::launch_attention_forward(elem(q), out.raw(), lse.data<float>(), q.raw(), k.raw(),
                                                   v.raw(), shape, scale, reference_attention_, s));
}

void CudaBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, float scale, int64_t window) {
  cudaStream_t s = begin();
  for (const Tensor* t : {&dq, &dk, &dv, &dout, &k, &v, &out}) same_dtype(*t, q);
  const cuda::AttentionShape shape{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3), q.dim(1), window};
  const void* cudnn_ptrs[] = {dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(),
                              k.raw(),  v.raw(),  out.raw(), lse.raw()};
  if (cudnn_takes(q.dtype(), shape, cudnn_ptrs, 9)) {
    std::string why;
    if (cudnn_->backward(q.dtype(), dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw(), out.raw(),
                         lse.data<float>(), shape, scale, s, why))
      return;
    cudnn_declined(why);
  }
  const void* ptrs[] = {dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(), k.raw(), v.raw()};
  check_reference_attention_fits(shape, q.dtype(), ptrs, 7, /*backward=*/true);
  const size_t bytes = cuda::attention_backward_scratch_bytes(shape);
  Tensor scratch = Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8, q.device());
  NANODDP_CUDA_CHECK(cuda::launch_attention_backward(elem(q), dq.raw(), dk.raw(), dv.raw(), dout.raw(), q.raw(),
                                                    k.raw(), v.raw(), out.raw(), lse.data<float>(), shape, scale,
                                                    scratch.raw(), reference_attention_, s,
                                                    route_ == cuda::AttentionRoute::kHopper));
}

void CudaBackend::relu2_forward(const Tensor& y, const Tensor& x) {
  cudaStream_t s = begin();
  same_dtype(y, x);
  NANODDP_CUDA_CHECK(cuda::launch_relu2_forward(elem(x), y.raw(), x.raw(), x.numel(), s));
}

void CudaBackend::relu2_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  cudaStream_t s = begin();
  same_dtype(dx, dy);
  same_dtype(dy, x);
  NANODDP_CUDA_CHECK(cuda::launch_relu2_backward(elem(x), dx.raw(), dy.raw(), x.raw(), x.numel(), s));
}

void CudaBackend::softcap_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab, float softcap, float grad_scale) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_softcap_cross_entropy(elem(logits), losses.data<float>(), logits.raw(),
                                                       targets.data<int32_t>(), logits.dim(0), logits.dim(1), vocab,
                                                       softcap, grad_scale, sink_, s));
}

void CudaBackend::sample_tokens(const Tensor& ids, const Tensor& logits, const Tensor& uniforms, int64_t vocab,
                                float softcap, float temperature, int64_t top_k) {
  cudaStream_t s = begin();
  const int64_t rows = logits.dim(0);
  Tensor z = Tensor::empty({rows, vocab}, DType::F32, logits.device());  // the capped logits
  const cuda::SampleArgs a{rows, logits.dim(1), vocab, softcap, temperature, top_k};
  NANODDP_CUDA_CHECK(cuda::launch_sample_tokens(elem(logits), ids.data<int32_t>(), logits.raw(),
                                                uniforms.data<float>(), z.data<float>(), a, s));
}

void CudaBackend::adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& st) {
  cudaStream_t s = begin();
  // The scalars exactly as the CPU kernel (ops/cpu/optimizer.cpp) computes them.
  const double bc1 = 1.0 - std::pow(double(st.beta1), double(st.step));
  const double bc2 = 1.0 - std::pow(double(st.beta2), double(st.step));
  const cuda::AdamWScalars sc{static_cast<float>(st.lr / bc1), static_cast<float>(std::sqrt(bc2)),
                             1.f - st.lr * st.weight_decay, st.beta1, st.beta2, st.eps};
  NANODDP_CUDA_CHECK(cuda::launch_adamw(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(),
                                       p.numel(), sc, s));
}

void CudaBackend::sum_squares(const Tensor& out, const Tensor& x) {
  cudaStream_t s = begin();
  // The partials come from the caching allocator (stream-ordered on the compute stream).
  Tensor partials = Tensor::empty({cuda::kSumSquaresBlocks}, DType::F32, x.device());
  NANODDP_CUDA_CHECK(cuda::launch_sum_squares(out.data<float>(), x.data<float>(), x.numel(), partials.data<float>(), s));
}

void CudaBackend::muon_momentum(const Tensor& g, const Tensor& buf, float momentum) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_muon_momentum(g.data<float>(), buf.data<float>(), g.numel(), momentum, s));
}

// Newton-Schulz (ops.h) in the storage type of its mode: X [b, m, n] (m <= n, each x transposed
// when it has more rows than columns), A, cA, B [b, m, m], BX [b, m, n], for a batch of b of the
// matrices. GEMMs on cuBLASLt (strided batches) accumulate in f32 and round once into that type;
// the elementwise stages round as the CPU kernel does, so bf16 mode follows nanochat's bf16 tensor
// arithmetic step for step. A batch is one launch per stage, 35 launches for 5 steps (load, 3 to
// normalise, 6 per step, store) however many matrices it holds: one matrix at a time, a depth-20
// model's 120 Muon matrices cost 4,200 small launches per optimizer step, and a 1280 x 1280 GEMM
// fills fewer tiles than an H100 has multiprocessors.
void CudaBackend::newton_schulz(const std::vector<Tensor>& xs, int steps, bool bf16) {
  cudaStream_t s = begin();
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  const NsBatches batches(xs);
  const int64_t rows = batches.rows, cols = batches.cols, m = batches.m, n = batches.n, per = batches.per;
  const bool tr = batches.tall;
  const DType t = bf16 ? DType::BF16 : DType::F32;
  const Device dev = xs[0].device();
  Tensor X = Tensor::empty({per, m, n}, t, dev), A = Tensor::empty({per, m, m}, t, dev);
  Tensor cA = Tensor::empty({per, m, m}, t, dev), B = Tensor::empty({per, m, m}, t, dev);
  Tensor BX = Tensor::empty({per, m, n}, t, dev);
  Tensor norm = batches.normalise_scratch(dev);
  for (int64_t first = 0; first < batches.total; first += per) {
    const int64_t k = std::min(per, batches.total - first);
    const cuda::NsMatrices ptrs = NsBatches::pointers(xs, first, k);
    const int kb = static_cast<int>(k);
    const cuda::GemmBatch mn_mn{k, m * n, m * n, m * m}, mm_mm{k, m * m, m * m, m * m}, mm_mn{k, m * m, m * n, m * n};
    NANODDP_CUDA_CHECK(cuda::launch_ns_load(t, X.raw(), ptrs, kb, rows, cols, tr, s));
    NANODDP_CUDA_CHECK(cuda::launch_ns_normalise(t, X.raw(), kb, m * n, norm.raw(), s));
    for (int i = 0; i < steps; i++) {
      // A = X X^T
      gemm_.run(s, m, m, n, 1.f, {X.raw(), t, n, false}, {X.raw(), t, n, true}, 0.f, A.raw(), t, m, mn_mn);
      NANODDP_CUDA_CHECK(cuda::launch_ns_scale(t, cA.raw(), A.raw(), k * m * m, c, s));
      // B = (cA) A, then B = bA + B
      gemm_.run(s, m, m, m, 1.f, {cA.raw(), t, m, false}, {A.raw(), t, m, false}, 0.f, B.raw(), t, m, mm_mm);
      NANODDP_CUDA_CHECK(cuda::launch_ns_combine(t, B.raw(), A.raw(), B.raw(), k * m * m, b, s));
      // X = aX + B X
      gemm_.run(s, m, n, m, 1.f, {B.raw(), t, m, false}, {X.raw(), t, n, false}, 0.f, BX.raw(), t, n, mm_mn);
      NANODDP_CUDA_CHECK(cuda::launch_ns_combine(t, X.raw(), X.raw(), BX.raw(), k * m * n, a, s));
    }
    NANODDP_CUDA_CHECK(cuda::launch_ns_store(t, ptrs, X.raw(), kb, rows, cols, tr, s));
  }
}

// Polar Express (ops.h), on the stages and scratch layout of newton_schulz above, but with
// nanochat's tall branch: a matrix with more rows than columns is kept as it is, [n, m], and
// multiplied from the right (A = X^T X, X = a X + X B), so XB is [b, n, m] then. Per step:
// A, AA = A A, B = round(c AA), B = round(round(b A) + B), XB, X = round(round(a X) + XB).
void CudaBackend::polar_express(const std::vector<Tensor>& xs, int steps, bool bf16) {
  cudaStream_t s = begin();
  const NsBatches batches(xs);
  const int64_t rows = batches.rows, cols = batches.cols, m = batches.m, n = batches.n, per = batches.per;
  const bool tall = batches.tall;
  const DType t = bf16 ? DType::BF16 : DType::F32;
  const Device dev = xs[0].device();
  Tensor X = Tensor::empty({per, m, n}, t, dev), XB = Tensor::empty({per, m, n}, t, dev);
  Tensor A = Tensor::empty({per, m, m}, t, dev), AA = Tensor::empty({per, m, m}, t, dev);
  Tensor B = Tensor::empty({per, m, m}, t, dev);
  Tensor norm = batches.normalise_scratch(dev);
  for (int64_t first = 0; first < batches.total; first += per) {
    const int64_t k = std::min(per, batches.total - first);
    const cuda::NsMatrices ptrs = NsBatches::pointers(xs, first, k);
    const int kb = static_cast<int>(k);
    const cuda::GemmBatch xx{k, m * n, m * n, m * m}, mm{k, m * m, m * m, m * m};
    const cuda::GemmBatch bx{k, m * m, m * n, m * n}, xb{k, m * n, m * m, m * n};
    NANODDP_CUDA_CHECK(cuda::launch_ns_load(t, X.raw(), ptrs, kb, rows, cols, false, s));
    NANODDP_CUDA_CHECK(cuda::launch_ns_normalise(t, X.raw(), kb, m * n, norm.raw(), s, 1.01f, 1e-6f));
    for (int i = 0; i < steps; i++) {
      const float a = kPolarExpressCoeffs[i][0], b = kPolarExpressCoeffs[i][1], c = kPolarExpressCoeffs[i][2];
      if (tall)  // A = X^T X, X stored [n, m]
        gemm_.run(s, m, m, n, 1.f, {X.raw(), t, m, true}, {X.raw(), t, m, false}, 0.f, A.raw(), t, m, xx);
      else  // A = X X^T, X stored [m, n]
        gemm_.run(s, m, m, n, 1.f, {X.raw(), t, n, false}, {X.raw(), t, n, true}, 0.f, A.raw(), t, m, xx);
      gemm_.run(s, m, m, m, 1.f, {A.raw(), t, m, false}, {A.raw(), t, m, false}, 0.f, AA.raw(), t, m, mm);
      NANODDP_CUDA_CHECK(cuda::launch_ns_scale(t, B.raw(), AA.raw(), k * m * m, c, s));
      NANODDP_CUDA_CHECK(cuda::launch_ns_combine(t, B.raw(), A.raw(), B.raw(), k * m * m, b, s));
      if (tall)  // X B: [n, m]
        gemm_.run(s, n, m, m, 1.f, {X.raw(), t, m, false}, {B.raw(), t, m, false}, 0.f, XB.raw(), t, m, xb);
      else  // B X: [m, n]
        gemm_.run(s, m, n, m, 1.f, {B.raw(), t, m, false}, {X.raw(), t, n, false}, 0.f, XB.raw(), t, n, bx);
      NANODDP_CUDA_CHECK(cuda::launch_ns_combine(t, X.raw(), X.raw(), XB.raw(), k * m * n, a, s));
    }
    NANODDP_CUDA_CHECK(cuda::launch_ns_store(t, ptrs, X.raw(), kb, rows, cols, false, s));
  }
}

void CudaBackend::normuon_update(const Tensor& p, const Tensor& g, const Tensor& v, float lr, float weight_decay,
                                 float beta2) {
  cudaStream_t s = begin();
  Tensor scratch = Tensor::empty({2 * v.numel()}, DType::F32, p.device());  // mean squares, scales
  NANODDP_CUDA_CHECK(cuda::launch_normuon_update(p.data<float>(), g.data<float>(), v.data<float>(), p.dim(0),
                                                 p.dim(1), lr, weight_decay, beta2, scratch.data<float>(), s));
}

void CudaBackend::value_gate_forward(const Tensor& v, const Tensor& gate, const Tensor& x, const Tensor& w,
                                     const Tensor& ve) {
  cudaStream_t s = begin();
  const int64_t n = x.dim(0), groups = w.dim(0);
  NANODDP_CUDA_CHECK(cuda::launch_value_gate_forward(elem(v), v.raw(), gate.data<float>(), x.raw(), w.raw(), ve.raw(),
                                                     n, x.dim(1), groups, w.dim(1), v.numel() / (n * groups), s));
}

void CudaBackend::value_gate_backward(const Tensor& dx, const Tensor& dw, const Tensor& dve, const Tensor& dv,
                                      const Tensor& x, const Tensor& w, const Tensor& ve, const Tensor& gate) {
  cudaStream_t s = begin();
  const int64_t n = x.dim(0), groups = w.dim(0);
  NANODDP_CUDA_CHECK(cuda::launch_value_gate_backward(elem(x), dx.raw(), dw.data<float>(), dve.raw(), dv.raw(),
                                                      x.raw(), w.raw(), ve.raw(), gate.data<float>(), n, x.dim(1),
                                                      groups, w.dim(1), dv.numel() / (n * groups), s));
}

void CudaBackend::smear_forward(const Tensor& y, const Tensor& gate, const Tensor& x, const Tensor& prev,
                                const Tensor& w, const Tensor& lambda, int64_t seq) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_smear_forward(elem(x), y.raw(), gate.data<float>(), x.raw(),
                                                prev.defined() ? prev.raw() : nullptr, w.raw(), lambda.data<float>(),
                                                x.dim(0), x.dim(1), w.numel(), seq, s));
}

void CudaBackend::smear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dlambda, const Tensor& dgate,
                                 const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& lambda,
                                 const Tensor& gate, int64_t seq) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_smear_backward(elem(x), dx.raw(), dw.data<float>(), dlambda.data<float>(),
                                                 dgate.data<float>(), dy.raw(), x.raw(), w.raw(), lambda.data<float>(),
                                                 gate.data<float>(), x.dim(0), x.dim(1), w.numel(), seq, s));
}

void CudaBackend::scalar_mix_forward(const Tensor& y, const Tensor& x, const Tensor& a, const Tensor& b, float sign) {
  cudaStream_t s = begin();
  NANODDP_CUDA_CHECK(cuda::launch_scalar_mix_forward(elem(y), y.raw(), x.raw(), a.defined() ? a.data<float>() : nullptr,
                                                     b.data<float>(), sign, y.numel(), s));
}

void CudaBackend::scalar_mix_backward(const Tensor& dy, const Tensor& dx, const Tensor& da, const Tensor& db,
                                      const Tensor& y_in, const Tensor& x, const Tensor& a, const Tensor& b,
                                      float sign) {
  cudaStream_t s = begin();
  const bool has_a = a.defined();
  NANODDP_CUDA_CHECK(cuda::launch_scalar_mix_backward(elem(dy), dy.raw(), dx.raw(), has_a ? da.data<float>() : nullptr,
                                                      db.data<float>(), y_in.raw(), x.raw(),
                                                      has_a ? a.data<float>() : nullptr, b.data<float>(), sign,
                                                      dy.numel(), s));
}

}  // namespace

// One backend per device, created on first use and never destroyed (like the device allocators:
// tearing down cuBLASLt after the CUDA runtime at exit is not safe).
Backend& cuda_backend(int device) {
  constexpr int kMaxDevices = 16;
  static std::array<std::atomic<CudaBackend*>, kMaxDevices> backends{};
  static std::mutex mu;
  if (device >= 0 && device < kMaxDevices) {
    if (CudaBackend* b = backends[device].load(std::memory_order_acquire)) return *b;
  }
  const int count = cuda_device_count();
  NANODDP_CHECK(device >= 0 && device < count && device < kMaxDevices, "CUDA device {} does not exist ({} visible): "
                "use --device cuda:N with N < {}, or check CUDA_VISIBLE_DEVICES", device, count, count);
  std::lock_guard lock(mu);
  if (backends[device].load() == nullptr) backends[device].store(new CudaBackend(device), std::memory_order_release);
  return *backends[device].load();
}

}  // namespace nanoddp::ops
