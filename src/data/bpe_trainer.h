// Byte-level BPE training (nanochat's recipe, our implementation).
//
// 1. Count pieces: split every document with the split pattern and count each distinct piece once
//    (PieceCounter, on all threads). Merges never cross piece boundaries, so training works on the
//    distinct pieces weighted by their counts: a few hundred thousand "words" instead of the corpus.
// 2. Learn merges (learn_bpe_merges): start from the 256 single bytes; repeatedly merge the adjacent
//    pair with the highest total count (the smallest (left, right) id pair on a tie) into a new token,
//    until the vocabulary has the size asked for. Incremental: pair counts and a pair -> words
//    occurrence index are updated only for the words that contain the merged pair, and a max-heap
//    with lazy deletion finds the next pair, so a merge costs time in the words it touches, not in
//    the corpus.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/bytes_map.h"
#include "data/split_pattern.h"

namespace nanoddp::data {

// Distinct pieces and how often each occurs, sorted by piece bytes.
struct PieceCounts {
  std::vector<std::string> pieces;
  std::vector<int64_t> counts;
};

class PieceCounter {
 public:
  PieceCounter(const std::string& pattern, int threads);
  ~PieceCounter();
  // Splits and counts the documents, on all threads.
  void add(std::span<const std::string_view> docs);
  PieceCounts take();

 private:
  struct alignas(64) Tally {  // own cache lines: each thread updates its tally constantly
    BytesMap index;               // piece -> position in counts
    std::vector<int64_t> counts;  // [distinct pieces]
    void add(std::string_view piece, int64_t n);
  };
  SplitPattern split_;
  int threads_;
  Tally total_;
  std::vector<Tally> per_thread_;  // [threads], emptied into total_ after each add()
};

struct BpeMerge {
  int32_t left, right;  // the pair merged
  int32_t id;           // the token it became (an existing id when that byte string was already a token)
};

// Learns merges until 256 + (new tokens) == ordinary_tokens. Throws nanoddp::Error when the pieces
// run out of pairs first (too little text for the vocabulary asked for).
// `stop`, when given, is asked before each merge; once true, the merges so far are returned.
std::vector<BpeMerge> learn_bpe_merges(const PieceCounts& pieces, int32_t ordinary_tokens,
                                       const std::function<bool()>& stop = {});

// The bytes of each token id 0..ordinary_tokens-1 given the merges.
std::vector<std::string> tokens_from_merges(std::span<const BpeMerge> merges, int32_t ordinary_tokens);

struct BpeTrainOptions {
  std::vector<std::string> input;
  int vocab_size = 4096;
  int64_t max_chars = 0;
  int64_t doc_cap = 0;
  int threads = 0;

  template <typename V>
  void visit(V&& v) {
    v(input, "input", "text files (one document each), JSONL files (\"text\" field) or directories of them");
    v(vocab_size, "vocab_size", "ids in the vocabulary: 256 bytes + merges + nanochat's 9 special tokens");
    v(max_chars, "max_chars", "train on at most this many bytes of text (0: all; nanochat uses 10B)");
    v(doc_cap, "doc_cap", "use at most this many bytes of each document (0: all; nanochat uses 10,000)");
    v(threads, "threads", "threads for splitting and counting (0: all cores)");
  }
};

struct BpeTrainStats {
  int64_t documents = 0, bytes = 0, distinct_pieces = 0;
  double count_seconds = 0, merge_seconds = 0;
  bool stopped = false;  // `stop` said so: the vocabulary returned is empty
};

// Trains a vocabulary with nanochat's split pattern and special tokens (<|bos|> is BOS). `stop`, when
// given, is asked before each batch of documents and each merge; once it says true, training ends
// with stats->stopped set and an empty vocabulary.
BpeVocab train_bpe(const BpeTrainOptions& options, BpeTrainStats* stats = nullptr,
                   const std::function<bool()>& stop = {});

// The longest prefix of `text` of at most max_bytes bytes that does not cut a UTF-8 character.
std::string_view utf8_prefix(std::string_view text, size_t max_bytes);

}  // namespace nanoddp::data
