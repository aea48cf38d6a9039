#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <csignal>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <vector>

#include "core/log.h"
#include "core/machine.h"
#include "core/options.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "core/trace.h"
#include "core/files.h"
#include "data/conversation_loader.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/tasks.h"
#include "data/tokenizer_file.h"
#include "comm/consistency.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "nanoddp/build_config.h"
#include "ops/backend.h"
#include "ops/engines.h"
#include "ops/ops.h"
#include "ops/profile.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/metrics.h"
#include "train/progress.h"
#include "train/rl.h"
#include "train/run_folder.h"
#include "train/schedule.h"
#include "train/validate.h"

namespace nanoddp::train {

namespace {

// Note [stopping on a signal]: SIGTERM (what torchrun, the launcher and job schedulers send) and
// SIGINT set a flag; at the next step boundary the ranks agree on it (one small allreduce per
// step), save a checkpoint and stop, so the work up to that step is kept. A second signal means
// "now": the process exits at once, as it would have without this.
//
// Note [signals and oneDNN's JIT GEMMs]: oneDNN 2.6's JIT sgemm kernels point rsp into a heap buffer
// while they run (oneDNN issue 4845, fixed upstream in 3.11; Debian 12 ships 2.6). A signal handled
// on the interrupted stack has its frame written there, into the heap: 1 in 4-50 SIGTERMs during
// a CPU run with a busy machine aborted at a later free() with "corrupted size vs. prev_size"
// (core dump: free inside dnnl_sgemm), and the run's work was lost. So the handler runs on an
// alternate signal stack (SA_ONSTACK), set up on every thread that runs GEMMs: the caller's and
// the OpenMP team's. Other threads (Gloo's, the store's) run no JIT code.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) std::_Exit(128 + sig);
  g_stop_signal = sig;
}

// This thread's alternate signal stack, made once and kept for the thread's life (disabled before
// its memory goes). 64 KiB: a signal frame holds the whole AVX-512 (and AMX) register state.
void use_alternate_signal_stack() {
  struct AltStack {
    std::vector<char> memory = std::vector<char>(64 * 1024);
    AltStack() {
      stack_t ss{};
      ss.ss_sp = memory.data();
      ss.ss_size = memory.size();
      NANODDP_CHECK(::sigaltstack(&ss, nullptr) == 0, "sigaltstack failed: {}", std::strerror(errno));
    }
    ~AltStack() {
      stack_t ss{};
      ss.ss_flags = SS_DISABLE;
      ::sigaltstack(&ss, nullptr);
    }
  };
  thread_local AltStack stack;
  (void)stack;
}

// Installs on_stop_signal for SIGTERM and SIGINT for the lifetime of the object (training only:
// a library caller's own handlers come back afterwards).
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    ops::on_every_cpu_thread(use_alternate_signal_stack);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_ONSTACK | SA_RESTART;  // SA_RESTART: as std::signal does on Linux
    ::sigaction(SIGTERM, &sa, &old_term_);
    ::sigaction(SIGINT, &sa, &old_int_);
  }
  ~StopSignals() {
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

// "a.jsonl,b.jsonl" -> its items (empty ones dropped).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// Whether every element of t is finite (t on any device; a GPU tensor is copied to the host).
bool all_finite(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.copy_to(Device::cpu());
  if (h.dtype() != DType::F32) return true;  // only f32 master weights are checked
  const float* p = h.data<float>();
  for (int64_t i = 0; i < h.numel(); i++)
    if (!std::isfinite(p[i])) return false;
  return true;
}

// The run's sizes, derived from the options, the dataset and the world size.
struct Plan {
  model::GPTConfig config;
  // Micro-steps per optimizer step.
  int64_t grad_accum = 1;
  int64_t num_iterations = 0;
  // Over all ranks.
  int64_t tokens_per_step = 0;
  int64_t eval_micro_batches = 1;
};

Plan make_plan(const TrainOptions& o, const data::DatasetMeta& meta, int world) {
  Plan p;
  p.config = model::GPTConfig::from_depth(o.depth, meta.vocab_size, o.max_seq_len, o.aspect_ratio, o.head_dim,
                                          o.n_kv_head);
  // Tokens of one micro-step over all ranks.
  const int64_t per_micro = o.device_batch_size * o.max_seq_len * world;
  if (o.stage == "rl") {
    // RL's batch is questions, not tokens: examples_per_step over all ranks; the tokens a step trains
    // on depend on what is sampled. Its length is --num_iterations, or --num_epochs over the questions
    // (counted once they are loaded).
    NANODDP_CHECK(o.examples_per_step % world == 0, "--examples_per_step {} is not a multiple of the world size {}: "
                  "each rank takes the same number of questions per step", o.examples_per_step, world);
    p.grad_accum = o.examples_per_step / world;
    p.num_iterations = o.num_iterations > 0 ? o.num_iterations : -1;
    NANODDP_CHECK(p.num_iterations > 0 || o.num_epochs > 0, "RL needs --num_iterations or --num_epochs");
    return p;
  }
  const int64_t total = o.total_batch_size < 0 ? per_micro : o.total_batch_size;
  NANODDP_CHECK(total % per_micro == 0, "--total_batch_size {} is not a multiple of device_batch_size x max_seq_len x "
                "world size = {} x {} x {} = {}: choose a total batch that divides, or another device batch", total,
                o.device_batch_size, o.max_seq_len, world, per_micro);
  p.grad_accum = total / per_micro;
  p.tokens_per_step = total;
  // The length of training, first that applies (as in nanochat): --num_iterations, --num_epochs,
  // --target_flops, then tokens = target_param_data_ratio x parameters.
  if (o.num_iterations > 0) {
    p.num_iterations = o.num_iterations;
  } else if (o.num_epochs > 0) {
    p.num_iterations = -1;  // the trainer counts the epoch's tokens once its loader exists
  } else if (o.target_flops > 0) {
    const double steps = o.target_flops / (p.config.flops_per_token(o.max_seq_len) * static_cast<double>(total));
    check_budget_steps(steps, fmt::format("--target_flops {:g}", o.target_flops));
    p.num_iterations = std::llround(steps);
  } else {
    const double steps =
        o.target_param_data_ratio * static_cast<double>(p.config.num_params()) / static_cast<double>(total);
    check_budget_steps(steps, fmt::format("--target_param_data_ratio {:g}", o.target_param_data_ratio));
    p.num_iterations = static_cast<int64_t>(steps);
  }
  check_run_tokens(p.num_iterations, total);
  if (p.num_iterations < 1 && o.num_epochs <= 0) {
    // Say why: the budget given is smaller than one step.
    const double step_flops = p.config.flops_per_token(o.max_seq_len) * static_cast<double>(total);
    NANODDP_CHECK(o.target_flops <= 0, "the run would take 0 steps: --target_flops {:g} is less than half of one step, "
                  "which costs {:.3g} FLOPs ({:.3g} per token x {} tokens per step); raise it or set --num_iterations",
                  o.target_flops, step_flops, p.config.flops_per_token(o.max_seq_len), total);
    NANODDP_FAIL("the run would take 0 steps: --target_param_data_ratio {:g} x {} parameters is fewer tokens than one "
                 "step ({}); raise it or set --num_iterations", o.target_param_data_ratio, p.config.num_params(), total);
  }
  // --eval_tokens counts over all ranks, like per_micro.
  p.eval_micro_batches = std::max<int64_t>(1, o.eval_tokens / per_micro);
  return p;
}

// One run on this rank: built once, run() once.
class Trainer {
 public:
  Trainer(const TrainOptions& opts, dist::ProcessGroup& group, Device device);
  TrainResult run();

 private:
  int64_t resume_step();
  void claim_run_folder(int64_t resume);
  void keep_tokenizer();
  void restore(int64_t step);
  void set_aside_later(int64_t step);
  void init_from(const std::string& path);
  void save(int64_t step);
  // Returns this rank's mean micro-batch loss.
  double train_step(int64_t step, double lr_mult);
  void update(int64_t step, double lr_mult);
  nlohmann::json dataset_identity() const;
  bool rl() const { return questions_ != nullptr; }
  data::LoaderState data_position() const { return rl() ? questions_->state() : loader_->state(); }
  void set_data_position(const data::LoaderState& s) {
    if (rl()) questions_->set_state(s);
    else loader_->set_state(s);
  }
  void evaluate_and_log(int64_t step);
  void sample();
  // The end-of-run lines: time, tokens, the best evaluation, where the checkpoints are.
  void summarize(int64_t last_step, double train_seconds, double trained_tokens) const;
  // OUT/environment.json (rank 0; a collective for the host names): hardware and versions, for
  // `nanoddp report`.
  void write_environment();
  std::string arithmetic_name() const;
  // --trace: gathers every rank's events and rank 0 writes OUT/trace.json (a collective).
  void write_trace();

  TrainOptions opts_;
  dist::ProcessGroup& group_;
  Device device_;
  data::DatasetMeta meta_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::vector<int32_t> token_bytes_;
  Plan plan_;
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<ddp::Reducer> reducer_;
  std::unique_ptr<ddp::Optimizer> optimizer_;
  std::unique_ptr<data::BatchSource> loader_;     // base and SFT
  std::unique_ptr<QuestionSource> questions_;     // RL (stage rl) instead
  // The val split or validation conversations, opened once; every evaluation rewinds it to its
  // start, so that each sees the same rows. Null when nothing is evaluated.
  std::unique_ptr<data::BatchSource> val_loader_;
  RlStepStats rl_stats_;                          // of the last RL step, on this rank
  // One micro-batch: i32 [device_batch_size, max_seq_len] on the host.
  Tensor inputs_, targets_;
  std::unique_ptr<MetricsLog> metrics_;
  TrainResult result_;
  ops::PeakFlops peak_;    // MFU's denominator (0: not reported)
  std::optional<std::pair<int64_t, EvalResult>> best_eval_;  // the lowest val bpb of this process's run
  StepPhases phases_;      // of the last step, on this rank
  int64_t start_step_ = 0;
  Stopwatch since_save_;   // for --save_minutes
  std::string run_id_;     // OUT/run.json's (train/run_folder.h); every checkpoint records it
  bool restarted_ = false;  // this process is a launcher restart (NANODDP_RESTART_COUNT > 0)
  // Note [dynamic loss scaling]: with --dtype fp16 the loss is multiplied by loss_scale_ before the
  // backward, so that small gradients do not underflow fp16's 2^-24; the reduced gradients are
  // unscaled before the optimizer. When any rank's hold an inf or NaN (an fp16 activation gradient
  // overflowed 65504), every rank skips the optimizer step and the scale halves; after
  // --loss_scale_growth_interval good steps in a row it doubles. torch.cuda.amp.GradScaler's rule;
  // both numbers are saved in checkpoints, so a resumed run scales as the straight run would.
  // Other dtypes keep the scale at 1 and never skip.
  bool loss_scaling() const { return model_->act_dtype() == DType::F16; }
  double loss_scale_ = 1;
  int64_t scale_good_steps_ = 0;
  bool step_skipped_ = false;  // the last step's gradients overflowed: no update
};

// Every rank must train the same thing: the same flags, dataset and build (a rank with other
// settings would compute something else, or hang in a collective much later).
void check_ranks_agree(const TrainOptions& opts, const data::DatasetMeta& meta, dist::ProcessGroup& group) {
  if (group.size() == 1) return;
  dist::check_consistent(group, dist::build_fingerprint(), "install the same nanoddp build on every node");
  dist::Fields fields;
  const auto j = options_to_json(opts);
  // Compared as JSON text and named as flags, so the error says which flag to fix.
  for (auto it = j.begin(); it != j.end(); ++it) fields.emplace_back("--" + it.key(), it.value().dump());
  fields.emplace_back("the dataset's vocab_size", std::to_string(meta.vocab_size));
  fields.emplace_back("the dataset's train tokens", std::to_string(meta.train_tokens));
  dist::check_consistent(group, fields, "start every rank with the same arguments and dataset");
}

Trainer::Trainer(const TrainOptions& opts, dist::ProcessGroup& group, Device device)
    : opts_(opts), group_(group), device_(device) {
  // First: everything below that computes (the MFU measurement included) runs on these threads.
  ops::set_cpu_threads(opts.threads);
  meta_ = data::read_dataset_meta(opts.data);
  // Before the expensive set-up, so a mismatched rank fails fast with a clear message.
  check_ranks_agree(opts, meta_, group);
  tokenizer_ = data::load_dataset_tokenizer(opts.data);
  token_bytes_ = tokenizer_->token_bytes();
  plan_ = make_plan(opts, meta_, group.size());
  // Before allocating: a model that cannot fit is refused with the estimate instead of being killed
  // by the OOM killer after a silent minute. GPU memory is the CUDA allocator's to report.
  if (device_.is_cpu()) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    check_fits_in_memory(plan_.config, opts, local != nullptr ? std::max(1, std::atoi(local)) : 1);
  }
  model_ = std::make_unique<model::GPT>(plan_.config, device_, activation_dtype(opts.dtype, device_));
  if (loss_scaling()) loss_scale_ = opts.loss_scale_init;
  model_->init_weights(opts.seed);
  // Muon orthogonalises each matrix whole, so with --zero no matrix may be split across ranks.
  ddp::ReducerOptions ro{.zero = static_cast<int>(opts.zero),
                         .whole_matrices = opts.optimizer == "muon",
                         .first_bucket_mb = opts.first_bucket_mb,
                         .bucket_cap_mb = opts.bucket_cap_mb};
  reducer_ = std::make_unique<ddp::Reducer>(*model_, group, ro);
  ddp::OptimizerConfig oc;
  oc.optimizer = opts.optimizer;
  oc.embedding_lr = opts.embedding_lr * opts.init_lr_frac;
  oc.unembedding_lr = opts.unembedding_lr * opts.init_lr_frac;
  oc.matrix_lr = opts.matrix_lr * opts.init_lr_frac;
  oc.adamw_matrix_lr = opts.adamw_matrix_lr * opts.init_lr_frac;
  oc.grad_clip = opts.grad_clip;
  oc.weight_decay = opts.weight_decay;
  oc.ns_bf16 = opts.muon_precision == "bf16";
  optimizer_ = std::make_unique<ddp::Optimizer>(*model_, *reducer_, oc);
  // Rank-strided: each rank reads its own rows of the one seeded order.
  data::LoaderOptions lo{opts.device_batch_size, opts.max_seq_len, group.rank(), group.size(), opts.shuffle,
                         opts.seed};
  lo.vocab_size = meta_.vocab_size;
  lo.step_units = plan_.grad_accum * group.size();  // an epoch ends after a whole step (Note [data order])
  if (opts.stage == "rl") {
    auto questions = data::load_questions(opts.task, opts.task_count, opts.task_seed);
    // Every question must leave room for an answer; checked now, not when a late question is drawn
    // hours into the run (and again on every resume).
    for (size_t i = 0; i < questions.size(); i++) {
      const size_t n = data::render_for_completion(*tokenizer_, questions[i].conversation).size();
      NANODDP_CHECK(static_cast<int64_t>(n) < plan_.config.max_seq_len, "RL question {} of --task {} is {} tokens, "
                    "not shorter than the model's context of {}: shorten or remove it", i + 1, opts.task, n,
                    plan_.config.max_seq_len);
    }
    questions_ = std::make_unique<QuestionSource>(std::move(questions), group.rank(), group.size(), opts.shuffle,
                                                  opts.seed, opts.examples_per_step);
    if (plan_.num_iterations < 0) {
      const double steps = opts.num_epochs * static_cast<double>(questions_->size()) /
                           static_cast<double>(opts.examples_per_step);
      check_budget_steps(steps, fmt::format("--num_epochs {:g} over {} questions", opts.num_epochs,
                                            questions_->size()));
      plan_.num_iterations = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps)));
    }
  } else {
    // Evaluation reads rows in order, not steps.
    data::LoaderOptions val = lo;
    val.shuffle = false;
    val.seed = 0;
    val.step_units = 0;
    if (opts.conversations.empty()) {
      loader_ = std::make_unique<data::TokenLoader>(opts.data, "train", lo);
      // The val split is opened now, before any training: a split too small for one window stops the
      // run here, not after its last step with nothing saved.
      val_loader_ = std::make_unique<data::TokenLoader>(opts.data, "val", val);
    } else {
      loader_ = std::make_unique<data::ConversationLoader>(split_list(opts.conversations), *tokenizer_, lo,
                                                           opts.mask == "all");
      // The validation conversations are read now as well, so that a file too small or without
      // assistant turns stops the run before it trains, not after.
      if (!opts.val_conversations.empty())
        val_loader_ = std::make_unique<data::ConversationLoader>(split_list(opts.val_conversations), *tokenizer_,
                                                                 val, opts.mask == "all");
    }
  }
  if (plan_.num_iterations < 0) {
    const double steps = opts.num_epochs * static_cast<double>(loader_->tokens_per_epoch()) /
                         static_cast<double>(plan_.tokens_per_step);
    check_budget_steps(steps, fmt::format("--num_epochs {:g} over {} tokens", opts.num_epochs,
                                          loader_->tokens_per_epoch()));
    plan_.num_iterations = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps)));
    check_run_tokens(plan_.num_iterations, plan_.tokens_per_step);
  }
  inputs_ = Tensor::empty({opts.device_batch_size, opts.max_seq_len}, DType::I32);
  targets_ = Tensor::empty({opts.device_batch_size, opts.max_seq_len}, DType::I32);
  // MFU's denominator: the user's --peak_flops, else the device's datasheet peak (ops/profile.h).
  peak_ = opts.peak_flops > 0 ? ops::PeakFlops{opts.peak_flops, "--peak_flops"} : ops::peak_flops(device_);
  // The step times are split into phases (metrics.jsonl); on a GPU the phase boundaries wait for it.
  model_->set_phase_timing(device_.is_cuda());
  if (!rl()) {
    const int64_t epoch_tokens = loader_->tokens_per_epoch();
    if (plan_.tokens_per_step > epoch_tokens)
      log::warn("one step ({} tokens) is larger than the whole training split ({} tokens): each step reads the data "
                "{:.1f} times over; lower --total_batch_size or use more data", plan_.tokens_per_step, epoch_tokens,
                static_cast<double>(plan_.tokens_per_step) / static_cast<double>(epoch_tokens));
  }
}

