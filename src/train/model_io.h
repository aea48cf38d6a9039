// Models in and out of checkpoints and safetensors files (`nanoddp sample`, `export`, `import`).
//
// An exported file holds every weight in f32 under nanochat's state-dict names, Linear weights
// [out, in] as in PyTorch, with the vocabulary padded to a multiple of 64 as nanochat pads it, so
// nanochat's GPT class can load_state_dict() it directly. Its metadata carries the model config
// as JSON ("nanoddp.model_config"), which makes `nanoddp import` exact.
// Used by cli/cmd_sample.cpp and cli/cmd_export.cpp.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "model/gpt.h"
#include "train/option_types.h"

namespace nanoddp::train {

// Whether every element of t is finite (t on any device; a GPU tensor is copied to the host). Only
// f32 tensors are looked at: the master weights, which is what checkpoints hold.
bool all_finite(const Tensor& t);

// The model of a checkpoint directory, on `device`.
// Activations bf16 on a GPU and f32 on the CPU, as in training. Throws nanoddp::Error when
// meta.json or a weight is missing or has another shape, or when a weight is NaN or infinite.
// dtype: the activations, as train's --dtype names them (auto: bf16 on CUDA, fp32 on the CPU); the
// weights are the checkpoint's f32 master weights whatever it was trained in.
std::unique_ptr<model::GPT> load_model(const std::string& checkpoint_dir, Device device,
                                       DtypeChoice dtype = DtypeChoice::Auto);
// The tokenizer a checkpoint's training data used: the run's own copy (OUT/tokenizer/), else its
// dataset directory recorded in meta.json; `data_dir` overrides where to look, and must then hold
// the same tokenizer as the run's copy where it keeps one (check_dataset_tokenizer).
// Throws when the dataset is gone and the tokenizer is not a built-in one.
std::unique_ptr<data::Tokenizer> load_checkpoint_tokenizer(const std::string& checkpoint_dir,
                                                            const std::string& data_dir = "");

// Throws when `data_dir`'s trained tokenizer (its file or its .json sidecar) differs from the copy
// the checkpoint's run keeps (the dataset prepared again with another tokenizer of the same
// vocabulary size). Nothing to compare for a built-in tokenizer, or where either file is missing.
void check_dataset_tokenizer(const std::string& checkpoint_dir, const std::string& data_dir);

// Writes FILE.tmp and renames it, so `file` never exists half-written; a failure removes FILE.tmp.
// An existing file is replaced; an existing directory is an error (nanoddp::Error, as is every
// failure here).
void export_safetensors(const std::string& checkpoint_dir, const std::string& file);

// vocab_size, n_head and max_seq_len matter only for files without nanoddp metadata (from
// nanochat or elsewhere); their defaults follow `nanoddp train`'s.
struct ImportOptions {
  std::string input;            // a safetensors file with nanochat's names
  std::string out;              // run directory to create the checkpoint in
  std::string data;             // dataset directory whose tokenizer goes with the weights (optional)
  int64_t vocab_size = 0;       // the true vocabulary when the file has no nanoddp metadata (0: --data's)
  int64_t n_head = 0;           // heads when the file has no nanoddp metadata (0: nanochat's rule)
  int64_t max_seq_len = 2048;   // when the file has no nanoddp metadata
  bool overwrite = false;       // move a run already in OUT aside (OUT.previous-<id>) instead of refusing
};
// Writes OUT/checkpoints/step_000000 and returns its directory. It is a model-only checkpoint: its
// meta.json says "model_only": true and "world_size": null, and it holds no optimizer state.
// Throws nanoddp::Error, leaving nothing behind, when a tensor GPT needs is missing or has another
// shape, when a foreign file comes without --vocab_size (or --data), when --data holds a dataset of
// another vocabulary, when OUT already holds a run (checkpoints, run.json or metrics.jsonl) and
// overwrite is off, or when OUT cannot be written.
std::string import_safetensors(const ImportOptions& opts);

}  // namespace nanoddp::train
