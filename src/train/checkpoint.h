// Checkpoints under OUT/checkpoints/, one directory per step:
//
//   step_000500/model.safetensors       f32 weights under nanochat's names (rank 0)
//   step_000500/optim_rank{r}.safetensors  each rank's optimizer state (its shard with --zero)
//   step_000500/meta.json               step, val bpb, model config, options, data position, ...
//   step_000500/DONE                    written last
//
// Atomicity: everything is written into step_000500.tmp/; after a barrier (every rank's file is
// on disk and fsync'd) rank 0 writes DONE, renames the directory into place and fsyncs its parent.
// A directory without .tmp and with DONE is therefore complete; older checkpoints are deleted only
// after that, keeping the newest keep_last. For multi-node runs OUT must be a shared filesystem.
// Used by the trainer (save, resume), `nanoddp sample` and `export` (resolve_checkpoint, through
// train/model_io) and `nanoddp import` (write_model_checkpoint).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "comm/process_group.h"

namespace nanoddp::train {

// The file names inside a checkpoint directory, in one place for the writers and every reader.
struct CheckpointFiles {
  std::string model = "model.safetensors";
  std::string meta = "meta.json";
  static std::string optimizer(int rank) { return "optim_rank" + std::to_string(rank) + ".safetensors"; }
};

// OUT/checkpoints/step_NNNNNN: six digits, so a directory listing sorts by step. Only builds the path.
std::string checkpoint_dir(const std::string& out, int64_t step);
// The newest complete checkpoint's step, if any.
// The run_id in meta.json of OUT's checkpoint `step`, or "" when it has none or cannot be read.
std::string checkpoint_run_id(const std::string& out, int64_t step);
std::optional<int64_t> latest_checkpoint(const std::string& out);
// The steps of OUT's complete checkpoints (with DONE), oldest first.
std::vector<int64_t> complete_checkpoint_steps(const std::string& out);

// Tensors may live on a GPU; each is copied to the host only while it is written.
struct CheckpointContents {
  int64_t step = 0;
  std::vector<std::pair<std::string, Tensor>> model;      // written by rank 0
  std::vector<std::pair<std::string, Tensor>> optimizer;  // this rank's
  nlohmann::json meta;                                    // written by rank 0
  bool best = false;  // --save_best: OUT/best points at this checkpoint once it is complete
};

// --save_best's OUT/best: a relative symbolic link to checkpoints/step_NNNNNN, the checkpoint with
// the lowest validation bits per byte so far. The step it points at when that checkpoint is
// complete; nothing when there is no link or it dangles (a resume set that checkpoint aside).
std::optional<int64_t> best_checkpoint(const std::string& out);

// Collective: every rank of `group` calls it with the same step.
// Throws nanoddp::Error when a file cannot be written; rank 0 then removes the .tmp folder, so a
// failed save (a full disk) leaves nothing behind. Keeps the newest keep_last complete
// checkpoints and the one OUT/best points at (moved here first when c.best); keep_last < 1 counts
// as 1, so the one just written is never deleted.
void save_checkpoint(const std::string& out, const CheckpointContents& c, dist::ProcessGroup& group, int keep_last);

// Removes OUT/checkpoints/step_N.tmp folders without DONE: saves that a kill, a crash or a full
// disk interrupted (this run's own staging folders: nothing else is touched, not even a complete
// step_N.tmp that an interrupted rename left as the newest copy of its step). Returns their names.
// Only for a writer that holds the run folder's lock (train/run_lock.h): another run's save in
// progress looks the same.
std::vector<std::string> remove_interrupted_saves(const std::string& out);

// For tests: called with each file's path before save_checkpoint writes it; what it throws fails
// the save as a full disk would. Empty: none.
void set_checkpoint_write_hook(std::function<void(const std::string&)> hook);

// A complete checkpoint directory from what a user names: a checkpoint directory itself, or a
// run's OUT directory (its newest complete checkpoint). Throws nanoddp::Error when there is none.
std::string resolve_checkpoint(const std::string& path);
// meta.json of a checkpoint directory.
nlohmann::json read_checkpoint_meta(const std::string& dir);
// Writes a model-only checkpoint (no optimizer state) at OUT/checkpoints/step_{step}: what
// `nanoddp import` makes from a safetensors file.
// Single process, no barriers; same .tmp / DONE / rename protocol as save_checkpoint.
void write_model_checkpoint(const std::string& out, int64_t step, const std::vector<std::pair<std::string, Tensor>>& model,
                            const nlohmann::json& meta);

}  // namespace nanoddp::train