// The step to resume from, or -1 for a fresh run (see --resume). A launcher restart implies
// "auto", but only for a run its own job started (run.json's job_id): a restart never picks up
// another run that happens to be in --out.
int64_t Trainer::resume_step() {
  std::string mode = opts_.resume;
  const char* restarts = std::getenv("NANODDP_RESTART_COUNT");
  restarted_ = restarts != nullptr && std::atoll(restarts) > 0;
  if (mode.empty() && restarted_) {
    const auto info = read_run_info(opts_.out);
    const std::string job = current_job_id();
    if (info && !job.empty() && info->job_id == job) mode = "auto";
  }
  if (mode.empty()) return -1;
  auto latest = latest_checkpoint(opts_.out);
  if (mode == "auto") return latest ? *latest : -1;
  if (mode == "latest") {
    NANODDP_CHECK(latest.has_value(), "--resume latest: no complete checkpoint under {}/checkpoints", opts_.out);
    return *latest;
  }
  // The whole value, digits only: stoll read "5abc" or "9e2" as an earlier step, and resuming
  // it would set the later checkpoints aside.
  int64_t step = -1;
  const char* end = mode.data() + mode.size();
  const auto [ptr, ec] = std::from_chars(mode.data(), end, step);
  NANODDP_CHECK(!mode.empty() && ec == std::errc() && ptr == end && step >= 0,
                "--resume must be latest, auto or a step number (got '{}')", mode);
  if (!std::filesystem::exists(checkpoint_dir(opts_.out, step) + "/DONE")) {
    // Say which steps there are, so the user can pick one.
    std::string have;
    const std::vector<int64_t> steps = complete_checkpoint_steps(opts_.out);
    for (int64_t s : steps) have += (have.empty() ? "" : ", ") + std::to_string(s);
    NANODDP_FAIL("--resume {}: no complete checkpoint at {} (complete checkpoints: {})", step,
                 checkpoint_dir(opts_.out, step), have.empty() ? "none" : have);
  }
  return step;
}

