#include "train/val_bpb.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "comm/consistency.h"
#include "core/error.h"
#include "data/loader.h"

namespace nanoddp::train {

EvalResult evaluate_bpb(model::GPT& model, data::BatchSource& loader, int64_t batch, int64_t seq, int64_t micro_batches,
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
  // A split whose every target in the evaluated windows is masked (SFT scores only the assistant's
  // tokens) would report a loss and bits per byte of 0, the best possible: say so instead. Every
  // rank holds the same sums, so every rank stops here together. The check comes at the first
  // evaluation, the run's step 0.
  const int64_t read = micro_batches * batch * seq * group.size();
  NANODDP_CHECK(sums[3] > 0,
                "the evaluation scored no tokens: every target of the {} validation tokens it reads is masked (SFT "
                "scores only the assistant's replies): give the validation split conversations whose replies fall "
                "within those tokens, or raise --eval_tokens",
                read);
  NANODDP_CHECK(sums[1] > 0,
                "the evaluation scored {} tokens, but none of them stands for text bytes (special tokens only), so "
                "bits per byte is undefined: give the validation split replies with text, or raise --eval_tokens",
                static_cast<int64_t>(sums[3]));
  EvalResult r;
  r.tokens = static_cast<int64_t>(sums[3]);
  r.loss = sums[2] / sums[3];
  r.bpb = sums[0] / (std::numbers::ln2 * sums[1]);
  return r;
}

}  // namespace nanoddp::train
