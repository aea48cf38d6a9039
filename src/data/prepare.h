// `nanoddp data prepare`: text in, token shards out (the layout is described in dataset.h).
// Streams: documents are read, encoded (on all threads) and written a batch at a time, so memory
// holds one batch, never the corpus.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nanoddp::data {

struct PrepareOptions {
  std::vector<std::string> input;
  std::vector<std::string> val_input;
  std::string out;
  std::string tokenizer = "bytes";
  int64_t shard_tokens = 100'000'000;
  int32_t val_every = 0;  // 0: 20, or --val_fraction 0.1 for one text file read whole (Note [validation split])
  double val_fraction = 0;
  std::string text_split = "file";
  int threads = 0;
  int64_t batch_bytes = 32 << 20;
  bool overwrite = false;

  template <typename V>
  void visit(V&& v) {
    v(input, "input", "text files (see --text_split), JSONL files (\"text\" field) or directories of them");
    v(val_input, "val_input", "validation text, files or directories as --input; then all of --input is training");
    v(out, "out", "directory to write the shards and meta.json into");
    v(tokenizer, "tokenizer", "bytes | gpt2 | cl100k_base | o200k_base | a tokenizer file");
    v(shard_tokens, "shard_tokens", "tokens per shard (the last shard of each split holds the rest)");
    v(val_every, "val_every", "every k-th document (the k-th, 2k-th, ...) goes to validation (0: 20, but one text file "
      "read whole holds out its last 10% of tokens instead)");
    v(val_fraction, "val_fraction", "instead of --val_every: the last fraction of the tokens goes to validation "
      "(nanoGPT's 0.1)");
    v(text_split, "text_split", "file (a text file is one document) | paragraphs (blank lines separate documents) | "
      "lines (each line is a document)");
    v(threads, "threads", "encoding threads (0: all cores)");
    v(batch_bytes, "batch_bytes", "bytes of text read and encoded at a time");
    v(overwrite, "overwrite", "replace a dataset already in --out");
  }
};

struct PrepareStats {
  int64_t train_documents = 0, val_documents = 0, empty_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t chars = 0, bytes = 0;
  std::string val_split;  // how validation was chosen, as meta.json's val_split says it
  bool end_held_out_by_default = false;  // no flag chose: one text file, its last 10% held out
  size_t train_shards = 0, val_shards = 0;
  double seconds = 0;
  bool stopped = false;  // `stop` said so: nothing was written (the counts say how far it got)
};

// `stop`, when given, is asked before each batch of documents (--batch_bytes of text); once it says
// true the prepare ends without writing OUT, its staging folder removed, and returns stopped = true.
PrepareStats prepare_dataset(const PrepareOptions& options, const std::function<bool()>& stop = {});

}  // namespace nanoddp::data