// A run folder is self-contained: it keeps a copy of a trained tokenizer (OUT/tokenizer/), so
// sample and export work after the dataset folder is gone. Rank 0, once per run.
void Trainer::keep_tokenizer() {
  namespace fs = std::filesystem;
  if (group_.rank() != 0 || !meta_.tokenizer.ends_with(".tiktoken")) return;
  const fs::path src = fs::path(opts_.data) / meta_.tokenizer, dest = fs::path(opts_.out) / "tokenizer";
  if (!fs::is_regular_file(src) || fs::exists(dest / src.filename())) return;
  fs::create_directories(dest);
  data::copy_tokenizer_file(src.string(), (dest / src.filename()).string());
}

// Gives this run the folder --out: a resumed run keeps its identity; a fresh one gets a new run id,
// and refuses a folder that holds another run unless --overwrite moves that run aside. Collective:
// every rank checks, then rank 0 alone changes the folder between two barriers.
void Trainer::claim_run_folder(int64_t resume) {
  const auto info = read_run_info(opts_.out);
  if (resume >= 0) {
    if (info) {
      run_id_ = info->run_id;
    } else {
      // A run of an older version, or imported: it gets an identity now.
      run_id_ = read_checkpoint_meta(checkpoint_dir(opts_.out, resume)).value("run_id", new_run_id());
      if (group_.rank() == 0) write_run_info(opts_.out, {run_id_, current_job_id()});
    }
    return;
  }
  // A restart of a job whose first attempt died before its first checkpoint starts over in its own folder.
  const bool own = restarted_ && info && !current_job_id().empty() && info->job_id == current_job_id();
  const std::string existing = own ? "" : describe_run(opts_.out);
  // With no complete checkpoint there is nothing to continue (a run that failed or was stopped
  // before its first save): only the other two ways are offered.
  NANODDP_CHECK(existing.empty() || opts_.overwrite, "--out {} holds {}: {}choose another --out, or pass --overwrite "
                "to move it aside (it is never deleted)", opts_.out, existing,
                latest_checkpoint(opts_.out) ? "continue it with --resume latest, " : "");
  group_.barrier()->wait();  // every rank has looked before rank 0 moves anything
  run_id_ = own ? info->run_id : new_run_id();
  if (group_.rank() == 0) {
    if (!existing.empty()) log::print0("--overwrite: moved {} aside to {}", opts_.out, move_run_aside(opts_.out));
    write_run_info(opts_.out, {run_id_, current_job_id()});
  }
  group_.barrier()->wait();
}

