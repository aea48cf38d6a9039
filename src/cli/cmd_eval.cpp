// nanoddp eval: sampled accuracy of a checkpoint on a task (nanochat's chat_eval; the loop is
// chat/eval_loop.h): problems are strided by rank, each is answered num_samples times, and the
// counts are summed over ranks, so any world size gives the same numbers. The last line printed is JSON.
#include <fmt/format.h>

#include <cmath>

#include "chat/eval_loop.h"
#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/rank_setup.h"
#include "cli/stop_signal.h"
#include "comm/backend_kind.h"
#include "comm/consistency.h"
#include "core/error.h"
#include "core/log.h"
#include "data/tasks.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/report.h"
#include "train/validate.h"

namespace nanoddp::cli {

namespace {

// Answers per problem (nanochat's pass@k evaluations use a handful) and in all: beyond these a
// value is a typo, and the loop over them would run for years.
constexpr int64_t kMaxEvalSamples = int64_t{1} << 16;
constexpr int64_t kMaxEvalAnswers = int64_t{1} << 32;

struct EvalArgs {
  std::string checkpoint = "out";
  std::string task = "";
  int64_t count = 100;
  uint64_t task_seed = 1000;
  int64_t num_samples = 1;
  double temperature = 0;
  int64_t top_k = 0;
  int64_t max_tokens = 64;
  uint64_t seed = 42;
  std::string device = "cpu";
  train::DtypeChoice dtype = train::DtypeChoice::Auto;
  dist::BackendKind backend = dist::BackendKind::Auto;
  double timeout = 300;
  data::RewardRule reward = data::RewardRule::Auto;
  template <typename V>
  void visit(V&& v) {
    v(checkpoint, "checkpoint", "Checkpoint directory, or a run's --out (its newest checkpoint)");
    v(task, "task", "A JSONL file of questions (nanoddp task --format questions), or a bundled task's name");
    v(count, "count", "With a bundled task's name: how many problems");
    v(task_seed, "task_seed", "With a bundled task's name: the seed of the problems (not the training seed)");
    v(num_samples, "num_samples", "Answers sampled per problem");
    v(temperature, "temperature", "Sampling temperature (0 = greedy)");
    v(top_k, "top_k", "Sample among the k most likely tokens (0 = all)");
    v(max_tokens, "max_tokens", "Longest answer in tokens");
    v(seed, "seed", "Seed of the sampler (each problem and sample draws from its own stream)");
    v(device, "device", "cpu or cuda");
    v(dtype, "dtype", "Activations: auto (bf16 on CUDA, fp32 on the CPU), fp32, bf16 or fp16 (nanochat's --dtype)");
    v(backend, "backend", "Process group: auto, gloo, mpi, nccl");
    v(timeout, "timeout", "Seconds before a rendezvous or collective that does not complete is an error");
    v(reward, "reward", "How an answer scores: gsm8k (the answer after its last \"####\"), contains (the answer as "
      "a whole word or number), exact (the whole reply), auto (gsm8k for the bundled tasks and answers with "
      "\"####\", else contains)");
  }
};

// Before the rendezvous, identically on every rank.
void check_eval_flags(const EvalArgs& a) {
  NANODDP_CHECK(!a.task.empty(), "--task is required: a questions file or one of spelling, letters, arithmetic, "
                "addition");
  // Checked even for a questions file, which ignores it: as many as a bundled task can make.
  NANODDP_CHECK(a.count >= 1 && a.count <= (int64_t{1} << 24), "--count must be between 1 and {} (got {})",
                int64_t{1} << 24, a.count);
  NANODDP_CHECK(a.num_samples >= 1, "--num_samples must be at least 1 (got {})", a.num_samples);
  NANODDP_CHECK(a.num_samples <= kMaxEvalSamples, "--num_samples {} is too large: at most {} answers per problem",
                a.num_samples, kMaxEvalSamples);
  check_sampling_flags(a.max_tokens, a.temperature, a.top_k);
  // As train's --timeout: longer waits overflow the clocks' integer nanoseconds.
  NANODDP_CHECK(std::isfinite(a.timeout) && a.timeout > 0 && a.timeout <= 1e9, "--timeout must be a positive number "
                "of seconds, at most 1e9 (got {})", a.timeout);
}

}  // namespace

void add_eval_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("eval", "Accuracy of a checkpoint on a task, problems strided over the ranks");
  auto args = std::make_shared<EvalArgs>();
  add_option_flags(*cmd, *args);
  cmd->callback([args] {
    const EvalArgs& a = *args;
    check_eval_flags(a);
    const RankSetup rank = join_process_group(a.device, a.backend, a.timeout);
    const Device device = rank.device;
    dist::ProcessGroup& group = *rank.context->group;
    check_input_path("--checkpoint", a.checkpoint, PathKind::Directory);
    const std::string dir = train::resolve_checkpoint(a.checkpoint);
    // Every rank must evaluate the same thing: a rank started with another flag or checkpoint would
    // add its counts to a different experiment's (as train checks its ranks before computing).
    if (group.size() > 1) {
      dist::check_consistent(group, dist::build_fingerprint(), "install the same nanoddp build on every node");
      dist::Fields fields;
      EvalArgs named = a;
      named.visit([&](const auto& value, const char* name, const char*) {
        if constexpr (TextOption<std::decay_t<decltype(value)>>)
          fields.emplace_back(fmt::format("--{}", name), option_text(value));
        else
          fields.emplace_back(fmt::format("--{}", name), fmt::format("{}", value));
      });
      fields.emplace_back("the checkpoint's step", std::to_string(train::read_checkpoint_meta(dir).value("step", -1)));
      dist::check_consistent(group, fields);
    }
    auto model = train::load_model(dir, device, a.dtype);
    auto tok = train::load_checkpoint_tokenizer(dir, "");
    const auto questions = data::load_questions(a.task, a.count, a.task_seed);
    const data::RewardRule reward = data::resolve_reward_rule(a.reward, a.task, questions);
    // Checked before any answer is sampled: the loop runs problems x num_samples times.
    const int64_t problems = static_cast<int64_t>(questions.size());
    NANODDP_CHECK(problems <= kMaxEvalAnswers / a.num_samples, "--num_samples {} x {} problems of {} is too large: an "
                  "evaluation samples at most {} answers", a.num_samples, problems, a.task, kMaxEvalAnswers);
    const chat::EvalSettings settings{.num_samples = a.num_samples, .max_tokens = a.max_tokens,
                                      .temperature = static_cast<float>(a.temperature), .top_k = a.top_k,
                                      .seed = a.seed, .reward = reward, .task = a.task};
    const StopOnSignal stop;
    const chat::EvalCounts mine = chat::evaluate_problems(*model, *tok, questions, settings, group.rank(),
                                                          group.size(), [](int64_t answers) {
      if (StopOnSignal::received() != 0) StopOnSignal::stop("eval", fmt::format("after {} answers", answers));
    });
    // The counts of all ranks (each answered its stride of the problems).
    std::vector<double> sums{static_cast<double>(mine.correct), static_cast<double>(mine.answers),
                             static_cast<double>(mine.passed), static_cast<double>(mine.problems)};
    dist::allreduce_scalars(group, sums, dist::ReduceOp::Sum);
    const chat::EvalCounts all{.correct = static_cast<int64_t>(sums[0]), .answers = static_cast<int64_t>(sums[1]),
                               .passed = static_cast<int64_t>(sums[2]), .problems = static_cast<int64_t>(sums[3])};
    const nlohmann::json result{{"task", a.task}, {"accuracy", all.accuracy()}, {"n", all.answers},
                                {"correct", all.correct}, {"pass_at_k", all.pass_at_k()},
                                {"passed", all.passed}, {"problems", questions.size()},
                                {"num_samples", a.num_samples}, {"reward", data::reward_rule_name(reward)},
                                {"checkpoint", dir}};
    // Kept in the run folder for `nanoddp report` (Note [pipeline report] in train/report.h). A
    // folder one may not write to (someone else's checkpoint) costs the record, not the result.
    if (group.rank() == 0) {
      try {
        train::record_eval(dir, result);
      } catch (const Error& e) {
        log::warn("{}; the result below is not kept for nanoddp report", e.what());
      }
    }
    log::print0("{}", result.dump());
  });
}

}  // namespace nanoddp::cli
