// The tiny model, dataset and single-process run the training tests share.
#pragma once

#include <unistd.h>

#include <string>
#include <string_view>

#include "comm/process_group.h"
#include "corpus.h"
#include "test_util.h"
#include "train/trainer.h"

namespace nanoddp {

// A dataset shared by the tests of a test binary (prepared once per process).
inline const std::string& dataset() {
  // One per process: ctest runs the test cases of this file as parallel processes.
  static testing::ScratchDir dir("train_dataset_" + std::to_string(::getpid()));
  static bool made = false;
  if (!made) {
    testing::make_byte_dataset(dir.str(), 200, 7);
    made = true;
  }
  static std::string path = dir.str("data");
  return path;
}

inline train::TrainOptions tiny(const std::string& out) {
  train::TrainOptions o;
  o.model.depth = 2;
  o.model.aspect_ratio = 32;  // model_dim 64
  o.model.head_dim = 32;      // 2 heads
  o.model.max_seq_len = 32;
  // The training tests were written for the classic model and its lrs and schedule; the 2026 recipe's
  // own tests (test_recipe2026_curve, test_chat_recipe2026, ...) set it.
  o.model.recipe = model::Recipe::Classic;
  o.batch.device_batch_size = 4;
  o.batch.total_batch_size = 4 * 32 * 2;  // 2 accumulation steps
  o.batch.num_iterations = 12;
  o.optim.warmdown_ratio = 0.5;
  o.eval.eval_every = 6;
  o.eval.eval_tokens = 4 * 32 * 4;
  o.input.data = dataset();
  o.output.out = out;
  o.runtime.threads = 1;
  o.runtime.peak_flops = 1e9;
  return o;
}

// The tiny run, `iterations` steps long, saving a checkpoint every `save_every` steps.
inline train::TrainOptions tiny_saving(const std::string& out, int64_t iterations, int64_t save_every) {
  auto o = tiny(out);
  o.batch.num_iterations = iterations;
  o.output.save_every = save_every;
  return o;
}

// --resume's value from its flag text ("latest", "auto", "7"), as the command line reads it.
inline train::ResumeSpec resume_spec(std::string_view text) {
  return parse_option<train::ResumeSpec>(text, "--resume");
}

inline train::TrainResult train_single(const train::TrainOptions& o) {
  auto group = dist::make_single_rank_group(Device::cpu());
  return train::run_training(o, *group, Device::cpu());
}

}  // namespace nanoddp