namespace {

// A checkpoint of this run that cannot be resumed (a file unreadable, truncated or incomplete):
// `why` names the file; the message says which earlier checkpoint can be resumed instead. Nothing
// is moved or deleted.
[[noreturn]] void fail_unresumable(const std::string& out, int64_t step, const std::string& why) {
  const auto steps = complete_checkpoint_steps(out);
  const auto before = std::lower_bound(steps.begin(), steps.end(), step);
  if (before == steps.begin())
    NANODDP_FAIL("{}; checkpoint step {} cannot be resumed and there is no earlier one: restore its files, or "
                 "start over (--overwrite moves this run aside)", why, step);
  NANODDP_FAIL("{}; checkpoint step {} cannot be resumed: resume the one before it with --resume {}", why, step,
               *(before - 1));
}

// meta.json of checkpoint `step`, with what restore() reads from it present; a weights-only
// checkpoint (`nanoddp import`) is refused with the flag that uses it.
nlohmann::json read_resumable_meta(const std::string& out, int64_t step) {
  const std::string dir = checkpoint_dir(out, step);
  nlohmann::json meta;
  try {
    meta = read_checkpoint_meta(dir);
  } catch (const Error& e) {
    fail_unresumable(out, step, e.what());
  }
  NANODDP_CHECK(!(meta.is_object() && meta.value("model_only", false)), "checkpoint {} holds weights only (no "
                "optimizer state or data position, e.g. from `nanoddp import`): start a new run from it with "
                "--init_from {}", dir, dir);
  // The data position indexes the loader's order and shards: a negative one would read outside them.
  const auto position = [&](const char* key) {
    const auto& l = meta.at("loader");
    return l.contains(key) && l.at(key).is_number_integer() && l.at(key).get<int64_t>() >= 0;
  };
  const bool complete =
      meta.is_object() && meta.contains("world_size") && meta.at("world_size").is_number_integer() &&
      meta.at("world_size").get<int>() >= 1 && meta.contains("model_config") && meta.contains("loader") &&
      meta.at("loader").is_object() && position("epoch") && position("cursor") &&
      meta.contains("options") && meta.at("options").is_object() &&
      std::ranges::all_of(std::array{"optimizer", "device_batch_size", "total_batch_size", "max_seq_len"},
                          [&](const char* key) { return meta.at("options").contains(key); });
  if (!complete)
    fail_unresumable(out, step, fmt::format("{}/meta.json lacks what a resume needs, or its data position is not "
                                            "two non-negative integers", dir));
  return meta;
}

}  // namespace

void Trainer::restore(int64_t step) {
  const std::string dir = checkpoint_dir(opts_.out, step);
  const nlohmann::json meta = read_resumable_meta(opts_.out, step);
  const int saved_world = meta.at("world_size");
  model::GPTConfig saved_config;
  try {
    saved_config = model::GPTConfig::from_json(meta.at("model_config"));
  } catch (const std::exception& e) {
    fail_unresumable(opts_.out, step, fmt::format("{}/meta.json has no valid model_config ({})", dir, e.what()));
  }
  NANODDP_CHECK(saved_config.vocab_size == plan_.config.vocab_size, "checkpoint {} has a vocabulary of {} tokens but "
                "--data {} has {}: resume with the dataset it was trained on", dir, saved_config.vocab_size, opts_.data,
                plan_.config.vocab_size);
  NANODDP_CHECK(saved_config == plan_.config, "checkpoint {} holds another model configuration ({}); resume with the "
                "same --depth and model flags", dir, meta.at("model_config").dump());
  // The ids must mean the same text, --allow_changed_data or not: that flag lets a run go on over
  // other rows, but a model of another tokenizer is another model, and the run keeps one tokenizer
  // copy for all of its checkpoints.
  const std::string saved_tokenizer = meta.value("tokenizer", "");
  NANODDP_CHECK(saved_tokenizer.empty() || saved_tokenizer == meta_.tokenizer, "checkpoint {} was trained with the "
                "tokenizer {} but --data {} uses {}: resume with a dataset of the same tokenizer, or start a new run "
                "(--out)", dir, saved_tokenizer, opts_.data, meta_.tokenizer);
  check_dataset_tokenizer(dir, opts_.data);
  // These shape the optimizer state and what the loader's cursor counts; other options (learning
  // rates, evaluation and save cadence, ...) may change across a resume.
  // The world size and --zero may change: the optimizer state is resharded (Note [resharding] in
  // ddp/optimizer.cpp) and the loader's cursor counts global units (Note [data order] in data/loader.h).
  const nlohmann::json& saved_options = meta.at("options");
  const nlohmann::json now_options = options_to_json(opts_);
  for (const char* key : {"optimizer", "device_batch_size", "max_seq_len"}) {
    const auto& saved = saved_options.at(key);
    const auto& now = now_options.at(key);
    NANODDP_CHECK(saved == now, "checkpoint {} was trained with --{} {} but this run has {}; resume with the same "
                  "setting", dir, key, saved.dump(), now.dump());
  }
  // The batch is compared as the tokens a step takes, not as the flag: --total_batch_size -1 (one
  // micro-batch per rank, sft's default) means another batch on another world size, and with it
  // another schedule and amount of data. RL counts questions (--examples_per_step) instead.
  if (!rl()) {
    const int64_t saved_flag = saved_options.value("total_batch_size", int64_t{-1});
    // Checkpoints from before "tokens_per_step" was saved: the flag, or what -1 meant on their ranks.
    const int64_t saved_tokens = meta.value(
        "tokens_per_step", saved_flag > 0 ? saved_flag
                                          : saved_options.value("device_batch_size", int64_t{0}) *
                                                saved_options.value("max_seq_len", int64_t{0}) * saved_world);
    const int64_t per_micro = opts_.device_batch_size * opts_.max_seq_len * group_.size();
    NANODDP_CHECK(saved_tokens == plan_.tokens_per_step, "checkpoint {} was trained with {} tokens per step "
                  "(--total_batch_size {} on {} rank(s)) but this run takes {} (--total_batch_size {} on {}): {}",
                  dir, saved_tokens, saved_flag, saved_world, plan_.tokens_per_step, opts_.total_batch_size,
                  group_.size(),
                  saved_tokens % per_micro == 0
                      ? fmt::format("resume with --total_batch_size {}, so that the batch, the schedule and the data "
                                    "stay the run's", saved_tokens)
                      : fmt::format("{} ranks cannot take that batch ({} tokens per micro-step over all ranks does "
                                    "not divide it): resume on {} rank(s), or start a new run (--init_from)",
                                    group_.size(), per_micro, saved_world));
  } else {
    NANODDP_CHECK(!saved_options.contains("examples_per_step") ||
                      saved_options.at("examples_per_step") == nlohmann::json(opts_.examples_per_step),
                  "checkpoint {} was trained with --examples_per_step {} but this run has {}; resume with the same "
                  "setting", dir, saved_options.value("examples_per_step", nlohmann::json()).dump(),
                  opts_.examples_per_step);
  }
  // Another seed or dataset would silently train on other rows than the checkpoint's run.
  if (!opts_.allow_changed_data) {
    NANODDP_CHECK(!saved_options.contains("seed") || saved_options.at("seed") == now_options.at("seed"),
                  "checkpoint {} was trained with --seed {} but this run has {}: use the same seed, or pass "
                  "--allow_changed_data", dir, saved_options.value("seed", nlohmann::json()).dump(), opts_.seed);
    if (meta.contains("dataset")) {
      const nlohmann::json now = dataset_identity();
      NANODDP_CHECK(meta.at("dataset") == now, "checkpoint {} was trained on another dataset ({}) than --data {} "
                    "({}): give the same --data, or pass --allow_changed_data", dir, meta.at("dataset").dump(),
                    opts_.data, now.dump());
    }
  }
  // Under --zero 1|2 the buckets decide where a rank's piece of each AdamW state ends, so other
  // bucket sizes read the pieces as resharding does. Under --zero 0 every rank saved the whole
  // state (the same bytes), so resharding reads rank 0's file alone.
  const int saved_zero = saved_options.value("zero", 0);
  const bool same_buckets = saved_options.value("bucket_cap_mb", opts_.bucket_cap_mb) == opts_.bucket_cap_mb &&
                            saved_options.value("first_bucket_mb", opts_.first_bucket_mb) == opts_.first_bucket_mb;
  const bool same_sharding = saved_world == group_.size() && saved_zero == static_cast<int>(opts_.zero) &&
                             (saved_zero == 0 || same_buckets);
  bool resharded = false;
  // A checkpoint whose files cannot be read (truncated by a full disk, overwritten, a missing
  // rank's file) fails naming the file, and says which earlier checkpoint the run can resume
  // instead; nothing is moved or deleted.
  try {
    SafetensorsFile weights(dir + "/model.safetensors");
    for (auto& p : model_->parameters()) weights.read_into(p.name, p.data);
    // As --init_from: weights that are not finite would evaluate and log before any loss check.
    for (const auto& p : model_->parameters())
      NANODDP_CHECK(all_finite(p.data), "{}/model.safetensors: parameter {} holds NaN or infinite values", dir,
                    p.name);
    // The same settings by an older build may still have placed the Muon matrices otherwise
    // (bucket_layout.h): then this rank's file lacks its pieces, and resharding finds them.
    std::unique_ptr<SafetensorsFile> own;
    if (same_sharding) own = std::make_unique<SafetensorsFile>(dir + "/" + CheckpointFiles::optimizer(group_.rank()));
    resharded = !own || !optimizer_->state_matches(*own);
    if (!resharded) {
      optimizer_->load_state(*own);
    } else {
      std::vector<std::unique_ptr<SafetensorsFile>> files;
      std::vector<const SafetensorsFile*> views;
      for (int r = 0; r < (saved_zero == 0 ? 1 : saved_world); r++) {
        files.push_back(std::make_unique<SafetensorsFile>(dir + "/" + CheckpointFiles::optimizer(r)));
        views.push_back(files.back().get());
      }
      optimizer_->load_state_resharded(views);
    }
  } catch (const Error& e) {
    fail_unresumable(opts_.out, step, e.what());
  }
  model_->refresh_compute_weights();
  if (resharded)
    log::print0("resharded the optimizer state of {} rank(s) (--zero {}) onto {} (--zero {})", saved_world,
                saved_zero, group_.size(), opts_.zero);
  // Another --dtype may continue a run (the master weights and optimizer state are f32 in every
  // dtype), as a PyTorch run may change its autocast dtype; say so, since the run then no longer
  // follows the checkpoint's bits.
  if (meta.contains("activations") && meta.at("activations") != dtype_flag(model_->act_dtype()))
    log::print0("note: checkpoint {} was trained with --dtype {} and this run continues with --dtype {}", dir,
                meta.at("activations").get<std::string>(), dtype_flag(model_->act_dtype()));
  // Note [dynamic loss scaling]: a checkpoint of another dtype has no scale; start from --loss_scale_init.
  if (loss_scaling() && meta.contains("loss_scale")) {
    loss_scale_ = meta.at("loss_scale").at("scale").get<double>();
    scale_good_steps_ = meta.at("loss_scale").at("good_steps").get<int64_t>();
  }
  // The resumed run reads exactly the rows the interrupted one would have read next.
  set_data_position({meta.at("loader").at("epoch"), meta.at("loader").at("cursor")});
  // Keep the last evaluation, so the next checkpoint's meta.json carries it until the next one.
  if (meta.contains("val_bpb") && !meta["val_bpb"].is_null())
    result_.eval = EvalResult{meta.value("val_loss", 0.0), meta["val_bpb"], 0};
  log::print0("resumed from {} (step {})", dir, step);
}

