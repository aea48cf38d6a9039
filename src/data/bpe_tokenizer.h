// Byte-level BPE with tiktoken's encoding rule: our own trained vocabularies and tiktoken's gpt2,
// cl100k_base and o200k_base tables. Encoding a text: split it into pieces with the split pattern
// (split_pattern.h); a piece that is itself a token is that token; any other piece is merged
// (bpe_merge.h) and its tokens remembered in a per-thread cache, since the same words recur.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/bpe_merge.h"
#include "data/bytes_map.h"
#include "data/split_pattern.h"
#include "data/tokenizer.h"

namespace nanoddp::data {

// Everything a BPE tokenizer is made of.
struct BpeVocab {
  std::string name;                    // what it was loaded from ("cl100k_base", a file path, ...)
  std::vector<std::string> tokens;     // [N] bytes of ordinary token r; ranks are 0..N-1
  std::string pattern;                 // split pattern, in Rust-regex syntax as tiktoken writes it
  std::vector<SpecialToken> specials;  // ids >= N (gaps between ids allowed, as in cl100k_base)
  std::string bos;                     // text of the special token put before every document
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws nanoddp::Error when the vocabulary is inconsistent (a byte without a token, a duplicate
  // token, special ids overlapping the ranks, an unknown BOS).
  explicit BpeTokenizer(BpeVocab vocab);
  ~BpeTokenizer() override;

  std::string name() const override { return vocab_.name; }
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts,
                                                 int threads = 0) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::vector<int32_t> token_bytes() const override;
  std::vector<SpecialToken> special_tokens() const override { return vocab_.specials; }

  const BpeVocab& vocab() const { return vocab_; }
  // Each piece's tokens without the cache (for tests of the cache and of merging).
  std::vector<int32_t> encode_uncached(std::string_view text) const;

 private:
  struct Workspace;
  std::unique_ptr<Workspace> acquire_workspace() const;
  void release_workspace(std::unique_ptr<Workspace> ws) const;
  void encode_into(std::string_view text, Workspace& ws, bool use_cache, std::vector<int32_t>& out) const;

  BpeVocab vocab_;
  BytesMap ranks_;                 // token bytes -> rank
  SplitPattern split_;
  int32_t vocab_size_ = 0;         // max id + 1
  int32_t bos_id_ = 0;
  std::vector<uint32_t> offsets_;  // [vocab_size + 1] bytes of id i are decode_bytes_[offsets_[i], offsets_[i+1])
  std::vector<uint8_t> is_special_;// [vocab_size]
  std::vector<uint8_t> is_valid_;  // [vocab_size] 0 for ids in gaps between ranks and specials
  std::string decode_bytes_;       // every id's bytes (special tokens: their text), back to back
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<Workspace>> pool_;  // idle workspaces, reused across calls
};

}  // namespace nanoddp::data
