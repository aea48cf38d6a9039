// The chat stages' throughput against base training's, measured in one run on one model:
//  - SFT: a training step fed by the ConversationLoader (arithmetic conversations, packed into
//    rows, loss only on the assistant's tokens) against the same step on random token rows (base
//    training); also what one conversation per row, padded out, would leave of a row.
//  - RL sampling: N completions of one prompt one after the other (generate) against batched with
//    a replicated KV cache (generate_batch), in completion tokens per second.
//   build/bench/bench_chat_stages --depth 4 --threads 2
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "comm/process_group.h"
#include "core/timer.h"
#include "data/conversation.h"
#include "data/conversation_loader.h"
#include "data/tasks.h"
#include "model/generate.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "step_harness.h"

namespace {

using namespace nanoddp;

struct Args {
  int depth = 4, vocab = 4096, seq = 256, batch = 8, steps = 10, warmup = 2, threads = 0;
  int samples = 16, new_tokens = 64;
};

// Seconds per step, the best of `steps` after `warmup` (the least disturbed by other processes).
template <typename F>
double best_seconds(int warmup, int steps, F&& f) {
  for (int i = 0; i < warmup; i++) f();
  double best = 1e30;
  for (int i = 0; i < steps; i++) {
    Stopwatch sw;
    f();
    best = std::min(best, sw.seconds());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"SFT and RL throughput against base training on the same model"};
  app.add_option("--depth", a.depth);
  app.add_option("--vocab", a.vocab);
  app.add_option("--seq", a.seq);
  app.add_option("--batch", a.batch);
  app.add_option("--steps", a.steps);
  app.add_option("--threads", a.threads, "CPU threads (0 = all)");
  app.add_option("--samples", a.samples, "RL: completions per prompt");
  app.add_option("--new_tokens", a.new_tokens, "RL: tokens per completion");
  CLI11_PARSE(app, argc, argv);
  try {
    ops::set_cpu_threads(a.threads);
    auto tok = data::make_byte_tokenizer();
    // The bundled arithmetic task as SFT conversations.
    const std::string file = (std::filesystem::temp_directory_path() / "nanoddp_bench_arith.jsonl").string();
    {
      std::ofstream out(file);
      for (const auto& it : data::make_task("arithmetic", 2000, 1)) out << data::task_item_conversation_json(it) << "\n";
    }
    auto group = dist::make_single_rank_group(Device::cpu());
    bench::StepBench run({.depth = a.depth, .vocab = a.vocab, .seq = a.seq, .batch = a.batch, .optimizer = ddp::OptimizerKind::Muon},
                         *group);
    const double tokens = static_cast<double>(a.batch) * a.seq;
    const double base = best_seconds(a.warmup, a.steps, [&] { run.step(); });
    data::LoaderOptions lo{a.batch, a.seq, 0, 1, true, 1};
    data::ConversationLoader sft(std::vector<std::string>{file}, *tok, lo, false);
    const double packed = best_seconds(a.warmup, a.steps, [&] {
      sft.next(run.inputs(), run.targets());
      run.step();
    });
    // Padding instead: one conversation per row, the rest of the row wasted.
    double conv_tokens = 0, convs = 0;
    for (const auto& c : data::read_conversations(file)) {
      conv_tokens += static_cast<double>(data::render_conversation(*tok, c, a.seq + 1).ids.size());
      convs += 1;
    }
    const double fill = std::min(1.0, conv_tokens / convs / (a.seq + 1));
    fmt::print("model: depth {} | vocab {} | rows {} x {} tokens | {} threads\n", a.depth, a.vocab, a.batch, a.seq,
               ops::cpu_threads());
    fmt::print("base step (random token rows)        {:9.0f} tok/s\n", tokens / base);
    fmt::print("SFT step (packed conversations)      {:9.0f} tok/s  = {:.3f} x base\n", tokens / packed,
               base / packed);
    fmt::print("SFT one conversation per padded row: {:.1f}% of each row is conversation -> {:.0f} useful tok/s "
               "= {:.3f} x base\n", 100 * fill, fill * tokens / base, fill);

    // RL sampling: a prompt of the task, N samples of new_tokens each (no stop token: equal work).
    model::GPT& model = run.model();
    const auto q = data::load_questions("arithmetic", 1, 5)[0];
    const auto prompt = data::render_for_completion(*tok, q.conversation);
    model::SampleOptions so{.max_tokens = a.new_tokens, .temperature = 1.f, .top_k = 50, .seed = 0, .stop_token = -1};
    std::vector<uint64_t> seeds;
    for (int i = 0; i < a.samples; i++) seeds.push_back(static_cast<uint64_t>(i + 1));
    const double one_by_one = best_seconds(1, 3, [&] {
      for (uint64_t s : seeds) {
        so.seed = s;
        model::generate(model, prompt, so);
      }
    });
    const double batched = best_seconds(1, 3, [&] { model::generate_batch(model, prompt, seeds, so); });
    const double sampled = static_cast<double>(a.samples) * a.new_tokens;
    fmt::print("RL sampling, {} samples x {} tokens after a {}-token prompt:\n", a.samples, a.new_tokens,
               prompt.size());
    fmt::print("  one by one (generate)              {:9.0f} tok/s\n", sampled / one_by_one);
    fmt::print("  batched (generate_batch)           {:9.0f} tok/s  = {:.2f} x one by one\n", sampled / batched,
               one_by_one / batched);
    std::filesystem::remove(file);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_chat_stages: {}\n", e.what());
    return 1;
  }
  return 0;
}
