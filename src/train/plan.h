// A run's sizes, derived once from the options, the dataset and the world size: the model's
// configuration, the micro-steps per optimizer step and the length of training.
// Used by the trainer (train/trainer.cpp) and its checkpoint lifecycle (train/run_checkpoints.h).
#pragma once

#include <cstdint>

#include "data/dataset.h"
#include "model/config.h"
#include "train/options.h"

namespace nanoddp::train {

struct Plan {
  model::GPTConfig config;
  // Micro-steps per optimizer step (RL: questions per rank per step).
  int64_t grad_accum = 1;
  // -1 until the stage counts --num_epochs over its data (Stage::steps_for_epochs).
  int64_t num_iterations = 0;
  // Over all ranks (0 for RL, whose steps take questions).
  int64_t tokens_per_step = 0;
  int64_t eval_micro_batches = 1;
};

// Throws nanoddp::Error when the batch does not divide or the run would take no step.
Plan make_plan(const TrainOptions& o, const data::DatasetMeta& meta, int world);

}  // namespace nanoddp::train
