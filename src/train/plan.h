// A run's sizes, derived once from the options, the dataset and the world size: the model's
// configuration, the micro-steps per optimizer step and the length of training.
// Used by the trainer (train/trainer.cpp) and its checkpoint lifecycle (train/run_checkpoints.h).
#pragma once

#include <cstdint>

#include "data/dataset.h"
#include "model/config.h"
#include "train/options.h"
#include "train/schedule.h"

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
  // Recipe 2026: nanochat's batch, lr and weight-decay scaling from the tokens:params ratio.
  RecipeScaling scaling;
};

// nanochat's scaling parameters (base_train's get_scaling_params): the block matrices and lm_head;
// for the classic recipe, every parameter but wte.
int64_t scaling_params(const model::GPTConfig& c);

// Throws nanoddp::Error when the batch does not divide or the run would take no step.
Plan make_plan(const TrainOptions& o, const data::DatasetMeta& meta, int world);

}  // namespace nanoddp::train