// Resuming a step that is not the newest checkpoint abandons the later ones: they are moved into
// OUT/checkpoints/after_step_<step>/ (kept, never deleted), so that --resume latest, a launcher's
// restart and the rotation of --keep_last all see this run's new history only. Rank 0, which alone
// writes checkpoints.
void Trainer::set_aside_later(int64_t step) {
  if (group_.rank() != 0) return;
  std::string dest;
  const std::vector<int64_t> moved = set_aside_checkpoints_after(opts_.out, step, &dest);
  if (moved.empty()) return;
  std::string list;
  for (int64_t s : moved) list += (list.empty() ? "" : ", ") + std::to_string(s);
  log::print0("resuming step {} abandons the later checkpoints (step {}): moved to {}, not deleted", step, list, dest);
}

// --init_from: weights only (a checkpoint, a run folder's newest checkpoint, or a .safetensors file
// with nanochat's parameter names); the optimizer state, the step and the data position start fresh.
void Trainer::init_from(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  if (fs::is_directory(path)) {
    const std::string dir = resolve_checkpoint(path);
    const nlohmann::json meta = read_checkpoint_meta(dir);
    if (meta.contains("model_config"))
      NANODDP_CHECK(model::GPTConfig::from_json(meta.at("model_config")) == plan_.config, "--init_from {}: its model "
                    "({}) is not this run's: give the same --depth and model flags and a dataset of its vocabulary",
                    dir, meta.at("model_config").dump());
    check_dataset_tokenizer(dir, opts_.data);  // sft and rl take the base run's dataset, maybe prepared again
    file = dir + "/model.safetensors";
  }
  NANODDP_CHECK(fs::is_regular_file(file), "--init_from {}: no such checkpoint, run folder or .safetensors file", path);
  SafetensorsFile weights(file);
  for (auto& p : model_->parameters()) weights.read_into(p.name, p.data);
  for (const auto& p : model_->parameters())
    NANODDP_CHECK(all_finite(p.data), "--init_from {}: parameter {} holds NaN or infinite values", file, p.name);
  model_->refresh_compute_weights();
  log::print0("initialised the weights from {}", file);
}

nlohmann::json Trainer::dataset_identity() const {
  nlohmann::json id = {{"vocab_size", meta_.vocab_size}, {"train_tokens", meta_.train_tokens},
                       {"tokenizer", meta_.tokenizer}};
  if (!opts_.conversations.empty()) id["conversations"] = opts_.conversations;
  if (rl()) id["task"] = {{"task", opts_.task}, {"questions", questions_->size()}};
  return id;
}

