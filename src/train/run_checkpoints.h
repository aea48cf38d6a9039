// A run's checkpoint lifecycle in its folder --out, on every rank: which checkpoint to resume
// (--resume, or a launcher's restart), claiming the folder (train/run_folder.h), restoring a
// checkpoint after checking that it fits this run, setting aside the checkpoints a resume abandons,
// and saving (train/checkpoint.h: .tmp, DONE, rename, keep_last). Rank 0 alone writes, holding the
// folder's lock for the run's life (train/run_lock.h).
// Used by the trainer (train/trainer.cpp); the weights-only start (--init_from) is here too.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/process_group.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "ddp/optimizer.h"
#include "model/gpt.h"
#include "train/val_bpb.h"
#include "train/options.h"
#include "train/plan.h"
#include "train/run_lock.h"

namespace nanoddp::train {

// What a checkpoint holds beyond the weights and the optimizer state.
struct RunState {
  data::LoaderState position;       // the data position: the next step reads from here
  std::optional<EvalResult> eval;   // the last evaluation, carried in meta.json until the next one
  // fp16's scale and good-step count (Note [dynamic loss scaling] in train/loss_scaler.h).
  std::optional<std::pair<double, int64_t>> loss_scale;
};

class RunCheckpoints {
 public:
  // dataset: --data's meta.json. The model and optimizer are what restore() loads and save() writes.
  RunCheckpoints(const TrainOptions& opts, dist::ProcessGroup& group, const data::DatasetMeta& dataset,
                 const Plan& plan, model::GPT& model, ddp::Optimizer& optimizer);

  // Makes this run the folder's one writer: rank 0 takes OUT/run.lock (train/run_lock.h) for the
  // object's life, before anything looks at the folder. Collective: when rank 0 cannot, it throws
  // naming the holder, and every other rank throws saying rank 0 could not (none waits on it).
  void lock();
  // The step to resume from, or -1 for a fresh run (see --resume). Every rank looks for the
  // checkpoint itself and they must agree. Collective.
  int64_t find_resume_step();
  // This process is a launcher restart (NANODDP_RESTART_COUNT > 0); set by find_resume_step().
  bool restarted() const { return restarted_; }
  // Gives this run the folder --out (a resumed run keeps its identity; a fresh one refuses a folder
  // that holds another run unless --overwrite), removes the staging folders of interrupted saves
  // and keeps a copy of the tokenizer. Collective.
  void claim(int64_t resume);
  // Loads checkpoint `step` into the model and optimizer, after checking that it fits this run
  // (dataset_identity: what save() records as "dataset"; units_per_epoch: the stage's, which bounds
  // the data position), and sets the later checkpoints aside.
  // Throws nanoddp::Error naming the file or flag when it does not fit or cannot be read.
  RunState restore(int64_t step, const nlohmann::json& dataset_identity, int64_t units_per_epoch);
  // Collective: writes checkpoint `step` (rank 0 the weights and meta.json, every rank its optimizer
  // state). Refuses non-finite weights.
  // best (--save_best): OUT/best points at it afterwards (train/checkpoint.h).
  void save(int64_t step, const RunState& state, const nlohmann::json& dataset_identity, bool best = false);
  // --save_best on a resume: the val bpb recorded by the checkpoint OUT/best points at, or nothing
  // when there is none (a link that dangles, say, after a resume set that checkpoint aside).
  std::optional<double> kept_best_bpb() const;
  // Since the last save or start_clock() (for --save_minutes).
  double seconds_since_save() const { return since_save_.seconds(); }
  void start_clock() { since_save_ = Stopwatch(); }

 private:
  int64_t resume_step();
  void claim_run_folder(int64_t resume);
  void keep_tokenizer();
  void check_fits(int64_t step, const std::string& dir, const nlohmann::json& meta,
                  const nlohmann::json& dataset_identity);
  void check_batch(const std::string& dir, const nlohmann::json& meta);
  void load_state(int64_t step, const std::string& dir, const nlohmann::json& meta);
  void set_aside_later(int64_t step);

  const TrainOptions& opts_;
  dist::ProcessGroup& group_;
  const data::DatasetMeta& dataset_;
  const Plan& plan_;
  model::GPT& model_;
  ddp::Optimizer& optimizer_;
  std::unique_ptr<RunLock> lock_;  // rank 0's, from lock() on
  std::string run_id_;      // OUT/run.json's (train/run_folder.h); every checkpoint records it
  bool restarted_ = false;
  Stopwatch since_save_;
};

// sft --load_optimizer: after init_weights_from, the optimizer state `path`'s checkpoint saved, resharded
// for this run. False (and nothing loaded) when it saved none: a .safetensors file, an import, or a
// checkpoint of another build. A state that does not fit this optimizer (another --optimizer or
// recipe) fails naming --load_optimizer=false. Reads files only: not collective.
bool init_optimizer_from(ddp::Optimizer& optimizer, const std::string& path);

// --init_from: weights only (a checkpoint, a run folder's newest checkpoint, or a .safetensors file
// with nanochat's parameter names) into `model` of configuration `config`; the optimizer state, the
// step and the data position start fresh. data: --data, whose tokenizer must be the checkpoint's.
void init_weights_from(model::GPT& model, const model::GPTConfig& config, const std::string& path,
                       const std::string& data);

}  // namespace nanoddp::train
