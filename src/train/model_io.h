// Models in and out of checkpoints and safetensors files (`nanoddp sample`, `export`, `import`).
//
// An exported file holds every weight in f32 under nanochat's state-dict names, Linear weights
// [out, in] as in PyTorch, with the vocabulary padded to a multiple of 64 as nanochat pads it, so
// nanochat's GPT class can load_state_dict() it directly. Its metadata carries the model config
// as JSON ("nanoddp.model_config"), which makes `nanoddp import` exact.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "model/gpt.h"

namespace nanoddp::train {

// The model of a checkpoint directory, on `device`.
std::unique_ptr<model::GPT> load_model(const std::string& checkpoint_dir, Device device);
// The tokenizer a checkpoint's training data used (its dataset directory, recorded in meta.json);
// `data_dir` overrides where to look.
std::unique_ptr<data::Tokenizer> load_checkpoint_tokenizer(const std::string& checkpoint_dir,
                                                            const std::string& data_dir = "");

void export_safetensors(const std::string& checkpoint_dir, const std::string& file);

struct ImportOptions {
  std::string input;            // a safetensors file with nanochat's names
  std::string out;              // run directory to create the checkpoint in
  std::string data;             // dataset directory whose tokenizer goes with the weights (optional)
  int64_t vocab_size = 0;       // the true vocabulary when the file has no nanoddp metadata
  int64_t n_head = 0;           // heads when the file has no nanoddp metadata (0: nanochat's rule)
  int64_t max_seq_len = 2048;   // when the file has no nanoddp metadata
};
// Writes OUT/checkpoints/step_000000 (model only) and returns its directory.
std::string import_safetensors(const ImportOptions& opts);

}  // namespace nanoddp::train