void Trainer::save(int64_t step) {
  // A checkpoint is never marked complete with non-finite weights (every rank holds the same weights,
  // so every rank stops here together).
  for (const auto& p : model_->parameters())
    NANODDP_CHECK(all_finite(p.data), "step {}: parameter {} holds NaN or infinite values; not saving a checkpoint. "
                  "Lower the learning rates or resume from an earlier checkpoint", step, p.name);
  CheckpointContents c;
  c.step = step;
  for (const auto& p : model_->parameters()) c.model.emplace_back(p.name, p.data);
  c.optimizer = optimizer_->state();
  const auto loader = data_position();
  // data_dir is absolute so that `nanoddp sample` and `export` work from another directory.
  c.meta = {{"step", step},
            {"model_config", plan_.config.to_json()},
            {"options", options_to_json(opts_)},
            {"loader", {{"epoch", loader.epoch}, {"cursor", loader.cursor}}},
            {"world_size", group_.size()},
            {"run_id", run_id_},
            {"stage", opts_.stage},
            {"source", opts_.init_from.empty() ? nlohmann::json() : nlohmann::json(opts_.init_from)},
            {"dataset", dataset_identity()},
            {"data_dir", std::filesystem::absolute(opts_.data).string()},
            {"tokenizer", meta_.tokenizer},
            {"tokens_per_step", plan_.tokens_per_step},
            {"tokens_seen", step * plan_.tokens_per_step},
            {"nanoddp_version", NANODDP_VERSION},
            {"val_bpb", result_.eval ? nlohmann::json(result_.eval->bpb) : nlohmann::json()},
            {"val_loss", result_.eval ? nlohmann::json(result_.eval->loss) : nlohmann::json()}};
  if (loss_scaling()) c.meta["loss_scale"] = {{"scale", loss_scale_}, {"good_steps", scale_good_steps_}};
  c.meta["activations"] = dtype_flag(model_->act_dtype());  // --dtype as resolved (auto: by device)
  save_checkpoint(opts_.out, c, group_, opts_.keep_last);
  since_save_ = Stopwatch();
  log::print0("saved checkpoint {}", checkpoint_dir(opts_.out, step));
}

// The optimizer step on the synchronised gradients; with fp16, unscaled first and skipped on an
// overflow (Note [dynamic loss scaling]).
void Trainer::update(int64_t step, double lr_mult) {
  step_skipped_ = loss_scaling() && !optimizer_->unscale_and_check(static_cast<float>(1.0 / loss_scale_));
  if (step_skipped_) {
    loss_scale_ *= 0.5;
    scale_good_steps_ = 0;
    // Every rank has the same scale (the overflow flag is all-reduced), so all stop here together.
    // Below fp16's smallest subnormal no scale can help: the gradients are inf or NaN whatever the
    // scale, and skipping on would end the run with exit 0 having trained nothing.
    NANODDP_CHECK(loss_scale_ >= 0x1p-24, "--dtype fp16: step {}'s gradients overflowed at every loss scale down to "
                  "2^-24, so every step would be skipped: the run diverged; resume an earlier checkpoint with a "
                  "lower learning rate, or use --dtype bf16", step);
    return;
  }
  optimizer_->step(lr_mult, muon_momentum(step));
  // At least, not equal: a resume with a shorter --loss_scale_growth_interval than the count it
  // restored would otherwise never grow the scale again until an overflow reset the count.
  if (loss_scaling() && ++scale_good_steps_ >= opts_.loss_scale_growth_interval) {
    loss_scale_ *= 2;
    scale_good_steps_ = 0;
  }
}

// One optimizer step: grad_accum micro-steps, gradients synchronised during the last backward.
double Trainer::train_step(int64_t step, double lr_mult) {
  if (rl()) {
    const RlSettings rs{.num_samples = opts_.num_samples, .max_new_tokens = opts_.max_new_tokens,
                        .temperature = static_cast<float>(opts_.temperature), .top_k = opts_.top_k,
                        .device_batch_size = opts_.device_batch_size, .seed = opts_.seed,
                        .loss_scale = static_cast<float>(loss_scale_)};
    phases_ = StepPhases{};
    Stopwatch compute;
    rl_stats_ = rl_forward_backward(*model_, *reducer_, *tokenizer_, *questions_, plan_.grad_accum, rs);
    phases_.sample = rl_stats_.sample_seconds;
    phases_.backward = compute.seconds() - rl_stats_.sample_seconds;  // forward and backward of the samples
    Stopwatch comm;
    reducer_->finish();
    if (device_.is_cuda()) ops::backend(device_).synchronize();
    group_.check();  // as in the branch below: no update from an aborted bucket
    phases_.exposed_comm = comm.seconds();
    Stopwatch opt;
    {
      trace::Scope traced("optimizer");
      update(step, lr_mult);
      if (device_.is_cuda()) ops::backend(device_).synchronize();
      group_.check();  // the parameters' all_gather under --zero 1|2, as in the branch below
    }
    phases_.optimizer = opt.seconds();
    return rl_stats_.loss;
  }
  double loss = 0;
  // Micro-batch gradients of the unscaled loss are summed; the reducer divides by grad_accum
  // (Note [accumulation order] in model/gpt.cpp).
  const int accum = static_cast<int>(plan_.grad_accum);
  phases_ = StepPhases{};
  ops::Backend& dev = ops::backend(device_);
  for (int m = 0; m < accum; m++) {
    Stopwatch data;
    {
      trace::Scope traced("data");
      loader_->next(inputs_, targets_);
    }
    phases_.data += data.seconds();
    const bool last = m == accum - 1;
    Stopwatch compute;
    loss += model_->forward_backward(inputs_, targets_, static_cast<float>(loss_scale_), m > 0,
                                     last ? reducer_->sync_hook(accum) : nullptr);
    if (device_.is_cuda()) dev.synchronize();
    phases_.forward += model_->last_forward_seconds();
    phases_.backward += compute.seconds() - model_->last_forward_seconds();
  }
  // The optimizer reads the gradients: wait for the last buckets' collectives. What this waits is
  // the communication the backward did not hide.
  Stopwatch comm;
  reducer_->finish();
  if (device_.is_cuda()) dev.synchronize();
  group_.check();  // a bucket aborted at its timeout completes too, unaveraged: no update from it
  phases_.exposed_comm = comm.seconds();
  Stopwatch opt;
  {
    trace::Scope traced("optimizer");
    update(step, lr_mult);
    if (device_.is_cuda()) dev.synchronize();
    group_.check();  // the parameters' all_gather under --zero 1|2
  }
  phases_.optimizer = opt.seconds();
  // This rank's mean; run() averages it over the ranks with what else they must agree on.
  return loss / static_cast<double>(plan_.grad_accum);
}

void Trainer::evaluate_and_log(int64_t step) {
  Stopwatch sw;
  EvalResult r;
  // RL is measured by its reward (logged every step) and `nanoddp eval`, not by a validation loss.
  if (rl()) return;
  // Chat stages evaluate on held-out conversations, only where the assistant speaks, or not at all.
  if (!val_loader_) return;
  val_loader_->set_state(data::LoaderState{});  // a loader starts at epoch 0, cursor 0
  r = evaluate(*model_, *val_loader_, opts_.device_batch_size, opts_.max_seq_len, plan_.eval_micro_batches,
               token_bytes_, group_);
  result_.eval = r;
  if (!best_eval_ || r.bpb < best_eval_->second.bpb) best_eval_ = {step, r};
  log::print0("step {:05d} | val loss {:.4f} | val bpb {:.4f} | {} tokens in {:.1f}s", step, r.loss, r.bpb,
              r.tokens, sw.seconds());
  metrics_->write({{"step", step}, {"val_loss", r.loss}, {"val_bpb", r.bpb}});
}

void Trainer::sample() {
  if (opts_.sample_tokens <= 0 || group_.rank() != 0) return;
  std::vector<int32_t> prompt{tokenizer_->bos_id()};
  auto text = tokenizer_->encode(opts_.sample_prompt);
  prompt.insert(prompt.end(), text.begin(), text.end());
  model::SampleOptions so;
  so.max_tokens = opts_.sample_tokens;
  so.temperature = 0.8f;
  so.top_k = 40;
  so.seed = opts_.seed;
  // Training documents are separated by BOS, so generating one ends the text.
  so.stop_token = tokenizer_->bos_id();
  auto ids = model::generate(*model_, prompt, so);
  if (!ids.empty() && ids.back() == so.stop_token) ids.pop_back();
  log::print0("sample: {}{}", opts_.sample_prompt, tokenizer_->decode(ids));
}

