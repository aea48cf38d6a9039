// fp16's dynamic loss scale. Note [dynamic loss scaling]: with --dtype fp16 the loss is multiplied
// by scale() before the backward, so that small gradients do not underflow fp16's 2^-24; the
// reduced gradients are unscaled before the optimizer. When any rank's hold an inf or NaN (an fp16
// activation gradient overflowed 65504), every rank skips the optimizer step and the scale halves;
// after --loss_scale_growth_interval good steps in a row it doubles. torch.cuda.amp.GradScaler's
// rule; both numbers are saved in checkpoints (meta.json "loss_scale"), so a resumed run scales as
// the straight run would. Other dtypes keep the scale at 1 and never skip.
// Used by the trainer (train/trainer.cpp); the found-inf flag is ddp::Optimizer's.
#pragma once

#include <cstdint>

#include "ddp/optimizer.h"

namespace nanoddp::train {

class LossScaler {
 public:
  // Disabled: the scale stays 1 and update() always steps.
  LossScaler(bool enabled, double init_scale, int64_t growth_interval);

  bool enabled() const { return enabled_; }
  // What the next backward multiplies the loss by.
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  // Whether the last update() skipped the optimizer step (its gradients overflowed).
  bool skipped() const { return skipped_; }
  // A resumed run's scale and count (ignored when disabled).
  void restore(double scale, int64_t good_steps);

  // The optimizer step on the synchronised gradients: unscaled first and skipped on an overflow,
  // every rank alike (the flag is all-reduced). Throws nanoddp::Error when the scale falls below
  // 2^-24, where no scale can help.
  void update(ddp::Optimizer& optimizer, int64_t step, double lr_mult, double momentum);

 private:
  bool enabled_;
  double scale_ = 1;
  int64_t growth_interval_;
  int64_t good_steps_ = 0;
  bool skipped_ = false;
};

}  // namespace nanoddp::train
