// A trainable tensor with its gradient. `data` and `grad` are f32 (master weights and gradients
// accumulated across micro-steps); `compute` is the copy the matmuls read, in the activation dtype
// (the same tensor as `data` when that is f32). The DDP engine may rebind data and grad to views of
// its flat buckets; the model reads them through this struct on every step, so that is safe.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace nanoddp::model {

// Which optimizer group a parameter belongs to (nanochat: AdamW for the embedding and the LM
// head, Muon for every matrix in the blocks).
enum class ParamKind { Embedding, Matrix, LmHead };

struct Parameter {
  std::string name;  // nanochat's state-dict name, e.g. "transformer.h.0.attn.c_q.weight"
  ParamKind kind;
  Tensor data;
  Tensor grad;
  Tensor compute;
};

}  // namespace nanoddp::model
