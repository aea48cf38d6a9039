#include "data/bpe_trainer.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/timer.h"
#include "data/documents.h"
#include "data/parallel.h"

namespace nanoddp::data {

void PieceCounter::Tally::add(std::string_view piece, int64_t n) {
  if (const uint32_t* at = index.find(piece)) {
    counts[*at] += n;
    return;
  }
  index.insert(piece, static_cast<uint32_t>(counts.size()));
  counts.push_back(n);
}

PieceCounter::PieceCounter(const std::string& pattern, int threads)
    : split_(pattern), threads_(resolve_threads(threads)), per_thread_(threads_) {}

PieceCounter::~PieceCounter() = default;

void PieceCounter::add(std::span<const std::string_view> docs) {
  std::vector<std::unique_ptr<SplitPattern::Matcher>> matchers(threads_);  // [threads]
  parallel_for(static_cast<int64_t>(docs.size()), threads_, [&](int64_t i, int w) {
    if (!matchers[w]) matchers[w] = std::make_unique<SplitPattern::Matcher>(split_);
    split_.split(*matchers[w], docs[i], [&](std::string_view piece) { per_thread_[w].add(piece, 1); });
  });
  for (auto& t : per_thread_) {
    t.index.for_each([&](std::string_view piece, uint32_t at) { total_.add(piece, t.counts[at]); });
    t.index.clear();
    t.counts.clear();
  }
}

PieceCounts PieceCounter::take() {
  std::vector<std::pair<std::string_view, int64_t>> all;
  all.reserve(total_.counts.size());
  total_.index.for_each([&](std::string_view piece, uint32_t at) { all.emplace_back(piece, total_.counts[at]); });
  std::sort(all.begin(), all.end());
  PieceCounts out;
  for (auto& [piece, n] : all) {
    out.pieces.emplace_back(piece);
    out.counts.push_back(n);
  }
  total_.index.clear();
  total_.counts.clear();
  return out;
}

namespace {

using PairKey = uint64_t;  // (left << 32) | right: ordering keys orders pairs lexicographically
PairKey pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

// The state of merge learning: the words (distinct pieces as symbol sequences), the count of every
// adjacent pair over all words, which words each pair occurs in, and a heap of candidate pairs.
class MergeLearner {
 public:
  explicit MergeLearner(const PieceCounts& pc) {
    words_.resize(pc.pieces.size());
    for (size_t w = 0; w < pc.pieces.size(); w++) {
      words_[w].count = pc.counts[w];
      for (char c : pc.pieces[w]) words_[w].syms.push_back(static_cast<uint8_t>(c));
      add_pairs(static_cast<int32_t>(w), +1, -1);
    }
    for (auto& [key, n] : counts_)
      if (n > 0) heap_push(n, key);
    for (int b = 0; b < 256; b++) {
      tokens_.emplace_back(1, static_cast<char>(b));
      token_ids_.insert(tokens_.back(), b);
    }
  }

  // Learns one merge; false when no pair is left.
  bool step(BpeMerge& merge) {
    PairKey key;
    if (!pop_best(key)) return false;
    const int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xffffffffu);
    const std::string bytes = tokens_[a] + tokens_[b];
    int32_t id;
    if (const uint32_t* existing = token_ids_.find(bytes)) {
      // The pair's bytes are already a token, reached through other merges. We have not seen this
      // happen (merging every word the same way seems to rule it out) but keep the vocabulary valid
      // if it does: tiktoken files need every token's bytes to be unique.
      id = static_cast<int32_t>(*existing);
    } else {
      id = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(bytes);
      token_ids_.insert(tokens_.back(), id);
    }
    apply(a, b, id, key);
    merge = {a, b, id};
    return true;
  }

  int32_t tokens() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Word {
    std::vector<int32_t> syms;
    int64_t count = 0;
  };
  struct Candidate {
    int64_t count;
    PairKey key;
    // Max-heap order: higher count first, then the smaller pair.
    bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : key > o.key; }
  };

  void heap_push(int64_t n, PairKey key) {
    heap_.push_back({n, key});
    std::push_heap(heap_.begin(), heap_.end());
  }

  // Pops until the top entry's count is current (entries go stale when counts drop).
  bool pop_best(PairKey& key) {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end());
      const Candidate c = heap_.back();
      heap_.pop_back();
      auto it = counts_.find(c.key);
      const int64_t now = it == counts_.end() ? 0 : it->second;
      if (now == c.count && now > 0) {
        key = c.key;
        return true;
      }
      if (now > 0 && now < c.count) heap_push(now, c.key);
    }
    return false;
  }

  // Adds sign * count for each adjacent pair of word w. When `indexed_id` >= 0, pairs containing it
  // are recorded in the occurrence index and in touched_ (their counts grew); -1 indexes every pair.
  void add_pairs(int32_t w, int sign, int32_t indexed_id) {
    const auto& syms = words_[w].syms;
    for (size_t i = 0; i + 1 < syms.size(); i++) {
      const PairKey k = pair_key(syms[i], syms[i + 1]);
      counts_[k] += sign * words_[w].count;
      if (sign < 0 || !(indexed_id < 0 || syms[i] == indexed_id || syms[i + 1] == indexed_id)) continue;
      auto& where = where_[k];
      if (where.empty() || where.back() != w) where.push_back(w);
      if (indexed_id >= 0) touched_.push_back(k);
    }
  }

  // Replaces every (a, b) in every word that has one by `id`, left to right without overlaps.
  void apply(int32_t a, int32_t b, int32_t id, PairKey key) {
    std::vector<int32_t> words = std::move(where_[key]);
    where_.erase(key);
    touched_.clear();
    stamp_++;
    if (seen_.size() < words_.size()) seen_.resize(words_.size(), 0);
    for (int32_t w : words) {
      if (seen_[w] == stamp_) continue;
      seen_[w] = stamp_;
      auto& syms = words_[w].syms;
      bool has = false;
      for (size_t i = 0; i + 1 < syms.size() && !has; i++) has = syms[i] == a && syms[i + 1] == b;
      if (!has) continue;  // the index is lazy: the pair left this word through an earlier merge
      add_pairs(w, -1, -1);
      size_t out = 0;
      for (size_t i = 0; i < syms.size(); out++) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          syms[out] = id;
          i += 2;
        } else {
          syms[out] = syms[i++];
        }
      }
      syms.resize(out);
      add_pairs(w, +1, id);
    }
    counts_.erase(key);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (PairKey k : touched_)
      if (auto it = counts_.find(k); it != counts_.end() && it->second > 0) heap_push(it->second, k);
  }

  std::vector<Word> words_;
  std::unordered_map<PairKey, int64_t> counts_;             // pair -> total count over words
  std::unordered_map<PairKey, std::vector<int32_t>> where_; // pair -> words it (may) occur in
  std::vector<Candidate> heap_;
  std::vector<PairKey> touched_;  // pairs whose count grew in the current merge
  std::vector<uint32_t> seen_;    // [words] stamp_ of the merge that last visited the word
  uint32_t stamp_ = 0;
  std::vector<std::string> tokens_;  // [tokens] bytes of each id
  BytesMap token_ids_;               // bytes -> id
};

}  // namespace

