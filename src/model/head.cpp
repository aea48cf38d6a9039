// Final norm, LM head and soft-capped cross-entropy, in chunks of rows: each chunk's logits
// [rows, Vpad] are computed, turned into losses and (training) into dlogits in place, and
// consumed by the LM head's backward before the next chunk reuses the buffer.
#include <vector>

#include "model/gpt.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace nanoddp::model {

void GPT::head_forward_backward(Workspace& ws, const Tensor& losses, float grad_scale, bool accumulate, bool train) {
  Parameter& head = params_[lm_head_];
  ops::rmsnorm_forward(ws.xf, ws.rstd_f, ws.x, kNormEps);
  const Tensor dhead = train ? micro_grad(head, accumulate) : Tensor();
  for (int64_t r0 = 0; r0 < ws.tokens; r0 += ws.head_rows) {
    const int64_t r1 = std::min(ws.tokens, r0 + ws.head_rows);
    const Tensor logits = ws.logits.rows(0, r1 - r0), xf = ws.xf.rows(r0, r1);
    linear(logits, xf, head);
    ops::softcap_cross_entropy(losses.rows(r0, r1), logits, ws.targets.rows(r0, r1), config_.vocab_size,
                               config_.softcap, grad_scale);
    if (!train) continue;
    // A zero scale (an RL sample of zero advantage) has zero gradients; the cross-entropy took 0 for
    // "evaluate only" and left the logits, so the zeros are written here.
    if (grad_scale == 0.f) ops::fill(logits, 0.f);
    // logits now hold dlogits: dW_head (+)= dlogits^T xf; dxf = dlogits W_head (into dxn).
    weight_grad_gemm(dhead, logits, xf, head, r0 > 0 ? 1.f : 0.f);
    linear_input_grad(ws.dxn.rows(r0, r1), logits, head);
  }
  if (train) {
    add_micro_grad(head, accumulate);
    ops::rmsnorm_backward(ws.dx, ws.dxn, ws.xf, ws.rstd_f, false);
  }
}

double GPT::sum_losses(const Workspace& ws, Tensor* losses_out) {
  const Tensor losses = ws.losses.device().is_cpu() ? ws.losses : ws.losses.copy_to(Device::cpu());
  if (losses_out != nullptr) copy(*losses_out, losses);
  double sum = 0;
  for (int64_t i = 0; i < losses.numel(); i++) sum += losses.data<float>()[i];
  return sum;
}

}  // namespace nanoddp::model
