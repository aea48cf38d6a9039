#include "data/bpe_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "data/parallel.h"

namespace nanoddp::data {

// Per-thread encoding state: the PCRE2 matcher, merge buffers and the piece cache.
struct BpeTokenizer::Workspace {
  explicit Workspace(const SplitPattern& split) : matcher(split) {}
  SplitPattern::Matcher matcher;
  MergeScratch scratch;
  // Pieces that needed merging -> offset into cache_ids, where [count, id_0, ..., id_{count-1}].
  BytesMap cache;
  std::vector<int32_t> cache_ids;
};

namespace {

// Bounds on a workspace's cache; when either is reached the cache starts over empty.
constexpr size_t kCacheMaxPieces = 1 << 16;
constexpr size_t kCacheMaxBytes = 8 << 20;

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocab vocab) : vocab_(std::move(vocab)), split_(vocab_.pattern) {
  const auto& tokens = vocab_.tokens;
  NANODDP_CHECK(!tokens.empty() && tokens.size() < INT32_MAX, "tokenizer {}: {} ordinary tokens", vocab_.name,
                tokens.size());
  ranks_.reserve(tokens.size());
  for (size_t r = 0; r < tokens.size(); r++) {
    NANODDP_CHECK(!tokens[r].empty(), "tokenizer {}: token {} is empty", vocab_.name, r);
    NANODDP_CHECK(ranks_.insert(tokens[r], static_cast<uint32_t>(r)), "tokenizer {}: token {} repeats the bytes of "
                  "token {}", vocab_.name, r, *ranks_.find(tokens[r]));
  }
  for (int b = 0; b < 256; b++) {
    const char c = static_cast<char>(b);
    NANODDP_CHECK(ranks_.find(std::string_view(&c, 1)) != nullptr, "tokenizer {}: byte 0x{:02x} has no token; a "
                  "byte-level BPE needs all 256 single bytes", vocab_.name, b);
  }
  // Ids: ranks, then the special tokens (possibly after a gap).
  vocab_size_ = static_cast<int32_t>(tokens.size());
  for (const auto& s : vocab_.specials) {
    NANODDP_CHECK(s.id >= static_cast<int32_t>(tokens.size()), "tokenizer {}: special token {} has id {}, which is "
                  "an ordinary token's rank (ranks go up to {})", vocab_.name, s.text, s.id, tokens.size() - 1);
    vocab_size_ = std::max(vocab_size_, s.id + 1);
  }
  std::sort(vocab_.specials.begin(), vocab_.specials.end(), [](auto& a, auto& b) { return a.id < b.id; });
  is_special_.assign(vocab_size_, 0);
  is_valid_.assign(vocab_size_, 0);
  std::vector<const std::string*> text_of(vocab_size_, nullptr);
  for (size_t r = 0; r < tokens.size(); r++) text_of[r] = &tokens[r], is_valid_[r] = 1;
  bos_id_ = -1;
  for (const auto& s : vocab_.specials) {
    NANODDP_CHECK(!is_valid_[s.id], "tokenizer {}: two special tokens have id {}", vocab_.name, s.id);
    text_of[s.id] = &s.text, is_valid_[s.id] = 1, is_special_[s.id] = 1;
    if (s.text == vocab_.bos) bos_id_ = s.id;
  }
  NANODDP_CHECK(bos_id_ >= 0, "tokenizer {}: the BOS token '{}' is not one of its special tokens", vocab_.name,
                vocab_.bos);
  offsets_.assign(vocab_size_ + 1, 0);
  for (int32_t i = 0; i < vocab_size_; i++) {
    if (text_of[i] != nullptr) decode_bytes_ += *text_of[i];
    offsets_[i + 1] = static_cast<uint32_t>(decode_bytes_.size());
  }
}

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer::Workspace> BpeTokenizer::acquire_workspace() const {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!pool_.empty()) {
      auto ws = std::move(pool_.back());
      pool_.pop_back();
      return ws;
    }
  }
  return std::make_unique<Workspace>(split_);
}

void BpeTokenizer::release_workspace(std::unique_ptr<Workspace> ws) const {
  std::lock_guard<std::mutex> lock(pool_mu_);
  pool_.push_back(std::move(ws));
}

void BpeTokenizer::encode_into(std::string_view text, Workspace& ws, bool use_cache, std::vector<int32_t>& out) const {
  split_.split(ws.matcher, text, [&](std::string_view piece) {
    if (const uint32_t* r = ranks_.find(piece)) {  // most pieces are whole tokens
      out.push_back(static_cast<int32_t>(*r));
      return;
    }
    if (use_cache) {
      if (const uint32_t* at = ws.cache.find(piece)) {
        const int32_t* ids = ws.cache_ids.data() + *at;
        out.insert(out.end(), ids + 1, ids + 1 + ids[0]);
        return;
      }
    }
    const size_t first = out.size();
    bpe_merge(ranks_, piece, ws.scratch, out);
    if (!use_cache) return;
    if (ws.cache.size() >= kCacheMaxPieces || ws.cache.key_bytes() + piece.size() > kCacheMaxBytes) {
      ws.cache.clear();
      ws.cache_ids.clear();
    }
    ws.cache.insert(piece, static_cast<uint32_t>(ws.cache_ids.size()));
    ws.cache_ids.push_back(static_cast<int32_t>(out.size() - first));
    ws.cache_ids.insert(ws.cache_ids.end(), out.begin() + first, out.end());
  });
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  auto ws = acquire_workspace();
  encode_into(text, *ws, true, out);
  release_workspace(std::move(ws));
  return out;
}

std::vector<int32_t> BpeTokenizer::encode_uncached(std::string_view text) const {
  std::vector<int32_t> out;
  auto ws = acquire_workspace();
  encode_into(text, *ws, false, out);
  release_workspace(std::move(ws));
  return out;
}

std::vector<std::vector<int32_t>> BpeTokenizer::encode_batch(std::span<const std::string_view> texts,
                                                             int threads) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const int workers = resolve_threads(threads);
  std::vector<std::unique_ptr<Workspace>> ws(workers);  // [workers], each used by one thread only
  parallel_for(static_cast<int64_t>(texts.size()), workers, [&](int64_t i, int w) {
    if (!ws[w]) ws[w] = acquire_workspace();
    // Encode into a vector of this thread's own and move it into place once: out[i] and out[i + 1]
    // share a cache line, and two threads pushing into neighbours would fight over it.
    std::vector<int32_t> ids;
    ids.reserve(texts[i].size() / 3 + 16);
    encode_into(texts[i], *ws[w], true, ids);
    out[i] = std::move(ids);
  });
  for (auto& w : ws)
    if (w) release_workspace(std::move(w));
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  size_t bytes = 0;
  for (int32_t id : ids) {
    NANODDP_CHECK(id >= 0 && id < vocab_size_ && is_valid_[id], "cannot decode token id {}: tokenizer {} has no such "
                  "id (vocab_size {})", id, vocab_.name, vocab_size_);
    bytes += offsets_[id + 1] - offsets_[id];
  }
  std::string out;
  out.reserve(bytes);
  for (int32_t id : ids) out.append(decode_bytes_, offsets_[id], offsets_[id + 1] - offsets_[id]);
  return out;
}

std::vector<int32_t> BpeTokenizer::token_bytes() const {
  std::vector<int32_t> out(vocab_size_, 0);
  for (size_t r = 0; r < vocab_.tokens.size(); r++) out[r] = static_cast<int32_t>(vocab_.tokens[r].size());
  return out;
}

}  // namespace nanoddp::data