std::vector<BpeMerge> learn_bpe_merges(const PieceCounts& pieces, int32_t ordinary_tokens,
                                       const std::function<bool()>& stop) {
  NANODDP_CHECK(ordinary_tokens >= 256, "a byte-level BPE needs at least 256 ordinary tokens, asked for {}",
                ordinary_tokens);
  MergeLearner learner(pieces);
  std::vector<BpeMerge> merges;
  while (learner.tokens() < ordinary_tokens) {
    if (stop && stop()) break;
    BpeMerge m;
    NANODDP_CHECK(learner.step(m), "the training text ran out of pairs to merge after {} tokens of the {} asked "
                  "for; give more text or a smaller --vocab_size", learner.tokens(), ordinary_tokens);
    merges.push_back(m);
  }
  return merges;
}

std::vector<std::string> tokens_from_merges(std::span<const BpeMerge> merges, int32_t ordinary_tokens) {
  std::vector<std::string> tokens(ordinary_tokens);
  for (int b = 0; b < 256; b++) tokens[b] = std::string(1, static_cast<char>(b));
  for (const auto& m : merges)
    if (tokens[m.id].empty()) tokens[m.id] = tokens[m.left] + tokens[m.right];
  return tokens;
}

std::string_view utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back up over continuation bytes (10xxxxxx) to the start of the character that would be cut.
  while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xc0) == 0x80) end--;
  return text.substr(0, end);
}

BpeVocab train_bpe(const BpeTrainOptions& opt, BpeTrainStats* stats, const std::function<bool()>& stop) {
  const int32_t specials = static_cast<int32_t>(std::size(kNanochatSpecials));
  NANODDP_CHECK(opt.vocab_size >= 256 + specials, "--vocab_size {} is smaller than the 256 byte tokens + {} special "
                "tokens = {} a byte-level BPE needs", opt.vocab_size, specials, 256 + specials);
  BpeTrainStats st;
  Stopwatch clock;
  DocumentReader reader(opt.input);
  PieceCounter counter(std::string(kNanochatSplitPattern), opt.threads);
  std::vector<std::string> batch;
  std::vector<std::string_view> views;
  bool budget_left = true;
  auto stopping = [&] { return st.stopped || (st.stopped = stop && stop()); };
  while (budget_left && !stopping() && read_document_batch(reader, batch, 64 << 20)) {
    views.clear();
    for (const auto& doc : batch) {
      std::string_view v = opt.doc_cap > 0 ? utf8_prefix(doc, opt.doc_cap) : std::string_view(doc);
      if (opt.max_chars > 0 && st.bytes + static_cast<int64_t>(v.size()) >= opt.max_chars) {
        v = utf8_prefix(v, opt.max_chars - st.bytes);
        budget_left = false;
      }
      views.push_back(v);
      st.documents++;
      st.bytes += static_cast<int64_t>(v.size());
      if (!budget_left) break;
    }
    counter.add(views);
  }
  if (st.stopped) {
    if (stats != nullptr) *stats = st;
    return {};
  }
  NANODDP_CHECK(st.bytes > 0, "no text to train on in {} (empty documents only?)", fmt::join(opt.input, ", "));
  PieceCounts pieces = counter.take();
  st.distinct_pieces = static_cast<int64_t>(pieces.pieces.size());
  st.count_seconds = clock.seconds();

  clock.reset();
  const int32_t ordinary = opt.vocab_size - specials;
  const auto merges = learn_bpe_merges(pieces, ordinary, stopping);
  st.merge_seconds = clock.seconds();
  if (st.stopped) {
    if (stats != nullptr) *stats = st;
    return {};
  }

  BpeVocab vocab;
  vocab.name = "trained";
  vocab.tokens = tokens_from_merges(merges, ordinary);
  vocab.pattern = std::string(kNanochatSplitPattern);
  for (int32_t i = 0; i < specials; i++) vocab.specials.push_back({std::string(kNanochatSpecials[i]), ordinary + i});
  vocab.bos = std::string(kNanochatSpecials[0]);
  if (stats != nullptr) *stats = st;
  return vocab;
}

}  // namespace nanoddp::data