// "f32", or "bf16" with how this device computes it: a CPU without bf16 instructions (or a build
// without oneDNN) still runs a bf16 model (its GEMMs widened to f32 for sgemm), and the header
// says so once.
std::string Trainer::arithmetic_name() const {
  if (model_->act_dtype() == DType::F16)
    return fmt::format("fp16 with dynamic loss scaling from {:g} (f16 matmul: {})", loss_scale_,
                       device_.is_cuda() ? "cuBLASLt" : ops::cpu_f16_matmul());
  if (model_->act_dtype() != DType::BF16) return "f32";
  if (device_.is_cuda()) return "bf16";
  if (!ops::onednn_has_bf16_instructions())  // always so without oneDNN
    return fmt::format("bf16 without {}: its matmuls are widened to f32 for sgemm, slower than f32",
                       NANODDP_HAVE_ONEDNN ? "bf16 instructions" : "oneDNN");
  return "bf16 on " + bf16_matmul_hardware(host_info());
}

void Trainer::write_environment() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::vector<std::string> hosts = dist::all_gather_strings(group_, host);
  if (group_.rank() != 0) return;
  const HostInfo machine = host_info();
  nlohmann::json env = {{"hosts", std::set<std::string>(hosts.begin(), hosts.end())},
                        {"world size", group_.size()},
                        {"backend", group_.backend_name()},
                        {"device", device_.str()},
                        {"cpu", machine.cpu_model},
                        {"bf16 matmul", ops::cpu_bf16_matmul()},
                        {"threads per rank", ops::cpu_threads()},
                        {"arithmetic", arithmetic_name()},
                        {"mfu peak", peak_.flops > 0 ? fmt::format("{:.4g} TFLOP/s ({})", peak_.flops / 1e12, peak_.what)
                                                     : peak_.what}};
  if (device_.is_cuda()) env["gpu"] = cuda_device_name(device_.index);
  for (const auto& [k, v] : dist::build_fingerprint()) env[k] = v;
  write_file_atomically(opts_.out + "/environment.json", env.dump(2) + "\n");
}

void Trainer::write_trace() {
  if (!opts_.trace) return;
  trace::enable(false);
  if (trace::dropped() > 0)
    log::warn("--trace: {} events beyond the first {} were not recorded", trace::dropped(), trace::kMaxEvents);
  const std::vector<std::string> ranks = dist::all_gather_strings(group_, trace::take_events_json(group_.rank()));
  if (group_.rank() != 0) return;
  std::string json = R"({"displayTimeUnit":"ms","otherData":{"tool":"nanoddp --trace"},"traceEvents":[)";
  for (size_t r = 0; r < ranks.size(); r++) json += (r > 0 ? "," : "") + ranks[r];
  json += "]}\n";
  const std::string path = opts_.out + "/trace.json";
  write_file_atomically(path, json);
  log::print0("trace: {} ({} ranks; open it in https://ui.perfetto.dev or chrome://tracing)", path, ranks.size());
}

void Trainer::summarize(int64_t last_step, double train_seconds, double trained_tokens) const {
  const int64_t steps = last_step - start_step_;
  if (steps <= 0) return;
  log::print0("done: {} steps in {} ({:.0f} tokens, {:.0f} tokens/s) | last loss {:.6f}{} | checkpoints: {} (newest "
              "step {})", steps, format_duration(train_seconds), trained_tokens,
              train_seconds > 0 ? trained_tokens / train_seconds : 0.0, result_.last_loss,
              best_eval_ ? fmt::format(" | best val bpb {:.4f} at step {}", best_eval_->second.bpb, best_eval_->first)
                         : std::string(),
              std::filesystem::absolute(opts_.out + "/checkpoints").lexically_normal().string(), last_step);
}

