#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace nanoddp::model {

int32_t sample_token(const float* logits, int64_t vocab, float temperature, int64_t top_k, Rng& rng) {
  if (temperature <= 0.f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t k = (top_k > 0 && top_k < vocab) ? top_k : vocab;
  // Largest k first; ties broken by id so the draw is deterministic.
  auto larger = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), larger);
  std::vector<double> p(k);
  const double mx = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; i++) sum += p[i] = std::exp((logits[ids[i]] - mx) / temperature);
  double u = rng.uniform() * sum;
  for (int64_t i = 0; i < k; i++) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[k - 1];
}

std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opts,
                              const std::function<void(int32_t)>& on_token) {
  NANODDP_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  KVCache cache(model, 1);
  Rng rng(opts.seed, stream_id("sample"));
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> out;
  Tensor ids = Tensor::empty({1, static_cast<int64_t>(prompt.size())}, DType::I32);
  std::copy(prompt.begin(), prompt.end(), ids.data<int32_t>());
  for (int64_t i = 0; i < opts.max_tokens && cache.length() + ids.dim(1) <= cache.capacity(); i++) {
    Tensor logits = model.forward_next(ids, cache);
    int32_t next = sample_token(logits.data<float>(), vocab, opts.temperature, opts.top_k, rng);
    out.push_back(next);
    if (on_token) on_token(next);
    if (opts.stops(next)) break;
    ids = Tensor::empty({1, 1}, DType::I32);
    ids.data<int32_t>()[0] = next;
  }
  return out;
}

void check_prompt_fits(int64_t prompt_tokens, int64_t context, const char* what) {
  NANODDP_CHECK(prompt_tokens < context, "{} is {} tokens with its BOS, which fills the model's context of {}: give "
                "a shorter prompt", what, prompt_tokens, context);
}

GenerationEnd generation_end(const std::vector<int32_t>& ids, const SampleOptions& opts) {
  if (!ids.empty() && opts.stops(ids.back())) return GenerationEnd::Stop;
  return static_cast<int64_t>(ids.size()) >= opts.max_tokens ? GenerationEnd::Length : GenerationEnd::Context;
}

const char* generation_end_name(GenerationEnd end) {
  switch (end) {
    case GenerationEnd::Stop: return "stop";
    case GenerationEnd::Length: return "length";
    case GenerationEnd::Context: return "context";
  }
  return "?";
}

std::vector<std::vector<int32_t>> generate_batch(GPT& model, const std::vector<int32_t>& prompt,
                                                 const std::vector<uint64_t>& seeds, const SampleOptions& opts) {
  NANODDP_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  const int64_t n = static_cast<int64_t>(seeds.size()), vocab = model.config().vocab_size;
  std::vector<std::vector<int32_t>> out(n);
  if (n == 0) return out;
  KVCache one(model, 1);
  Tensor ids = Tensor::empty({1, static_cast<int64_t>(prompt.size())}, DType::I32);
  std::copy(prompt.begin(), prompt.end(), ids.data<int32_t>());
  if (one.length() + ids.dim(1) > one.capacity() || opts.max_tokens < 1) return out;
  Tensor logits = model.forward_next(ids, one);
  KVCache cache(model, n);
  cache.replicate(one);
  std::vector<Rng> rngs;
  for (uint64_t s : seeds) rngs.emplace_back(s, stream_id("sample"));
  std::vector<bool> done(n, false);
  ids = Tensor::empty({n, 1}, DType::I32);
  for (int64_t step = 0;; step++) {
    int64_t running = 0;
    for (int64_t i = 0; i < n; i++) {
      // After the prompt every row sees the same logits (row 0 of the batch-1 forward).
      const float* row = logits.data<float>() + (step == 0 ? 0 : i * vocab);
      int32_t next = opts.stop_token >= 0 ? opts.stop_token : 0;
      if (!done[i]) {
        next = sample_token(row, vocab, opts.temperature, opts.top_k, rngs[i]);
        out[i].push_back(next);
        done[i] = opts.stops(next) || static_cast<int64_t>(out[i].size()) >= opts.max_tokens;
        running += done[i] ? 0 : 1;
      }
      // A finished row is fed a placeholder whose output nobody reads; the rows stay one batch.
      ids.data<int32_t>()[i] = next;
    }
    if (running == 0 || cache.length() + 1 > cache.capacity()) break;
    logits = model.forward_next(ids, cache);
  }
  return out;
}

}  // namespace nanoddp::model
