// Checks of `nanoddp train`'s flags before anything runs: each bad value is one error that names
// the flag, what was given and the valid range. A flag that parses but means nothing (a batch of
// 0 tokens, a NaN learning rate, 100000 threads) would otherwise fail much later, or not at all.
#pragma once

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "core/device.h"
#include "core/dtype.h"
#include "data/dataset.h"
#include "model/config.h"
#include "train/options.h"

namespace nanoddp::train {

// Throws nanoddp::Error on the first invalid flag.
void validate_options(const TrainOptions& opts);

// --fp8 on this device: one error saying why not (no FP8 GEMMs here, another dtype than bf16, or a
// micro-step whose tokens are not a multiple of 16) and what to do.
void check_fp8(const TrainOptions& opts, Device device);

// --save_best ranks evaluations: a run that evaluates nothing (RL; SFT without validation
// conversations) is refused before it starts.
void check_save_best_evaluates(const TrainOptions& opts);

// Every rank must train the same thing: the same flags, dataset and build (a rank with other
// settings would compute something else, or hang in a collective much later). Collective.
void check_ranks_agree(const TrainOptions& opts, const data::DatasetMeta& meta, dist::ProcessGroup& group);

// The activation dtype --dtype names on this device: auto is bf16 on CUDA (nanochat's autocast) and
// fp32 on the CPU.
DType activation_dtype(DtypeChoice dtype, Device device);
// The --dtype value that names an activation type: fp32, bf16 or fp16.
const char* dtype_flag(DType dtype);

// Bytes one rank needs for this model and micro-batch on the CPU, roughly (weights, gradients,
// optimizer state, activations kept for the backward, logits): for refusing a model that cannot
// fit before allocating it.
double estimate_rank_bytes(const model::GPTConfig& config, const TrainOptions& opts);

// Refuses a run whose ranks on this machine would need more memory than it has available, with
// the estimate. `local_ranks`: ranks sharing this machine's memory.
void check_fits_in_memory(const model::GPTConfig& config, const TrainOptions& opts, int local_ranks);

}  // namespace nanoddp::train
