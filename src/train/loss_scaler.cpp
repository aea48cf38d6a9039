#include "train/loss_scaler.h"

#include "core/error.h"

namespace nanoddp::train {

LossScaler::LossScaler(bool enabled, double init_scale, int64_t growth_interval)
    : enabled_(enabled), scale_(enabled ? init_scale : 1.0), growth_interval_(growth_interval) {}

void LossScaler::restore(double scale, int64_t good_steps) {
  if (!enabled_) return;
  scale_ = scale;
  good_steps_ = good_steps;
}

void LossScaler::update(ddp::Optimizer& optimizer, int64_t step, double lr_mult, double momentum) {
  skipped_ = enabled_ && !optimizer.unscale_and_check(static_cast<float>(1.0 / scale_));
  if (skipped_) {
    scale_ *= 0.5;
    good_steps_ = 0;
    // Every rank has the same scale (the overflow flag is all-reduced), so all stop here together.
    // Below fp16's smallest subnormal no scale can help: the gradients are inf or NaN whatever the
    // scale, and skipping on would end the run with exit 0 having trained nothing.
    NANODDP_CHECK(scale_ >= 0x1p-24, "--dtype fp16: step {}'s gradients overflowed at every loss scale down to "
                  "2^-24, so every step would be skipped: the run diverged; resume an earlier checkpoint with a "
                  "lower learning rate, or use --dtype bf16", step);
    return;
  }
  optimizer.step(lr_mult, momentum);
  // At least, not equal: a resume with a shorter --loss_scale_growth_interval than the count it
  // restored would otherwise never grow the scale again until an overflow reset the count.
  if (enabled_ && ++good_steps_ >= growth_interval_) {
    scale_ *= 2;
    good_steps_ = 0;
  }
}

}  // namespace nanoddp::train
