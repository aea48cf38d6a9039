// nanoddp sample: generate text from a checkpoint with a KV cache.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "chat/text_stream.h"
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/rank_setup.h"
#include "cli/stop_signal.h"
#include "core/error.h"
#include "model/generate.h"
#include "train/checkpoint.h"
#include "train/model_io.h"

namespace nanoddp::cli {

namespace {

// The flags of `nanoddp sample`, in the typed-options form of core/options.h.
struct SampleArgs {
  std::string checkpoint = "out";
  std::string prompt = "";
  int64_t max_tokens = 128;
  double temperature = 0.8;
  int64_t top_k = 50;
  uint64_t seed = 42;
  std::string data = "";
  std::string device = "cpu";
  std::string dtype = "auto";
  template <typename V>
  void visit(V&& v) {
    v(checkpoint, "checkpoint", "Checkpoint directory, or a run's OUT directory (its newest checkpoint)");
    v(prompt, "prompt", "Text to continue (a <|bos|> is put before it)");
    v(max_tokens, "max_tokens", "Tokens to generate");
    v(temperature, "temperature", "Sampling temperature (0 = greedy)");
    v(top_k, "top_k", "Sample among the k most likely tokens (0 = all)");
    v(seed, "seed", "Random seed of the sampler");
    v(data, "data", "Dataset directory whose tokenizer to use (default: the one recorded in the checkpoint)");
    v(device, "device", "cpu or cuda");
    v(dtype, "dtype", "Activations: auto (bf16 on CUDA, fp32 on the CPU), fp32, bf16 or fp16 (nanochat's --dtype)");
  }
};

}  // namespace

void check_sampling_flags(int64_t max_tokens, double temperature, int64_t top_k) {
  NANODDP_CHECK(max_tokens >= 1, "--max_tokens must be at least 1 (got {})", max_tokens);
  NANODDP_CHECK(std::isfinite(temperature) && temperature >= 0, "--temperature must be a finite number >= 0 (0 = "
                "greedy; got {})", temperature);
  NANODDP_CHECK(top_k >= 0, "--top_k must be 0 (all tokens) or positive (got {})", top_k);
}

void add_sample_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("sample", "Generate text from a trained checkpoint");
  auto args = std::make_shared<SampleArgs>();
  add_option_flags(*cmd, *args);
  cmd->callback([args] {
    check_sampling_flags(args->max_tokens, args->temperature, args->top_k);
    check_input_path("--checkpoint", args->checkpoint, PathKind::Directory);
    const std::string dir = train::resolve_checkpoint(args->checkpoint);
    auto model = train::load_model(dir, single_process_device(args->device), args->dtype);
    auto tokenizer = train::load_checkpoint_tokenizer(dir, args->data);
    // Training documents start with BOS, so the prompt does too; generating a BOS ends the text.
    std::vector<int32_t> prompt{tokenizer->bos_id()};
    auto ids = tokenizer->encode(args->prompt);
    prompt.insert(prompt.end(), ids.begin(), ids.end());
    // As chat and eval: a prompt that leaves no room for one token is an error, not an empty text.
    model::check_prompt_fits(static_cast<int64_t>(prompt.size()), model->config().max_seq_len, "--prompt");
    model::SampleOptions so;
    so.max_tokens = args->max_tokens;
    so.temperature = static_cast<float>(args->temperature);
    so.top_k = args->top_k;
    so.seed = args->seed;
    so.stop_token = tokenizer->bos_id();
    chat::TextStream generated(*tokenizer);
    fmt::print("{}", args->prompt);
    const StopOnSignal stop;
    int64_t count = 0;
    const auto out = model::generate(*model, prompt, so, [&](int32_t id) {
      if (!so.stops(id)) generated.add(id);
      count++;
      if (StopOnSignal::received() != 0) StopOnSignal::stop("sample", fmt::format("after {} tokens", count));
    });
    generated.finish();
    // Ended neither by BOS nor by --max_tokens: the model's context is full. Say so, on stderr.
    if (model::generation_end(out, so) == model::GenerationEnd::Context)
      fmt::print(stderr, "nanoddp sample: stopped after {} tokens: prompt and text fill the model's context of {} "
                 "tokens\n", generated.ids().size(), model->config().max_seq_len);
  });
}

}  // namespace nanoddp::cli
