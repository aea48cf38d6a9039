// What every tokenizer shares: batch encoding, special tokens inside text, and load_tokenizer().
#include "data/tokenizer.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/parallel.h"
#include "data/tokenizer_file.h"

namespace nanoddp::data {

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string_view> texts,
                                                          int threads) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  parallel_for(static_cast<int64_t>(texts.size()), resolve_threads(threads),
               [&](int64_t i, int) { out[i] = encode(texts[i]); });
  return out;
}

// Cuts the text at each occurrence of an allowed special token: the earliest occurrence first, the
// longest token when several start at the same byte; the text between is encoded as ordinary text.
std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text, std::span<const std::string> allowed,
                                                     bool allowed_all) const {
  std::vector<SpecialToken> specials;
  for (auto& s : special_tokens())
    if (allowed_all || std::find(allowed.begin(), allowed.end(), s.text) != allowed.end()) specials.push_back(s);
  for (const auto& a : allowed) special_id(a);  // an unknown name is an error, not silently ignored
  // next_at[k]: where specials[k] next occurs at or after `pos` (npos: nowhere), found lazily.
  std::vector<size_t> next_at(specials.size());
  for (size_t k = 0; k < specials.size(); k++) next_at[k] = text.find(specials[k].text);
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string_view::npos, best_k = 0;
    for (size_t k = 0; k < specials.size(); k++) {
      if (next_at[k] != std::string_view::npos && next_at[k] < pos) next_at[k] = text.find(specials[k].text, pos);
      if (next_at[k] < best || (next_at[k] == best && best != std::string_view::npos &&
                                specials[k].text.size() > specials[best_k].text.size()))
        best = next_at[k], best_k = k;
    }
    const size_t end = best == std::string_view::npos ? text.size() : best;
    auto ids = encode(text.substr(pos, end - pos));
    out.insert(out.end(), ids.begin(), ids.end());
    if (best == std::string_view::npos) break;
    out.push_back(specials[best_k].id);
    pos = best + specials[best_k].text.size();
  }
  return out;
}

int32_t Tokenizer::special_id(std::string_view text) const {
  std::string known;
  for (auto& s : special_tokens()) {
    if (s.text == text) return s.id;
    known += (known.empty() ? "" : ", ") + s.text;
  }
  NANODDP_FAIL("tokenizer {} has no special token '{}' (it has: {})", name(), text, known);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return make_byte_tokenizer();
  if (is_npm_encoding(spec)) return std::make_unique<BpeTokenizer>(read_npm_encoding(spec));
  NANODDP_CHECK(std::filesystem::is_regular_file(spec), "unknown tokenizer '{}': expected bytes, gpt2, cl100k_base, "
                "o200k_base or a tokenizer file (no file {} exists)", spec, spec);
  return std::make_unique<BpeTokenizer>(read_tokenizer_file(spec));
}

}  // namespace nanoddp::data
