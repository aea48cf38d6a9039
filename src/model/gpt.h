// nanochat's GPT with a hand-written forward and backward over the ops interface (ops/ops.h), so
// the same code trains on the CPU (f32) and on CUDA (bf16 activations, f32 master weights).
//
//   x = norm(wte[idx]);  for each block: x += attn(norm(x)); x += mlp(norm(x))
//   logits = lm_head(norm(x))[:, :vocab];  loss = CE(15 tanh(logits / 15), targets)
//   attn: q, k, v = c_q, c_k, c_v (x); q, k = norm(rotary(q)), norm(rotary(k)); causal SDPA; c_proj
//   mlp:  c_proj(relu(c_fc(x))^2)
// Norms have no weight and eps = f32 machine epsilon; no Linear has a bias.
//
// Recipe 2026 (GPTConfig::recipe; nanochat at commit 92d63d4), the differences:
//   x0 = smear(norm(wte[idx])): x0[t] = e[t] + smear_lambda sigmoid(e[t, :24] . smear_gate) e[t - 1]
//   each block l: x = resid_lambdas[l] x + x0_lambdas[l] x0 before it; on alternating layers (the
//     last always) v += 3 sigmoid(xn[:, :12] ve_gate^T) * value_embeds[l][idx] per kv head;
//     q, k scaled by 1.2 after the QK norm (folded into the attention scale: 1.44 / sqrt(head_dim));
//     attention in windows (GPTConfig::window)
//   after the blocks: x -= backout_lambda x_mid, x_mid the output of block n_layer / 2.
// The code for these lives in recipe2026.cpp.
//
// Memory: activations for backward are kept per layer (see Workspace in gpt.cpp); the LM head
// runs in row chunks so that [tokens, vocab] logits never exist for the whole batch at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/parameter.h"

namespace nanoddp::model {

class KVCache;
struct Workspace;

// nanochat's choice of the Linear layers --fp8 converts (base_train.py's module filter): both sizes
// multiples of 16 (FP8 GEMMs need them) and the smaller at least 128. In nanochat's GPT that is every
// block matrix and the LM head from depth 2 up (model_dim 128), never the 2026 recipe's gates.
bool fp8_converts(int64_t in_features, int64_t out_features);

class GPT final : public ParameterSet {
 public:
  GPT(const GPTConfig& config, Device device, DType act_dtype = DType::F32);
  ~GPT() override;
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return config_; }
  Device device() const { return device_; }
  DType act_dtype() const { return act_dtype_; }

