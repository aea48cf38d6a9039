// nanoddp chat: talk to an SFT checkpoint in the terminal (nanochat's chat_cli): each turn renders
// the whole conversation so far with nanochat's special tokens and samples the assistant's reply
// until <|assistant_end|>, printing it as it comes. --prompt TEXT answers once and exits (scripts).
// Typed alone, as in chat_cli: 'clear' starts a new conversation, 'quit' or 'exit' ends the chat.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "chat/prompt.h"
#include "chat/stop_rule.h"
#include "chat/text_stream.h"
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/rank_setup.h"
#include "cli/stop_signal.h"
#include "core/error.h"
#include "data/conversation.h"
#include "model/generate.h"
#include "train/checkpoint.h"
#include "train/model_io.h"

namespace nanoddp::cli {

namespace {

struct ChatArgs {
  std::string checkpoint = "out";
  std::string prompt = "";
  double temperature = 0.6;
  int64_t top_k = 50;
  int64_t max_tokens = 256;
  uint64_t seed = 42;
  std::string data = "";
  std::string device = "cpu";
  std::string dtype = "auto";
  template <typename V>
  void visit(V&& v) {
    v(checkpoint, "checkpoint", "Checkpoint directory, or a run's --out (its newest checkpoint)");
    v(prompt, "prompt", "Answer this one message and exit (otherwise: an interactive chat; 'quit' ends it)");
    v(temperature, "temperature", "Sampling temperature (0 = greedy)");
    v(top_k, "top_k", "Sample among the k most likely tokens (0 = all)");
    v(max_tokens, "max_tokens", "Longest reply in tokens");
    v(seed, "seed", "Seed of the sampler");
    v(data, "data", "Dataset directory whose tokenizer to use (default: the checkpoint's)");
    v(device, "device", "cpu or cuda");
    v(dtype, "dtype", "Activations: auto (bf16 on CUDA, fp32 on the CPU), fp32, bf16 or fp16 (nanochat's --dtype)");
  }
};

// nanochat's words typed alone at the prompt, in any case and with spaces around: "quit" and "exit"
// end the chat, "clear" starts a new conversation. "" for anything else.
std::string typed_command(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t\r"), last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) return "";
  std::string word = line.substr(first, last - first + 1);
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
  return word == "quit" || word == "exit" || word == "clear" ? word : "";
}

// The next message typed at the prompt; nullopt when the chat ends (quit, exit, Ctrl-D). "clear"
// starts a new conversation: `conv` is emptied and `turn` restarts, so that the seeds of its replies
// start again too, as in a new chat.
std::optional<std::string> next_message(data::Conversation& conv, uint64_t& turn) {
  for (;;) {
    fmt::print("\nuser> ");
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    const std::string typed = typed_command(line);
    if (typed == "quit" || typed == "exit") return std::nullopt;
    if (typed == "clear") {
      conv.messages.clear();
      turn = 0;
      fmt::print("(conversation cleared: the next message starts a new one)\n");
    } else if (line.find_first_not_of(" \t") != std::string::npos) {
      return line;
    }
  }
}

}  // namespace

void add_chat_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("chat", "Chat with a checkpoint in the terminal (nanochat's chat_cli)");
  auto args = std::make_shared<ChatArgs>();
  add_option_flags(*cmd, *args);
  cmd->callback([args] {
    const ChatArgs& a = *args;
    check_sampling_flags(a.max_tokens, a.temperature, a.top_k);
    check_input_path("--checkpoint", a.checkpoint, PathKind::Directory);
    const std::string dir = train::resolve_checkpoint(a.checkpoint);
    auto model = train::load_model(dir, single_process_device(a.device), a.dtype);
    auto tok = train::load_checkpoint_tokenizer(dir, a.data);
    // The sampling of every reply (its seed aside), made here so that a tokenizer without the
    // reply's stop token fails before the first message.
    const model::SampleOptions reply_sampling =
        chat::reply_options(*tok, a.max_tokens, static_cast<float>(a.temperature), a.top_k, a.seed);
    // Room kept for the reply when old turns must go: --max_tokens, but at most half the context, so
    // that a --max_tokens near the context does not forget every earlier turn on every turn (a reply
    // may then be cut short by the context, as serve's may).
    const int64_t context = model->config().max_seq_len, reserve = std::min<int64_t>(a.max_tokens, context / 2);
    data::Conversation conv;
    conv.where = "the chat";
    const bool once = !a.prompt.empty();
    uint64_t turn = 0;
    if (!once) fmt::print("nanoddp chat with {} ('quit' or Ctrl-D ends it, 'clear' starts a new conversation)\n", dir);
    for (;;) {
      std::string line = a.prompt;
      if (!once) {
        std::optional<std::string> typed = next_message(conv, turn);
        if (!typed) break;
        line = std::move(*typed);
      }
      // Room for the reply within the model's context: the oldest turns are forgotten when it is full.
      // A message too long for the context is refused and the chat goes on (--prompt: an error).
      data::Conversation next = conv;
      next.messages.push_back({"user", {{"text", line}}});
      int64_t dropped = 0;
      std::vector<int32_t> prompt;
      try {
        prompt = chat::fit_to_context(*tok, next, reserve, context, dropped);
      } catch (const Error& e) {
        if (once) NANODDP_FAIL("--prompt: {}: give a shorter prompt", e.what());
        fmt::print("({}: say it in fewer words)\n", e.what());
        continue;
      }
      conv = std::move(next);
      if (dropped > 0 && !once)
        fmt::print("(the oldest {} message(s) no longer fit the model's context of {} tokens and are left out)\n",
                   dropped, context);
      model::SampleOptions so = reply_sampling;
      so.seed = a.seed + turn++;
      if (!once) fmt::print("assistant> ");
      chat::TextStream reply(*tok);
      // Only while a reply is generated: reading the next line, a signal ends the chat as usual.
      const StopOnSignal stop;
      const auto out = model::generate(*model, prompt, so, [&](int32_t id) {
        if (!so.stops(id)) reply.add(id);
        if (StopOnSignal::received() != 0)
          StopOnSignal::stop("chat", fmt::format("in the middle of a reply ({} tokens)", reply.ids().size()));
      });
      const std::string text = reply.finish();
      // Ended neither by the model nor by --max_tokens: the context is full, as sample says too.
      if (model::generation_end(out, so) == model::GenerationEnd::Context)
        fmt::print(stderr, "\nnanoddp chat: the reply stopped after {} tokens: the conversation fills the model's "
                   "context of {} tokens\n", out.size(), context);
      conv.messages.push_back({"assistant", {{"text", text.empty() ? " " : text}}});
      if (once) break;
    }
  });
}

}  // namespace nanoddp::cli
