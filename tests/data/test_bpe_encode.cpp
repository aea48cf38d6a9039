// BPE encoding: the two merge implementations against a slow, obviously correct statement of
// tiktoken's rule; round trips on arbitrary bytes; the cache, batches and special tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/error.h"
#include "data/bpe_merge.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer_file.h"
#include "data_test_util.h"

namespace nanoddp::data {
namespace {

// tiktoken's rule, written for clarity: a list of byte strings; find the adjacent pair whose
// concatenation has the lowest rank (leftmost on ties), join it, repeat.
std::vector<int32_t> reference_merge(const std::vector<std::string>& tokens, std::string_view piece) {
  std::map<std::string, int32_t> rank;
  for (size_t r = 0; r < tokens.size(); r++) rank[tokens[r]] = static_cast<int32_t>(r);
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); i++) {
      auto it = rank.find(parts[i] + parts[i + 1]);
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == INT32_MAX) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + at + 1);
  }
  std::vector<int32_t> out;
  for (auto& p : parts) out.push_back(rank.at(p));
  return out;
}

BytesMap rank_map(const std::vector<std::string>& tokens) {
  BytesMap m;
  for (size_t r = 0; r < tokens.size(); r++) m.insert(tokens[r], static_cast<uint32_t>(r));
  return m;
}

// A vocabulary over the alphabet "ab" in which many merges compete and tie, plus all bytes.
std::vector<std::string> tie_heavy_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; b++) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"aa", "ab", "ba", "bb", "aaa", "aab", "abab", "bbbb", "aaaa", "baba", "abba", "aabb"})
    tokens.emplace_back(t);
  return tokens;
}

TEST(BpeMerge, ScanAndHeapMatchTheReferenceOnRandomPieces) {
  const std::vector<std::string> vocabs[2] = {tie_heavy_vocab(), testing::small_trained_vocab().tokens};
  for (int v = 0; v < 2; v++) {
    const auto& tokens = vocabs[v];
    const BytesMap ranks = rank_map(tokens);
    MergeScratch scratch;
    Rng rng(3);
    for (int trial = 0; trial < 400; trial++) {
      const size_t n = 1 + rng.next_u64() % (trial < 300 ? 40 : 600);
      std::string piece;
      const bool ab = v == 0 && trial % 2 == 0;  // the tie-heavy vocabulary on its own alphabet
      for (size_t i = 0; i < n; i++)
        piece += ab ? "ab"[rng.next_u64() % 2] : "the and ing ou!x"[rng.next_u64() % 16];
      const auto want = reference_merge(tokens, piece);
      std::vector<int32_t> scan, heap;
      bpe_merge_scan(ranks, piece, scratch, scan);
      bpe_merge_heap(ranks, piece, scratch, heap);
      ASSERT_EQ(scan, want) << "scan merge differs on '" << piece << "'";
      ASSERT_EQ(heap, want) << "heap merge differs on '" << piece << "'";
    }
  }
}

