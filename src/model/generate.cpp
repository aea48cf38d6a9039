#include "model/generate.h"

#include <algorithm>

#include "core/rng.h"
#include "ops/ops.h"

namespace nanoddp::model {

namespace {

// Draws one id per row of the model's logits [rows, Vpad] where they are (ops::sample_tokens on
// the model's device: soft cap, temperature, top-k and the draw): each row's uniform goes to the
// device and its id comes back, nothing else crosses. Row i takes a uniform from rngs[i] only
// while live[i] and the temperature is above 0 (greedy draws none), one per token, so a seed's
// stream, and with it the text, does not depend on the device or on the other rows.
class Sampler {
 public:
  Sampler(const GPT& model, const SampleOptions& opts, int64_t rows)
      : opts_(opts),
        vocab_(model.config().vocab_size),
        cap_(model.config().softcap),
        ids_(Tensor::empty({rows}, DType::I32, model.device())),
        uniforms_(Tensor::zeros({rows}, DType::F32, model.device())),
        host_uniforms_(Tensor::zeros({rows}, DType::F32)) {}

  // The ids of all rows (a row that is not live gets one nobody should read).
  std::vector<int32_t> draw(const Tensor& logits, std::vector<Rng>& rngs, const std::vector<bool>& live) {
    float* u = host_uniforms_.data<float>();
    const bool draws = opts_.temperature > 0.f;  // greedy reads no uniform: nothing to send
    for (size_t i = 0; i < rngs.size(); i++) u[i] = live[i] && draws ? rngs[i].uniform() : 0.f;
    if (draws && !uniforms_.device().is_cpu()) copy(uniforms_, host_uniforms_);
    const Tensor& uniforms = uniforms_.device().is_cpu() ? host_uniforms_ : uniforms_;
    ops::sample_tokens(ids_, logits, uniforms, vocab_, cap_, opts_.temperature, opts_.top_k);
    const Tensor host = ids_.device().is_cpu() ? ids_ : ids_.copy_to(Device::cpu());
    return {host.data<int32_t>(), host.data<int32_t>() + host.numel()};
  }

 private:
  const SampleOptions& opts_;
  int64_t vocab_;
  float cap_;
  Tensor ids_;            // i32 [rows], on the model's device
  Tensor uniforms_;       // f32 [rows], on the model's device
  Tensor host_uniforms_;  // f32 [rows], on the host
};

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, float temperature, int64_t top_k, Rng& rng) {
  Tensor l = Tensor::empty({1, vocab}, DType::F32), u = Tensor::empty({1}, DType::F32),
         id = Tensor::empty({1}, DType::I32);
  std::copy(logits, logits + vocab, l.data<float>());
  u.data<float>()[0] = temperature > 0.f ? rng.uniform() : 0.f;
  ops::sample_tokens(id, l, u, vocab, /*softcap=*/0.f, temperature, top_k);  // already capped
  return id.data<int32_t>()[0];
}

std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opts,
                              const std::function<void(int32_t)>& on_token) {
  NANODDP_CHECK(!prompt.empty(), "generation needs a prompt of at least one token");
  KVCache cache(model, 1);
  std::vector<Rng> rng{Rng(opts.seed, stream_id("sample"))};
  Sampler sampler(model, opts, 1);
  std::vector<int32_t> out;
  Tensor ids = Tensor::empty({1, static_cast<int64_t>(prompt.size())}, DType::I32);
  std::copy(prompt.begin(), prompt.end(), ids.data<int32_t>());
  for (int64_t i = 0; i < opts.max_tokens && cache.length() + ids.dim(1) <= cache.capacity(); i++) {
    const int32_t next = sampler.draw(model.forward_next_device(ids, cache), rng, {true})[0];
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
  const int64_t n = static_cast<int64_t>(seeds.size());
  std::vector<std::vector<int32_t>> out(n);
  if (n == 0) return out;
  KVCache one(model, 1);
  Tensor ids = Tensor::empty({1, static_cast<int64_t>(prompt.size())}, DType::I32);
  std::copy(prompt.begin(), prompt.end(), ids.data<int32_t>());
  if (one.length() + ids.dim(1) > one.capacity() || opts.max_tokens < 1) return out;
  // After the prompt every row sees the same logits: row 0 of the batch-1 forward, repeated.
  const Tensor first = model.forward_next_device(ids, one);
  Tensor logits = Tensor::empty({n, first.dim(1)}, first.dtype(), first.device());
  for (int64_t i = 0; i < n; i++) copy(logits.rows(i, i + 1), first);
  KVCache cache(model, n);
  cache.replicate(one);
  std::vector<Rng> rngs;
  for (uint64_t s : seeds) rngs.emplace_back(s, stream_id("sample"));
  std::vector<bool> live(n, true);
  Sampler sampler(model, opts, n);
  ids = Tensor::empty({n, 1}, DType::I32);
  for (;;) {
    const std::vector<int32_t> drawn = sampler.draw(logits, rngs, live);
    int64_t running = 0;
    for (int64_t i = 0; i < n; i++) {
      int32_t next = opts.stop_token >= 0 ? opts.stop_token : 0;
      if (live[i]) {
        next = drawn[i];
        out[i].push_back(next);
        live[i] = !opts.stops(next) && static_cast<int64_t>(out[i].size()) < opts.max_tokens;
        running += live[i] ? 1 : 0;
      }
      // A finished row is fed a placeholder whose output nobody reads; the rows stay one batch.
      ids.data<int32_t>()[i] = next;
    }
    if (running == 0 || cache.length() + 1 > cache.capacity()) break;
    logits = model.forward_next_device(ids, cache);
  }
  return out;
}

}  // namespace nanoddp::model