TrainResult Trainer::run() {
  // Every rank looks for the checkpoint itself; they must agree, or one rank would restore while
  // another starts fresh (a folder that is not shared, a save still in progress on another node).
  int64_t resume = -1;
  std::exception_ptr resume_error;
  std::string found;
  try {
    resume = resume_step();
    found = resume >= 0 ? fmt::format("step {}", resume) : "none";
  } catch (const Error& e) {
    resume_error = std::current_exception();
    found = fmt::format("none ({})", e.what());
  }
  dist::check_consistent(group_, {{"the checkpoint to resume", found}}, "give every rank the same --out, on a "
                         "file system they all see (or copy the checkpoints to every node)");
  if (resume_error) std::rethrow_exception(resume_error);
  // --stop_at ends early without changing n, so the LR schedule stays the full run's.
  const int64_t n = plan_.num_iterations, stop = opts_.stop_at > 0 ? std::min(opts_.stop_at, n) : n;
  if (resume >= stop) {
    // A restart after the final checkpoint (the job died while sampling, say) has nothing left to do;
    // nor has --resume auto ("continue if there is anything to continue").
    if (resume == stop && (opts_.resume == "auto" || (restarted_ && opts_.resume.empty()))) {
      log::print0("{} is complete at step {}: nothing left to train (raise --num_iterations to train further)",
                  opts_.out, resume);
      result_.last_step = stop;
      return result_;
    }
    NANODDP_FAIL("the checkpoint to resume is at step {}, {} this run's last step {} (--num_iterations {}{}): "
                 "raise --num_iterations to train further", resume, resume == stop ? "already" : "beyond", stop, n,
                 opts_.stop_at > 0 ? fmt::format(", --stop_at {}", opts_.stop_at) : "");
  }
  // Weights first: a bad --init_from must fail before --overwrite moves anything.
  if (resume < 0 && !opts_.init_from.empty()) init_from(opts_.init_from);
  claim_run_folder(resume);
  keep_tokenizer();
  write_environment();
  if (resume >= 0) {
    restore(resume);
  } else {
    // A fresh run starts every rank from rank 0's weights (as PyTorch DDP's constructor does); a resumed
    // one has loaded the same file on every rank.
    reducer_->broadcast_parameters();
  }
  start_step_ = std::max<int64_t>(0, resume);
  if (resume >= 0) set_aside_later(resume);
  // The loop evaluates its first step (the resumed one) only on the --eval_every cadence.
  const bool resume_evaluated = opts_.eval_every > 0 && resume >= 0 && resume % opts_.eval_every == 0;
  metrics_ = std::make_unique<MetricsLog>(opts_.out, group_.rank() == 0, resume, resume_evaluated);
  StopSignals signals;  // Note [stopping on a signal]
  if (opts_.trace) {
    // One time axis for all ranks: zero is the moment they leave this barrier.
    group_.barrier()->wait();
    trace::set_origin();
    trace::enable(true);
  }
  since_save_ = Stopwatch();
  const double flops_per_token = plan_.config.flops_per_token(opts_.max_seq_len);
  log::print0("model: depth {} | dim {} | heads {}/{} | vocab {} (padded {}) | {:.2f}M parameters",
              plan_.config.n_layer, plan_.config.n_embd, plan_.config.n_head, plan_.config.n_kv_head,
              plan_.config.vocab_size, plan_.config.padded_vocab(), plan_.config.num_params() / 1e6);
  if (rl()) {
    log::print0("batch: {} questions/step = {} ranks x {} questions x {} samples (of {} questions) | {} steps | {} "
                "threads/rank | optimizer {} zero {} | backend {}", opts_.examples_per_step, group_.size(),
                plan_.grad_accum, opts_.num_samples, questions_->size(), n, ops::cpu_threads(), opts_.optimizer,
                opts_.zero, group_.backend_name());
  } else {
    log::print0("batch: {} tokens/step = {} ranks x {} rows x {} tokens x {} accumulation | {} steps | {} threads/rank "
                "| optimizer {} zero {} | backend {} | arithmetic: {} | mfu peak: {}", plan_.tokens_per_step,
                group_.size(), opts_.device_batch_size, opts_.max_seq_len, plan_.grad_accum, n, ops::cpu_threads(),
                opts_.optimizer, opts_.zero, group_.backend_name(), arithmetic_name(),
                peak_.flops > 0 ? fmt::format("{:.4g} TFLOP/s per device ({})", peak_.flops / 1e12, peak_.what)
                                : peak_.what);
  }
  double train_seconds = 0;  // time in training steps, for the ETA and the summary
  double trained_tokens = 0;
  // Set after a step when the ranks agree that the state after it must be saved: --save_minutes
  // has passed, or a rank was asked to stop (then the run ends right after that save).
  bool save_due = false, stop_requested = false;
  for (int64_t step = start_step_;; step++) {
    // Step s is the state after s steps: evaluate and save before training it, and go round once more
    // at `stop` for the final state. No save at start_step_: it is the checkpoint
    // just resumed from, or the untrained step 0.
    const bool last = step == stop;
    if (last || (opts_.eval_every > 0 && step % opts_.eval_every == 0)) evaluate_and_log(step);
    if (last || save_due || (opts_.save_every > 0 && step % opts_.save_every == 0 && step > start_step_)) save(step);
    // A stop asked for during the last step needs nothing more: the run ends as complete (without
    // its final sample), not as one to continue (there is nothing left to resume).
    if (stop_requested && !last) {
      const int sig = g_stop_signal != 0 ? static_cast<int>(g_stop_signal) : SIGTERM;
      log::end_status0();
      write_trace();
      log::print0("stopped by signal {} after step {}; continue with --resume latest", sig, step);
      result_.last_step = step;
      result_.stopped_by_signal = sig;
      return result_;
    }
    if (last) break;
    const double lr = lr_multiplier(step, n, opts_.warmup_ratio, opts_.warmdown_ratio, opts_.final_lr_frac);
    Stopwatch sw;
    const double local_loss = train_step(step, lr);
    // One allreduce per step carries what the ranks must agree on: the mean loss, whether any rank
    // was asked to stop, and the time since the last save (averaged, so every rank decides alike).
    // RL adds its reward and token counts (every rank has as many samples, so means average exactly).
    std::vector<double> agreed{local_loss, static_cast<double>(g_stop_signal), since_save_.seconds()};
    if (rl()) {
      agreed.insert(agreed.end(), {rl_stats_.reward_sum / rl_stats_.samples, rl_stats_.trained_tokens,
                                   rl_stats_.sampled_tokens, rl_stats_.sample_seconds});
    }
    dist::allreduce_scalars(group_, agreed, dist::ReduceOp::Avg);
    const double loss = agreed[0];
    const double dt = sw.seconds();
    const double step_tokens = rl() ? agreed[4] * group_.size() : static_cast<double>(plan_.tokens_per_step);
    const double tok_s = step_tokens / dt;
    // Model FLOP/s per device, and MFU against the device's peak when one is known.
    const double flops_s = flops_per_token * tok_s / group_.size();
    train_seconds += dt;
    trained_tokens += step_tokens;
    // From the mean step time of this run so far; evaluations and saves are not counted.
    const double eta = train_seconds / static_cast<double>(step + 1 - start_step_) * static_cast<double>(stop - step - 1);
    // metrics.jsonl's line and the console's use the same names (train/metrics.h documents them).
    nlohmann::json line = {{"step", step + 1}, {"loss", loss}, {"lrm", lr}, {"epoch", data_position().epoch},
                           {"dt_ms", dt * 1000}};
    std::string console = fmt::format("step {:05d}/{:05d} | loss {:.6f} | lrm {:.3f} | epoch {} | dt_ms {:.0f}",
                                      step + 1, n, loss, lr, data_position().epoch, dt * 1000);
    if (rl()) {
      // Sampling throughput: completion tokens over all ranks per second of generation on each.
      const double sampled = agreed[5] * group_.size(), sample_tok_s = agreed[6] > 0 ? sampled / agreed[6] : 0;
      line.update({{"reward", agreed[3]}, {"sampled_tokens", sampled}, {"sample_tokens_per_s", sample_tok_s},
                   {"trained_tokens", step_tokens}});
      console += fmt::format(" | reward {:.4f} | sampled_tokens {:.0f} | sample_tokens_per_s {:.0f} | trained_tokens "
                             "{:.0f}", agreed[3], sampled, sample_tok_s, step_tokens);
    } else {
      line.update({{"tokens", (step + 1) * plan_.tokens_per_step}, {"tokens_per_s", tok_s}, {"flops_per_s", flops_s}});
      console += fmt::format(" | tokens_per_s {:.0f} | flops_per_s {:.1f}G", tok_s, flops_s / 1e9);
      if (peak_.flops > 0) {
        line["mfu"] = flops_s / peak_.flops;
        console += fmt::format(" | mfu {:.1f}%", 100 * flops_s / peak_.flops);
      }
    }
    if (loss_scaling()) {
      // The scale the next step uses, and whether this one was skipped (every rank skipped it).
      line.update({{"loss_scale", loss_scale_}, {"skipped", step_skipped_}});
      console += fmt::format(" | loss_scale {:g}{}", loss_scale_, step_skipped_ ? " | skipped (fp16 overflow)" : "");
    }
    console += fmt::format(" | eta {}", format_duration(eta));
    // Rank 0's own phases and memory.
    const MemoryUse mem = memory_use(device_);
    line.update({{"data_ms", 1000 * phases_.data}, {"forward_ms", 1000 * phases_.forward},
                 {"backward_ms", 1000 * phases_.backward}, {"comm_ms", 1000 * phases_.exposed_comm},
                 {"optimizer_ms", 1000 * phases_.optimizer}, {"host_rss_mb", mem.host_rss_mb},
                 {"host_peak_mb", mem.host_peak_mb}});
    if (rl()) line["sample_ms"] = 1000 * phases_.sample;
    if (opts_.grad_clip > 0) line["grad_norm"] = optimizer_->last_grad_norm();
    if (device_.is_cuda()) line["device_peak_mb"] = mem.device_peak_mb;
    log::status0(console);
    metrics_->write(line);
    result_.last_loss = loss;
    // A NaN or infinite loss poisons every later step and checkpoint: stop here, before saving.
    NANODDP_CHECK(std::isfinite(loss), "step {}: the training loss is {}; stopping before it reaches a checkpoint. "
                  "Lower the learning rates (or check the data), or resume from an earlier checkpoint", step + 1, loss);
    if (opts_.sample_every > 0 && (step + 1) % opts_.sample_every == 0 && step + 1 < n) sample();
    stop_requested = agreed[1] > 0;
    save_due = stop_requested || (opts_.save_minutes > 0 && agreed[2] >= opts_.save_minutes * 60);
  }
  result_.last_step = stop;
  log::end_status0();
  write_trace();
  // A --stop_at run is a pause, not the end: no sample; nor when a signal asked to stop.
  if (stop == n && !stop_requested) sample();
  summarize(stop, train_seconds, trained_tokens);
  return result_;
}

}  // namespace

TrainResult run_training(const TrainOptions& opts, dist::ProcessGroup& group, Device device) {
  validate_options(opts);
  // comm/init sets it too; tests that build their own group have not.
  log::set_rank(group.rank(), group.size());
  Trainer trainer(opts, group, device);
  return trainer.run();
}


}  // namespace nanoddp::train
