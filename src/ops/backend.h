// What a device backend implements: the ops of ops/ops.h after their shapes have been checked.
// See ops/ops.h for the meaning of each function.
#pragma once

#include "core/device.h"
#include "ops/ops.h"

namespace nanoddp::ops {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual void matmul(const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, float alpha,
                      float beta) = 0;
  virtual void fill(const Tensor& x, float value) = 0;
  virtual void scale(const Tensor& x, float s) = 0;
  virtual void axpy(const Tensor& y, const Tensor& x, float alpha) = 0;
  virtual void cast(const Tensor& dst, const Tensor& src) = 0;
  virtual void embedding_forward(const Tensor& out, const Tensor& table, const Tensor& ids) = 0;
  virtual void embedding_backward(const Tensor& dtable, const Tensor& dout, const Tensor& ids) = 0;
  virtual void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, float eps) = 0;
  virtual void rmsnorm_backward(const Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd,
                                bool accumulate) = 0;
  virtual void rotary(const Tensor& y, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t pos0,
                      bool inverse) = 0;
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                 const Tensor& v, int64_t kv_len, float scale) = 0;
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                  const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, float scale) = 0;
  virtual void relu2_forward(const Tensor& y, const Tensor& x) = 0;
  virtual void relu2_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) = 0;
  virtual void softcap_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                                     int64_t vocab, float softcap, float grad_scale) = 0;
  virtual void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                            const AdamWStep& s) = 0;
  virtual void muon_momentum(const Tensor& g, const Tensor& buf, float momentum) = 0;
  virtual void newton_schulz(const Tensor& x, int steps, bool bf16) = 0;

  // Blocks the host until all work queued on this backend's device has finished (a no-op on CPU).
  virtual void synchronize() = 0;
};

// The backend for a device (CPU always; CUDA only in builds with CUDA).
Backend& backend(Device device);

// Implemented by ops/cpu and ops/cuda.
Backend& cpu_backend();
Backend& cuda_backend(int device);

// Number of CPU threads kernels use (OpenMP); 0 keeps the OpenMP default.
void set_cpu_threads(int n);
int cpu_threads();

}  // namespace nanoddp::ops
