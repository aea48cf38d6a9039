// Validation loss and bits per byte (nanochat's metric): per-token losses in nats are summed
// where the target stands for at least one byte (special tokens count 0 bytes), the bytes are
// summed alongside, both are summed over ranks, and bpb = nats / (ln 2 * bytes).
// Called by the trainer every --eval_every steps and at the end.
// Not `nanoddp eval`, which measures task accuracy (cli/cmd_eval.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "data/loader.h"
#include "model/gpt.h"

namespace nanoddp::train {

// Sums over every rank, so all ranks get the same result.
struct EvalResult {
  double loss = 0;  // mean nats per target token
  double bpb = 0;
  int64_t tokens = 0;
};

// Evaluates `micro_batches` micro-batches of `loader` (the val split, or held-out conversations),
// which must be at its start, on every rank (rank-strided rows). Collective (one allreduce): every
// rank must call it. Forward only, no gradients. micro_batches is capped at one pass over the
// split. token_bytes[id] is the byte length of each token; targets of -1 are not counted.
EvalResult evaluate_bpb(model::GPT& model, data::BatchSource& loader, int64_t batch, int64_t seq, int64_t micro_batches,
                    const std::vector<int32_t>& token_bytes, dist::ProcessGroup& group);

}  // namespace nanoddp::train
