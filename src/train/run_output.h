// What a training run writes besides its steps and checkpoints: the header lines, OUT/environment.json
// (hardware and versions, for `nanoddp report`), OUT/trace.json (--trace), the end-of-run summary and
// the sample of text. Rank 0 prints and writes; the gathers are collective.
// Used by the trainer (train/trainer.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "comm/process_group.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "ops/profile.h"
#include "train/val_bpb.h"
#include "train/options.h"

namespace nanoddp::train {

// "f32", or "bf16" with how this device computes it: a CPU without bf16 instructions (or a build
// without oneDNN) still runs a bf16 model (its GEMMs widened to f32 for sgemm), and the header
// says so once. fp16 names its loss scale.
std::string arithmetic_name(const model::GPT& model, double loss_scale);

// OUT/environment.json. Collective (the host names are gathered); rank 0 writes.
void write_environment(const TrainOptions& opts, dist::ProcessGroup& group, Device device,
                       const std::string& arithmetic, const ops::PeakFlops& peak);

// --trace: gathers every rank's events and rank 0 writes OUT/trace.json. Collective; nothing
// without --trace.
void write_trace(const TrainOptions& opts, dist::ProcessGroup& group);

// The model line of the run header.
void print_model(const model::GPTConfig& config);

// The end-of-run lines: steps, time, tokens, the last loss, the best evaluation (step and result),
// where the checkpoints are. Nothing when no step was taken.
void summarize(const std::string& out, int64_t steps, int64_t last_step, double train_seconds, double trained_tokens,
               double last_loss, const std::optional<std::pair<int64_t, EvalResult>>& best_eval);
// The same with the tokens already described (Stage::describe_tokens).
void summarize(const std::string& out, int64_t steps, int64_t last_step, double train_seconds,
               const std::string& tokens, double last_loss,
               const std::optional<std::pair<int64_t, EvalResult>>& best_eval);

// Rank 0: samples opts.eval.sample_tokens tokens after opts.eval.sample_prompt and prints them.
void print_sample(const TrainOptions& opts, dist::ProcessGroup& group, model::GPT& model,
                  const data::Tokenizer& tokenizer);

}  // namespace nanoddp::train
