// Inference with a KV cache: each call runs only the new tokens through the model.
#include <cmath>

#include "model/gpt.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace nanoddp::model {

KVCache::KVCache(const GPT& model, int64_t batch) : capacity_(model.config().max_seq_len) {
  const auto& c = model.config();
  for (int64_t l = 0; l < c.n_layer; l++) {
    k_.push_back(Tensor::zeros({batch, capacity_, c.n_kv_head, c.head_dim()}, model.act_dtype(), model.device()));
    v_.push_back(Tensor::zeros({batch, capacity_, c.n_kv_head, c.head_dim()}, model.act_dtype(), model.device()));
  }
  if (c.is_2026()) prev_ = Tensor::zeros({batch, c.n_embd}, model.act_dtype(), model.device());
}

void KVCache::replicate(const KVCache& one) {
  NANODDP_ASSERT(one.k_.size() == k_.size() && one.k_[0].dim(0) == 1 && one.capacity_ == capacity_);
  const int64_t batch = k_[0].dim(0);
  for (size_t l = 0; l < k_.size(); l++) {
    for (int64_t b = 0; b < batch; b++) {
      copy(k_[l].rows(b, b + 1), one.k_[l]);
      copy(v_[l].rows(b, b + 1), one.v_[l]);
    }
  }
  for (int64_t b = 0; prev_.defined() && b < batch; b++) copy(prev_.rows(b, b + 1), one.prev_);
  length_ = one.length_;
}

namespace {

// Soft-capped f32 host copy of the first `vocab` columns of logits [rows, Vpad] (any device/dtype).
Tensor capped_host_logits(const Tensor& logits, int64_t vocab, float cap) {
  Tensor f32 = Tensor::empty(logits.shape(), DType::F32, logits.device());
  ops::cast(f32, logits);
  Tensor host = f32.device().is_cpu() ? f32 : f32.copy_to(Device::cpu());
  const int64_t rows = logits.dim(0), vpad = logits.dim(1);
  Tensor out = Tensor::empty({rows, vocab}, DType::F32);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < vocab; j++)
      out.data<float>()[r * vocab + j] = cap * std::tanh(host.data<float>()[r * vpad + j] / cap);
  return out;
}

}  // namespace

Tensor GPT::forward_logits(const Tensor& inputs) {
  NANODDP_ASSERT(inputs.ndim() == 2 && inputs.dtype() == DType::I32);
  Workspace& ws = workspace(train_ws_, inputs.dim(0), inputs.dim(1));
  load_batch(ws, inputs, nullptr);
  forward_trunk(ws);
  ops::rmsnorm_forward(ws.xf, ws.rstd_f, ws.x, kNormEps);
  Tensor logits = Tensor::empty({ws.tokens, config_.padded_vocab()}, act_dtype_, device_);
  ops::matmul(logits, ws.xf, false, params_[lm_head_].compute, true);
  return capped_host_logits(logits, config_.vocab_size, config_.softcap);
}

Tensor GPT::forward_next(const Tensor& ids, KVCache& cache) {
  return capped_host_logits(forward_next_device(ids, cache), config_.vocab_size, config_.softcap);
}

Tensor GPT::forward_next_device(const Tensor& ids, KVCache& cache) {
  NANODDP_ASSERT(ids.ndim() == 2 && ids.dtype() == DType::I32 && ids.dim(0) == cache.k_[0].dim(0));
  const int64_t batch = ids.dim(0), t = ids.dim(1);
  NANODDP_CHECK(cache.length_ + t <= cache.capacity_, "the context is full: {} positions, max_seq_len is {}",
                cache.length_ + t, cache.capacity_);
  Workspace& ws = workspace(infer_ws_, batch, t);
  load_batch(ws, ids, nullptr);
  forward_trunk(ws, &cache);
  cache.length_ += t;

  // Only the last position of each row needs logits.
  ops::rmsnorm_forward(ws.xf, ws.rstd_f, ws.x, kNormEps);
  const int64_t c = config_.n_embd;
  Tensor last = Tensor::empty({batch, c}, act_dtype_, device_);
  for (int64_t b = 0; b < batch; b++) ops::cast(last.rows(b, b + 1), ws.xf.rows(b * t + t - 1, b * t + t));
  Tensor logits = Tensor::empty({batch, config_.padded_vocab()}, act_dtype_, device_);
  ops::matmul(logits, last, false, params_[lm_head_].compute, true);
  return logits;
}

}  // namespace nanoddp::model