  // In nanochat's named_parameters() order: wte, then per block c_q, c_k, c_v, attn.c_proj,
  // c_fc, mlp.c_proj, then lm_head.
  std::vector<Parameter>& parameters() override { return params_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  // Throws nanoddp::Error when no parameter has that name.
  Parameter& parameter(const std::string& name);

  // nanochat's init: Linear N(0, 1/sqrt(fan_in) * min(1, sqrt(fan_out / fan_in))), wte N(0, 1),
  // lm_head and both c_proj zero. Each tensor draws from its own stream of `seed`.
  void init_weights(uint64_t seed);
  // Copies the f32 weights into the activation-dtype copies (after the optimizer, or a load).
  void refresh_compute_weights() override;
  double adamw_lr_scale() const override;
  void zero_grad();

  // One micro-step: forward, loss, backward. inputs, targets: i32 [B, T] on the host; target -1
  // is ignored. Gradients of loss_scale * mean(loss) are added to each grad (written over it
  // when accumulate is false). Returns the micro-batch's mean loss in nats.
  // See Note [accumulation order]: with accumulate, each parameter's micro-step gradient is
  // computed whole, then added to .grad in one addition per element.
  double forward_backward(const Tensor& inputs, const Tensor& targets, float loss_scale, bool accumulate,
                          const GradReadyFn& on_grad_ready = {});
  // The same micro-step without reading its loss, so that nothing waits for the device: the
  // per-token losses in nats are written into `losses`, f32 [B * T] on this model's device (0 where
  // the target is -1), for the caller to read when it needs them. Returns the number of targets
  // that are not -1, the divisor of the micro-batch's mean.
  int64_t forward_backward_deferred(const Tensor& losses, const Tensor& inputs, const Tensor& targets,
                                    float loss_scale, bool accumulate, const GradReadyFn& on_grad_ready = {});

  // Seconds the last forward_backward spent before its loss (embedding and blocks; the LM head's
  // chunks run forward and backward interleaved and count as backward). On a GPU this times the
  // launches unless set_phase_timing(true) makes the boundary wait for the device.
  double last_forward_seconds() const { return last_forward_seconds_; }
  void set_phase_timing(bool on) { phase_timing_ = on; }

  // nanochat's --fp8 (nanochat/fp8.py, Note [fp8 layers] in block.cpp): in a training micro-step the
  // three GEMMs of each layer fp8_converts accepts run as ops::matmul_fp8; evaluation and inference
  // stay in the activation dtype, as nanochat's disable_fp8 keeps them. The micro-step's tokens must
  // then be a multiple of 16. On the CPU this is the emulation (tests); callers check
  // ops::fp8_unsupported first where speed is the point.
  void set_fp8(bool on) { fp8_ = on; }
  bool fp8() const { return fp8_; }

  // Per-token losses in nats, f32 [B * T] on the host (0 where target == -1). No gradients.
  Tensor forward_losses(const Tensor& inputs, const Tensor& targets);

  // Soft-capped logits of every position, f32 [B * T, vocab_size] on the host (for tests and
  // tools; training never materialises them).
  Tensor forward_logits(const Tensor& inputs);

  // Inference: runs ids (i32 [B, Tq], host) at positions cache.length() .. + Tq, appends their
  // keys and values to the cache, and returns the soft-capped logits of the last position as
  // f32 [B, vocab_size] on the host.
  Tensor forward_next(const Tensor& ids, KVCache& cache);
  // The same step, returning the last position's logits where they were computed, uncapped:
  // [B, padded vocab] in the activation dtype on the model's device (generation samples them
  // there with ops::sample_tokens, which applies the soft cap, and copies back only the ids).
  Tensor forward_next_device(const Tensor& ids, KVCache& cache);

 private:
  friend class KVCache;
  struct BlockWeights {
    int c_q, c_k, c_v, attn_proj, c_fc, mlp_proj;  // indices into params_
    int ve_gate = -1, value_embed = -1;            // recipe 2026, layers with a value embedding
  };
  // Recipe 2026's parameters other than the blocks' (indices into params_).
  struct ScalarWeights {
    int resid = -1, x0 = -1, smear_lambda = -1, backout = -1, smear_gate = -1;
  };

  void add_2026_parameters();
  void init_weights_2026(uint64_t seed);
  // Recipe 2026: the smear after the embedding's norm (reading and updating the cache's previous
  // token when given), and its backward from ws.dx0 (the gradient of x0) into ws.dx.
  void smear_forward(Workspace& ws, KVCache* cache);
  void smear_backward(Workspace& ws, bool accumulate, const GradReadyFn& ready);
  // x = resid_lambdas[l] x + x0_lambdas[l] x0 before block l, and its backward (ws.dx in place,
  // ws.dx0 accumulating).
  void mix_forward(Workspace& ws, int layer);
  void mix_backward(Workspace& ws, int layer);
  // x -= backout_lambda x_mid after the blocks, and its backward into ws.dbackout.
  void backout_forward(Workspace& ws);
  void backout_backward(Workspace& ws);
  // v += gate * value_embeds[l][ids] (attention's forward), and its backward after dv is known.
  void value_gate_forward(Workspace& ws, int layer);
  void value_gate_backward(Workspace& ws, int layer, bool accumulate, const GradReadyFn& ready);
  // The scalar gradients gathered in ws.dscalars, into (or added to) their parameters' grads.
  void finish_scalar_grads(Workspace& ws, bool accumulate, const GradReadyFn& ready);

  // The activation storage for this shape in `slot` (reallocated when the shape changes).
  Workspace& workspace(std::unique_ptr<Workspace>& slot, int64_t batch, int64_t seq);
  void load_batch(Workspace& ws, const Tensor& inputs, const Tensor* targets);
  void embed_forward(Workspace& ws);
  // With a cache, positions start at cache->length() and keys/values are appended to it.
  void attention_forward(Workspace& ws, int layer, KVCache* cache = nullptr);
  void mlp_forward(Workspace& ws, int layer);
  void attention_backward(Workspace& ws, int layer, bool accumulate, const GradReadyFn& ready);
  void mlp_backward(Workspace& ws, int layer, bool accumulate, const GradReadyFn& ready);
  // Final norm, LM head and loss in row chunks; with a gradient, also the LM head's backward. The
  // per-token losses stay in `losses` (ws.losses, or the caller's), on the device, for sum_losses.
  void head_forward_backward(Workspace& ws, const Tensor& losses, float grad_scale, bool accumulate, bool train);
  // The sum of ws.losses, read on the host (and copied into *losses_out if given). On a GPU this
  // waits for the device, so a micro-step reads it after its backward is queued, not between the
  // head and the backward, where the host would idle the GPU.
  double sum_losses(const Workspace& ws, Tensor* losses_out);
  void forward_trunk(Workspace& ws, KVCache* cache = nullptr);
  // Where this micro-step's gradient of `p` is written: p.grad itself, or with accumulate a
  // scratch of p's shape that add_micro_grad() then adds into p.grad (Note [accumulation order]).
  Tensor micro_grad(const Parameter& p, bool accumulate);
  void add_micro_grad(Parameter& p, bool accumulate);
  void linear_weight_grad(Parameter& w, const Tensor& dy, const Tensor& x, bool accumulate);
  // The three GEMMs of a Linear layer y = x W^T, W = w [out, in]: y (+)= x W^T, dx (+)= dy W and
  // g (+)= dy^T x (beta 1 adds), each in FP8 where fp8_gemm(w), else in the activation dtype.
  void linear(const Tensor& y, const Tensor& x, const Parameter& w, float beta = 0.f);
  void linear_input_grad(const Tensor& dx, const Tensor& dy, const Parameter& w, float beta = 0.f);
  void weight_grad_gemm(const Tensor& g, const Tensor& dy, const Tensor& x, const Parameter& w, float beta);
  bool fp8_gemm(const Parameter& w) const;

  GPTConfig config_;
  Device device_;
  DType act_dtype_;
  std::vector<Parameter> params_;
  std::vector<BlockWeights> blocks_;
  int wte_ = 0, lm_head_ = 0;
  ScalarWeights scalars_;
  Tensor rope_cos_, rope_sin_;  // f32 [rotary_rows, head_dim / 2], values rounded to bf16
  std::unique_ptr<Workspace> train_ws_;  // training and evaluation
  std::unique_ptr<Workspace> infer_ws_;  // forward_next
  Tensor grad_scratch_;  // f32 [numel of the largest parameter], made on the first accumulation
  double last_forward_seconds_ = 0;
  bool phase_timing_ = false;
  bool fp8_ = false;       // set_fp8
  bool fp8_step_ = false;  // a training micro-step with fp8_ is running
};

// Keys and values of past positions, per layer: [B, max_seq_len, n_kv_head, head_dim] each. Recipe
// 2026 also keeps each row's last normalised token embedding [B, n_embd], which the next token's
// smear mixes in. Windowed layers keep every position too; attention reads only their window.
class KVCache {
 public:
  KVCache(const GPT& model, int64_t batch);
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  void reset() { length_ = 0; }
  // Every row of this cache becomes a copy of `one`'s single row (same length): a prompt is run once
  // and its keys and values shared by the samples that continue it (model/generate.h).
  void replicate(const KVCache& one);

 private:
  friend class GPT;
  std::vector<Tensor> k_, v_;
  Tensor prev_;  // recipe 2026: [B, C] act, the embedding at position length_ - 1
  int64_t length_ = 0, capacity_ = 0;
};

}  // namespace nanoddp::model