TEST(BpeMerge, HeapHandlesAMegabytePiece) {
  const BytesMap ranks = rank_map(tie_heavy_vocab());
  MergeScratch scratch;
  std::vector<int32_t> out;
  const std::string piece(1 << 20, 'a');
  bpe_merge_heap(ranks, piece, scratch, out);
  // "aaaa" has a higher rank than "aa" and "aaa", so pairs form first: a run of 2^20 a's becomes
  // "aa" tokens, which then pair into "aaaa".
  ASSERT_EQ(out.size(), piece.size() / 4);
  for (int32_t t : out) ASSERT_EQ(t, 264);  // "aaaa"
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

std::unique_ptr<Tokenizer> tokenizer_for(const std::string& spec) {
  if (spec == "trained") return std::make_unique<BpeTokenizer>(testing::small_trained_vocab());
  return load_tokenizer(spec);
}

TEST_P(RoundTrip, DecodeOfEncodeIsIdentityOnAnyBytes) {
  if (is_npm_encoding(GetParam())) {
    const std::string missing = testing::missing_npm_package("tiktoken");
    NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  }
  auto tok = tokenizer_for(GetParam());
  std::vector<std::string> texts = testing::adversarial_strings();
  for (uint64_t seed = 0; seed < 60; seed++) texts.push_back(testing::random_bytes(50 + seed * 37, seed));
  texts.push_back(std::string("\0\0\x01\xff", 4));
  texts.push_back("<|bos|><|endoftext|>");
  const auto token_bytes = tok->token_bytes();
  for (const auto& text : texts) {
    const auto ids = tok->encode(text);
    ASSERT_EQ(tok->decode(ids), text);
    int64_t bytes = 0;
    for (int32_t id : ids) bytes += token_bytes[id];
    ASSERT_EQ(bytes, static_cast<int64_t>(text.size())) << "token_bytes disagree with the decoded length";
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RoundTrip, ::testing::Values("bytes", "trained", "gpt2", "cl100k_base",
                                                                  "o200k_base"));

TEST(BpeTokenizer, CacheBatchAndUncachedAgree) {
  BpeTokenizer tok(testing::small_trained_vocab());
  auto docs = testing::generated_documents(40, 300, 9);
  for (uint64_t s = 0; s < 10; s++) docs.push_back(testing::random_bytes(3000, s));
  std::vector<std::string_view> views(docs.begin(), docs.end());
  const auto batch = tok.encode_batch(views, 2);
  ASSERT_EQ(batch.size(), docs.size());
  for (size_t i = 0; i < docs.size(); i++) {
    const auto uncached = tok.encode_uncached(docs[i]);
    EXPECT_EQ(batch[i], uncached) << "document " << i;
    EXPECT_EQ(tok.encode(docs[i]), uncached) << "document " << i << " (cache warm)";
  }
}

TEST(BpeTokenizer, SpecialTokensOnlyWhenAllowed) {
  BpeTokenizer tok(testing::small_trained_vocab());
  const int32_t bos = tok.bos_id(), user = tok.special_id("<|user_start|>");
  const std::string text = "a<|bos|>b <|user_start|><|bos|>";
  const auto plain = tok.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), bos), 0);
  const auto all = tok.encode_with_specials(text, {}, true);
  EXPECT_EQ(std::count(all.begin(), all.end(), bos), 2);
  EXPECT_EQ(std::count(all.begin(), all.end(), user), 1);
  EXPECT_EQ(tok.decode(all), text);
  const std::vector<std::string> only_bos = {"<|bos|>"};
  const auto some = tok.encode_with_specials(text, only_bos);
  EXPECT_EQ(std::count(some.begin(), some.end(), bos), 2);
  EXPECT_EQ(std::count(some.begin(), some.end(), user), 0);
  EXPECT_EQ(tok.decode(some), text);
  const std::vector<std::string> unknown = {"<|nope|>"};
  EXPECT_THROW(tok.encode_with_specials(text, unknown), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{tok.vocab_size()}), Error);
}

TEST(BpeTokenizer, InvalidVocabulariesAreErrors) {
  BpeVocab v = testing::small_trained_vocab();
  {
    BpeVocab bad = v;
    bad.tokens[300] = bad.tokens[299];
    EXPECT_THROW(BpeTokenizer{bad}, Error);
  }
  {
    BpeVocab bad = v;
    bad.tokens[65] = "\xff\xff";  // no token for the byte 'A' any more
    EXPECT_THROW(BpeTokenizer{bad}, Error);
  }
  {
    BpeVocab bad = v;
    bad.bos = "<|nope|>";
    EXPECT_THROW(BpeTokenizer{bad}, Error);
  }
  {
    BpeVocab bad = v;
    bad.specials[0].id = 5;
    EXPECT_THROW(BpeTokenizer{bad}, Error);
  }
}

TEST(Tokenizers, ByteTokenizerKeepsItsContract) {
  auto tok = load_tokenizer("bytes");
  EXPECT_EQ(tok->vocab_size(), 265);
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->special_id("<|assistant_end|>"), 260);
  const std::string text = "h\xc3\xa9<|bos|>";
  EXPECT_EQ(tok->encode(text).size(), text.size());
  EXPECT_EQ(tok->encode_with_specials(text, {}, true).back(), 256);
  EXPECT_THROW(load_tokenizer("no-such-tokenizer"), Error);
  // An id outside the vocabulary is an error, as in the BPE tokenizers (was: dropped silently).
  EXPECT_THROW(tok->decode(std::vector<int32_t>{104, 265}), Error);
  EXPECT_THROW(tok->decode(std::vector<int32_t>{-1}), Error);
}

}  // namespace
}  // namespace nanoddp::data
