// A prepared dataset: the directory `nanoddp data prepare` writes and the trainer reads.
//
//   DIR/train_000000.bin, train_000001.bin, ...   token shards (llm.c format, shard.h)
//   DIR/val_000000.bin, ...                        held-out validation shards
//   DIR/meta.json                                  what is below
//   DIR/tokenizer.tiktoken (+ .json sidecar)       when the tokenizer is a file, a copy of it
//
// Every document is written as BOS followed by its tokens, documents back to back; a document may
// continue from one shard into the next (shards hold exactly shard_tokens tokens, the last one of
// each split fewer). Document i (0-based, in input order, empty documents skipped) goes to
// validation when i % val_every == val_every - 1, to training otherwise: every k-th document rather
// than the last ones, so that a corpus ordered by genre (as Brown is) is represented in both. The
// other choices (--val_input, --val_fraction) are in prepare.cpp's Note [validation split].
//
// meta.json: {"format": "nanoddp-dataset", "version": 1, "tokenizer": "cl100k_base" | "bytes" |
//   "tokenizer.tiktoken", "vocab_size": V, "bos_id": B, "token_width": 2|4, "shard_tokens": N,
//   "val_every": K (0 unless it chose), "val_split": "...", "text_split": "file" | "paragraphs" | "lines",
//   "documents": {"train": n, "val": m}, "tokens": {"train": n, "val": m},
//   "chars": n (Unicode characters), "bytes": n (UTF-8 bytes), "shards": {"train": [...], "val": [...]}}
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace nanoddp::data {

struct DatasetMeta {
  std::string dir;
  std::string tokenizer;  // a built-in spec, or a file name relative to dir
  int32_t vocab_size = 0;
  int32_t bos_id = 0;
  int32_t token_width = 2;  // bytes per token in the shards
  int64_t shard_tokens = 0;
  int32_t val_every = 0;      // 0 when validation was chosen another way (val_split says which)
  std::string val_split;      // how validation was chosen, in words; "" in datasets written before it
  std::string text_split;     // how plain text files were cut into documents; "" likewise
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;  // BOS tokens included
  int64_t chars = 0, bytes = 0;              // of all documents
  std::vector<std::string> train_shards, val_shards;  // paths: dir + "/" + the names in meta.json
};

// Reads DIR/meta.json; throws nanoddp::Error naming the file when it is missing or corrupt, or when a
// shard it lists is missing.
DatasetMeta read_dataset_meta(const std::string& dir);
// Writes DIR/meta.json (through a temporary file).
void write_dataset_meta(const DatasetMeta& meta);
// The tokenizer the dataset was prepared with (checked against meta.json's vocab_size and bos_id).
std::unique_ptr<Tokenizer> load_dataset_tokenizer(const std::string& dir);

// What identifies a dataset: meta.json's "format".
inline constexpr const char* kDatasetFormat = "nanoddp-dataset";
// Whether DIR holds a meta.json whose "format" is kDatasetFormat. Never throws: an unreadable or
// foreign meta.json (a corpus may have one of its own) is simply not a dataset's.
bool is_prepared_dataset(const std::string& dir);
// Whether a file name is one a dataset consists of (and of an interrupted write of one):
// train_N.bin, val_N.bin, meta.json (each possibly .tmp), tokenizer.tiktoken and its .json.
bool is_dataset_file_name(const std::string& name);
// Whether DIR is a staging folder `data prepare` left behind (Note [staged output] in prepare.cpp):
// named OUT.tmp-<pid> or .prepare.tmp-<pid>, holding dataset files and "all" shards only.
bool is_prepare_staging_dir(const std::string& dir);

}  // namespace nanoddp::data
