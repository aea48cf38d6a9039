// Activation storage of the GPT (private to src/model). Allocated once per (batch, seq) shape and
// reused every step. N = batch * seq tokens, C = n_embd, Ckv = n_kv_head * head_dim,
// H = n_head, Hkv = n_kv_head, D = head_dim, act = activation dtype.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace nanoddp::model {

// RMSNorm's eps: f32 machine epsilon, PyTorch's F.rms_norm default, which nanochat uses.
inline constexpr float kNormEps = 1.1920929e-07f;

// What one block keeps for its backward.
struct LayerActs {
  Tensor xn1, rstd1;  // norm(x) entering attention [N, C] act; rstd f32 [N]
  Tensor qn, rstd_q;  // norm(rotary(c_q(xn1))) [B, T, H, D] act; f32 [N * H]
  Tensor kn, rstd_k;  // norm(rotary(c_k(xn1))) [B, T, Hkv, D] act; f32 [N * Hkv]
  Tensor v;           // c_v(xn1) [B, T, Hkv, D] act
  Tensor att, lse;    // attention output [B, T, H, D] act (= [N, C]); log-sum-exp f32 [B, H, T]
  Tensor xn2, rstd2;  // norm(x) entering the MLP [N, C] act; f32 [N]
  Tensor h;           // c_fc(xn2), before relu^2 [N, 4C] act
  // Recipe 2026 only:
  Tensor xin;         // the residual stream entering the block, before the scalar mix [N, C] act
  Tensor gate;        // the value-embedding gate f32 [N, Hkv] (layers with a value embedding)
};

struct Workspace {
  int64_t batch = 0, seq = 0, tokens = 0;
  Tensor ids, targets;  // i32 [N] on the device
  Tensor emb, rstd_e;   // norm(wte[ids]) [N, C] act; f32 [N]
  Tensor x;             // the residual stream [N, C] act, updated in place block by block
  std::vector<LayerActs> layers;
  Tensor xf, rstd_f;    // final norm [N, C] act; f32 [N]
  Tensor logits;        // one chunk of LM-head rows [head_rows, Vpad] act; holds dlogits after the loss
  int64_t head_rows = 0;
  Tensor losses;        // f32 [N]

  // Scratch shared by all layers. The forward borrows dq, dk for the pre-rotary q, k.
  Tensor dx;            // gradient of the residual stream [N, C] act
  Tensor dxn;           // gradient of a norm's output [N, C] act
  Tensor datt;          // [B, T, H, D] act
  Tensor dq;            // [B, T, H, D] act
  Tensor dk, dv;        // [B, T, Hkv, D] act
  Tensor dh, a;         // [N, 4C] act: MLP hidden gradient; relu^2 output (recomputed in backward)

  // Recipe 2026 only. The value embedding (and its gradient) borrow a and dh, free in attention.
  Tensor x0;            // smear(emb), the input every block mixes in [N, C] act
  Tensor smear_gate;    // sigmoid of the smear's gate f32 [N]; dsmear: its backward scratch f32 [N]
  Tensor dsmear;
  Tensor xmid;          // the output of block n_layer / 2 [N, C] act
  Tensor dx0, dmid;     // gradients of x0 and of xmid's backout path [N, C] act
  Tensor dscalars;      // f32 [2 L + 2]: resid_lambdas, x0_lambdas, smear_lambda, backout_lambda
};

}  // namespace nanoddp::model
