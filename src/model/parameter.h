// A trainable tensor with its gradient. `data` and `grad` are f32 (master weights and gradients
// accumulated across micro-steps); `compute` is the copy the matmuls read, in the activation dtype
// (the same tensor as `data` when that is f32). The DDP engine may rebind data and grad to views of
// its flat buckets; the model reads them through this struct on every step, so that is safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace nanoddp::model {

// Which optimizer group a parameter belongs to (nanochat: AdamW for the embedding and the LM
// head, Muon for every matrix in the blocks). Recipe 2026 adds its own AdamW groups: the value
// embeddings, the per-layer residual and x0 scalars, and the smear gate with the smear and backout
// scalars; its value-embedding gates are Matrix (they live in the blocks).
enum class ParamKind { Embedding, Matrix, LmHead, ValueEmbedding, ResidLambda, X0Lambda, Smear };

struct Parameter {
  std::string name;  // nanochat's state-dict name, e.g. "transformer.h.0.attn.c_q.weight"
  ParamKind kind;
  Tensor data;
  Tensor grad;
  Tensor compute;
};

// Called with a parameter's index (into ParameterSet::parameters()) as soon as its gradient for
// this backward is complete, in backward order (GPT: lm_head first, wte last). The DDP engine
// starts bucket reductions from it (ddp::Reducer::sync_hook).
using GradReadyFn = std::function<void(int)>;

// What the DDP engine (ddp::Reducer) and the optimizers (ddp::Optimizer) need of a model: its
// parameters, in a fixed order that is the same on every rank, and a hook run after the engine or
// an optimizer has changed them. GPT implements it; so does a model of one's own (docs/library.md,
// examples/fashion_mnist).
class ParameterSet {
 public:
  virtual ~ParameterSet() = default;
  virtual std::vector<Parameter>& parameters() = 0;
  // Called after the weights change (an update, a broadcast, a load): refresh derived copies such
  // as `compute`. Nothing to do when they are the same tensors.
  virtual void refresh_compute_weights() {}
  // AdamW's learning rates of Embedding and LmHead parameters are multiplied by this (nanochat's
  // GPT: (model_dim / 768)^-0.5).
  virtual double adamw_lr_scale() const { return 1.0; }
};

}  // namespace nanoddp::model
