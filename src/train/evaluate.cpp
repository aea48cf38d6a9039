#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "comm/consistency.h"
#include "data/loader.h"

namespace nanoddp::train {

EvalResult evaluate(model::GPT& model, data::BatchSource& loader, int64_t batch, int64_t seq, int64_t micro_batches,
                    const std::vector<int32_t>& token_bytes, dist::ProcessGroup& group) {
  // Never more than one pass over the split (every rank takes the same number of rows).
  micro_batches = std::clamp<int64_t>(micro_batches, 1, loader.units_per_epoch() / group.size());
  // i32 [batch, seq] on the host, as forward_losses() takes them.
  Tensor inputs = Tensor::empty({batch, seq}, DType::I32), targets = Tensor::empty({batch, seq}, DType::I32);
  // sums: nats over byte-carrying targets, their bytes, nats over all targets, all targets
  // double: float sums over millions of tokens would lose the low digits.
  std::vector<double> sums(4, 0.0);
  for (int64_t i = 0; i < micro_batches; i++) {
    loader.next(inputs, targets);
    Tensor losses = model.forward_losses(inputs, targets);
    for (int64_t j = 0; j < losses.numel(); j++) {
      const int32_t y = targets.data<int32_t>()[j];
      // -1 marks an ignored target (model/gpt.h): no loss, not counted.
      if (y < 0) continue;
      const double nats = losses.data<float>()[j];
      if (token_bytes[y] > 0) {
        sums[0] += nats;
        sums[1] += token_bytes[y];
      }
      sums[2] += nats;
      sums[3] += 1;
    }
  }
  dist::allreduce_scalars(group, sums, dist::ReduceOp::Sum);
  EvalResult r;
  r.tokens = static_cast<int64_t>(sums[3]);
  r.loss = sums[3] > 0 ? sums[2] / sums[3] : 0.0;
  r.bpb = sums[1] > 0 ? sums[0] / (std::numbers::ln2 * sums[1]) : 0.0;
  return r;
}

}  // namespace nanoddp::train
