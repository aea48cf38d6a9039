// Text generation: temperature and top-k sampling over the model's next-token logits, with a KV
// cache so each new token costs one position of compute. The logits stay on the model's device:
// ops::sample_tokens draws there (Note [sampling on the device], ops/sample_math.h) and only one
// id per row comes back per token, so a GPU model samples without copying its logits to the host.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"

namespace nanoddp::model {

struct SampleOptions {
  int64_t max_tokens = 64;
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = the whole vocabulary
  uint64_t seed = 42;
  int32_t stop_token = -1;   // generation ends after emitting this id (e.g. <|bos|>); -1 = none
  int32_t also_stop = -1;    // a second such id: nanochat ends a reply at <|assistant_end|> or <|bos|>
  bool stops(int32_t id) const { return id >= 0 && (id == stop_token || id == also_stop); }
};

// Continues `prompt` (at least one id); calls on_token for each new id as it is produced and
// returns all new ids.
std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opts,
                              const std::function<void(int32_t)>& on_token = {});

// Throws nanoddp::Error when a prompt of `prompt_tokens` ids (its BOS included) leaves no room in
// the model's `context` for one more: generate() would return nothing. `what` names the prompt's flag.
void check_prompt_fits(int64_t prompt_tokens, int64_t context, const char* what);

// Why generate() ended, read off the ids it returned: the last is a stop id, or max_tokens came,
// or else the model's context (the KV cache) filled up and the text is cut short.
enum class GenerationEnd { Stop, Length, Context };
GenerationEnd generation_end(const std::vector<int32_t>& ids, const SampleOptions& opts);
// "stop", "length", "context" (OpenAI's finish_reason, where it has one).
const char* generation_end_name(GenerationEnd end);

// Continues `prompt` once per seed, batched: the prompt runs once, its KV cache is replicated to
// seeds.size() rows, and each step samples every unfinished row from its own stream (row i draws
// as generate() with seed seeds[i] would). A row ends at a stop id (kept) or max_tokens. This is
// what RL's N samples per question cost: one forward of N rows per token instead of N forwards.
std::vector<std::vector<int32_t>> generate_batch(GPT& model, const std::vector<int32_t>& prompt,
                                                 const std::vector<uint64_t>& seeds, const SampleOptions& opts);

// Picks an id from host logits [vocab] (already soft-capped): greedy at temperature 0, otherwise a
// draw from softmax(logits / temperature) restricted to the top_k largest, with one uniform from
// rng. The same draw as generate()'s (ops::sample_tokens on the CPU).
int32_t sample_token(const float* logits, int64_t vocab, float temperature, int64_t top_k, Rng& rng);

}  // namespace nanoddp::model
