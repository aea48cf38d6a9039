#include "train/trainer.h"

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/consistency.h"
#include "core/log.h"
#include "core/options.h"
#include "core/timer.h"
#include "core/trace.h"
#include "data/dataset.h"
#include "data/tokenizer_file.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "ops/backend.h"
#include "ops/profile.h"
#include "train/loss_scaler.h"
#include "train/metrics.h"
#include "train/plan.h"
#include "train/progress.h"
#include "train/recipe_options.h"
#include "train/run_checkpoints.h"
#include "train/run_output.h"
#include "train/schedule.h"
#include "train/stage.h"
#include "train/stop_signals.h"
#include "train/validate.h"

namespace nanoddp::train {

namespace {

// What the ranks agree on after a step, in one allreduce: the mean loss, whether any rank was
// asked to stop, the time since the last save (averaged, so every rank decides alike), and the
// stage's figures.
struct Agreed {
  double loss = 0;  // NaN when no rank scored a token (then scored is false: see Stage::LossReading)
  bool scored = true;
  bool stop = false;
  double since_save = 0;
  std::vector<double> figures;
};

// One run on this rank: built once, run() once. Step s is the state after s steps.
class Trainer {
 public:
  Trainer(const TrainOptions& opts, dist::ProcessGroup& group, Device device);
  TrainResult run();

 private:
  // Until the first step: the checkpoint to resume (or --init_from), the run folder, the environment.
  // Returns the resumed step (-1: a fresh run), or nothing when the run is complete already.
  std::optional<int64_t> start();
  void print_header() const;
  // After the save of `step` that a stop signal asked for: the run ends, to be resumed.
  TrainResult stopped(int64_t step);
  // The step: the stage's forward and backward, then the tail every stage shares.
  void train_step(int64_t step, const StepSchedule& sched);
  void finish_and_update(int64_t step, const StepSchedule& sched);
  Agreed agree();
  // Rank 0's console line and metrics.jsonl line of the step; returns the tokens it trained on.
  double log_step(int64_t step, double lr, double seconds, const Agreed& a);
  // Returns whether --save_best keeps the state after `step` as the new best.
  bool evaluate_and_log(int64_t step);
  void save(int64_t step, bool best = false);
  nlohmann::json dataset_identity() const;

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
  ops::PeakFlops peak_;  // MFU's denominator (0: not reported)
  std::unique_ptr<Stage> stage_;  // base, SFT or RL (train/stage.h)
  std::unique_ptr<RunCheckpoints> checkpoints_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<MetricsLog> metrics_;
  TrainResult result_;
  std::optional<std::pair<int64_t, EvalResult>> best_eval_;  // the lowest val bpb of this process's run
  StepPhases phases_;  // of the last step, on this rank
  int64_t start_step_ = 0;
  int64_t stop_ = 0;  // the last step of this process: num_iterations, or --stop_at
  double train_seconds_ = 0;  // time in training steps, for the ETA and the summary
  double trained_tokens_ = 0;
  EpochLog epochs_;  // with --num_epochs: the epoch being trained (train/metrics.h)
  int64_t evaluated_step_ = -1;  // the step of this process's last evaluation
  std::optional<double> kept_best_bpb_;  // --save_best: the val bpb of the checkpoint OUT/best points at
};

Trainer::Trainer(const TrainOptions& opts, dist::ProcessGroup& group, Device device)
    : opts_(opts), group_(group), device_(device) {
  check_save_best_evaluates(opts_);
  check_fp8(opts_, device_);
  // First: everything below that computes (the MFU measurement included) runs on these threads.
  ops::set_cpu_threads(opts.runtime.threads);
  meta_ = data::read_dataset_meta(opts.input.data);
  // Before the expensive set-up, so a mismatched rank fails fast with a clear message.
  check_ranks_agree(opts, meta_, group);
  tokenizer_ = data::load_dataset_tokenizer(opts.input.data);
  token_bytes_ = tokenizer_->token_bytes();
  plan_ = make_plan(opts, meta_, group.size());
  // The sample's prompt must leave room for a token: said now, not with an empty sample after the run.
  if (opts.eval.sample_tokens > 0)
    model::check_prompt_fits(1 + static_cast<int64_t>(tokenizer_->encode(opts.eval.sample_prompt).size()),
                             plan_.config.max_seq_len, "--sample_prompt");
  // Before allocating: a model that cannot fit is refused with the estimate instead of being killed
  // by the OOM killer after a silent minute. GPU memory is the CUDA allocator's to report.
  if (device_.is_cpu()) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    check_fits_in_memory(plan_.config, opts, local != nullptr ? std::max(1, std::atoi(local)) : 1);
  }
  model_ = std::make_unique<model::GPT>(plan_.config, device_, activation_dtype(opts.runtime.dtype, device_));
  model_->set_fp8(opts.runtime.fp8);
  scaler_ = std::make_unique<LossScaler>(model_->act_dtype() == DType::F16, opts.runtime.loss_scale_init,
                                         opts.runtime.loss_scale_growth_interval);
  model_->init_weights(opts.input.seed);
  // Muon orthogonalises each matrix whole, so with --zero no matrix may be split across ranks.
  ddp::ReducerOptions ro{.zero = static_cast<int>(opts.optim.zero),
                         .whole_matrices = opts.optim.optimizer == ddp::OptimizerKind::Muon,
                         .first_bucket_mb = opts.optim.first_bucket_mb,
                         .bucket_cap_mb = opts.optim.bucket_cap_mb};
  reducer_ = std::make_unique<ddp::Reducer>(*model_, group, ro);
  optimizer_ = std::make_unique<ddp::Optimizer>(*model_, *reducer_, optimizer_config(opts, plan_));
  // MFU's denominator: the user's --peak_flops, else the device's datasheet peak (ops/profile.h).
  peak_ = opts.runtime.peak_flops > 0 ? ops::PeakFlops{opts.runtime.peak_flops, "--peak_flops"}
                                      : ops::peak_flops(device_);
  const StageContext ctx{opts_, group_, *model_, *reducer_, *tokenizer_, token_bytes_, plan_, peak_};
  stage_ = opts.chat.stage == RunStage::Rl ? make_policy_stage(ctx) : make_token_stage(ctx);
  if (plan_.num_iterations < 0) plan_.num_iterations = stage_->steps_for_epochs(opts.batch.num_epochs);
  checkpoints_ = std::make_unique<RunCheckpoints>(opts_, group_, meta_, plan_, *model_, *optimizer_);
  // --stop_at ends early without changing num_iterations, so the LR schedule stays the full run's.
  stop_ = opts.output.stop_at > 0 ? std::min(opts.output.stop_at, plan_.num_iterations) : plan_.num_iterations;
}

nlohmann::json Trainer::dataset_identity() const {
  nlohmann::json id = {{"vocab_size", meta_.vocab_size}, {"train_tokens", meta_.train_tokens},
                       {"tokenizer", meta_.tokenizer}};
  stage_->describe_data(id);
  return id;
}

std::optional<int64_t> Trainer::start() {
  checkpoints_->lock();  // one writer per run folder, before anything reads it
  const int64_t resume = checkpoints_->find_resume_step();
  const int64_t n = plan_.num_iterations, stop = stop_;
  if (resume >= stop) {
    // A restart after the final checkpoint (the job died while sampling, say) has nothing left to do;
    // nor has --resume auto ("continue if there is anything to continue").
    if (resume == stop && (opts_.output.resume.mode == ResumeSpec::Mode::Auto ||
                           (checkpoints_->restarted() && opts_.output.resume.empty()))) {
      log::print0("{} is complete at step {}: nothing left to train (raise --num_iterations to train further)",
                  opts_.output.out, resume);
      return std::nullopt;
    }
    NANODDP_FAIL("the checkpoint to resume is at step {}, {} this run's last step {} (--num_iterations {}{}): "
                 "raise --num_iterations to train further", resume, resume == stop ? "already" : "beyond", stop, n,
                 opts_.output.stop_at > 0 ? fmt::format(", --stop_at {}", opts_.output.stop_at) : "");
  }
  // Weights first: a bad --init_from must fail before --overwrite moves anything.
  if (resume < 0 && !opts_.output.init_from.empty()) {
    init_weights_from(*model_, plan_.config, opts_.output.init_from, opts_.input.data);
    if (opts_.output.load_optimizer && !init_optimizer_from(*optimizer_, opts_.output.init_from))
      log::print0("{} saved no optimizer state: the optimizer starts fresh (nanochat: slightly worse)",
                  opts_.output.init_from);
  }
  checkpoints_->claim(resume);
  write_environment(opts_, group_, device_, arithmetic_name(*model_, scaler_->scale()), peak_);
  if (resume >= 0) {
    const RunState state = checkpoints_->restore(resume, dataset_identity(), stage_->units_per_epoch());
    stage_->set_position(state.position);
    result_.eval = state.eval;
    if (state.loss_scale) scaler_->restore(state.loss_scale->first, state.loss_scale->second);
    if (opts_.output.save_best) kept_best_bpb_ = checkpoints_->kept_best_bpb();
  } else {
    // A fresh run starts every rank from rank 0's weights (as PyTorch DDP's constructor does); a resumed
    // one has loaded the same file on every rank.
    reducer_->broadcast_parameters();
  }
  return resume;
}

TrainResult Trainer::run() {
  const int64_t n = plan_.num_iterations, stop = stop_;
  const std::optional<int64_t> started = start();
  if (!started) {
    result_.last_step = stop;
    return result_;
  }
  const int64_t resume = *started;
  start_step_ = std::max<int64_t>(0, resume);
  // The loop evaluates its first step (the resumed one) only on the --eval_every cadence.
  const bool resume_evaluated = opts_.eval.eval_every > 0 && resume >= 0 && resume % opts_.eval.eval_every == 0;
  metrics_ = std::make_unique<MetricsLog>(opts_.output.out, group_.rank() == 0, resume, resume_evaluated);
  StopSignals signals;  // Note [stopping on a signal]
  if (opts_.runtime.trace) {
    // One time axis for all ranks: zero is the moment they leave this barrier.
    group_.barrier()->wait();
    trace::set_origin();
    trace::enable(true);
  }
  checkpoints_->start_clock();
  print_header();
  // Set after a step when the ranks agree that the state after it must be saved: --save_minutes
  // has passed, or a rank was asked to stop (then the run ends right after that save).
  bool save_due = false, stop_requested = false;
  for (int64_t step = start_step_;; step++) {
    // Evaluate and save the state after `step` steps before training it, and go round once more at
    // `stop` for the final state. No save at start_step_: it is the checkpoint just resumed from, or
    // the untrained step 0.
    const bool last = step == stop;
    bool best = false;
    if (last || epochs_.ended() || (opts_.eval.eval_every > 0 && step % opts_.eval.eval_every == 0))
      best = evaluate_and_log(step);
    if (epochs_.ended())
      epochs_.log(step, stage_->position().epoch + 1, evaluated_step_ == step && result_.eval ? &*result_.eval : nullptr,
                  *metrics_);
    if (last || save_due || best ||
        (opts_.output.save_every > 0 && step % opts_.output.save_every == 0 && step > start_step_))
      save(step, best);
    // A stop asked for during the last step needs nothing more: the run ends as complete (without
    // its final sample), not as one to continue (there is nothing left to resume).
    if (stop_requested && !last) return stopped(step);
    if (last) break;
    const StepSchedule sched = step_schedule(opts_, plan_, step);
    const double lr = sched.lr;
    Stopwatch sw;
    train_step(step, sched);
    const Agreed agreed = agree();
    // A step of SFT rows whose targets are all masked trains on nothing, while its optimizer step
    // still moves the weights (momentum, weight decay): stop, rather than log a loss of 0.
    NANODDP_CHECK(agreed.scored, "step {}: no row of the step has a target to train on (with --conversations only "
                  "the assistant's tokens are, and here the prompts fill whole micro-batches): raise --max_seq_len or "
                  "--device_batch_size, shorten the prompts, or use --mask all", step + 1);
    const double dt = sw.seconds();
    train_seconds_ += dt;
    trained_tokens_ += log_step(step, lr, dt, agreed);
    result_.last_loss = agreed.loss;
    if (opts_.batch.num_epochs > 0)
      epochs_.count(agreed.loss, stage_->position().cursor >= stage_->units_per_epoch());
    // A NaN or infinite loss poisons every later step and checkpoint: stop here, before saving.
    NANODDP_CHECK(std::isfinite(agreed.loss), "step {}: the training loss is {}; stopping before it reaches a "
                  "checkpoint. Lower the learning rates (or check the data), or resume from an earlier checkpoint",
                  step + 1, agreed.loss);
    if (opts_.eval.sample_every > 0 && (step + 1) % opts_.eval.sample_every == 0 && step + 1 < n)
      print_sample(opts_, group_, *model_, *tokenizer_);
    stop_requested = agreed.stop;
    save_due = stop_requested || (opts_.output.save_minutes > 0 && agreed.since_save >= opts_.output.save_minutes * 60);
  }
  result_.last_step = stop;
  log::end_status0();
  write_trace(opts_, group_);
  // A --stop_at run is a pause, not the end: no sample; nor when a signal asked to stop.
  if (stop == n && !stop_requested) print_sample(opts_, group_, *model_, *tokenizer_);
  summarize(opts_.output.out, stop - start_step_, stop, train_seconds_,
            stage_->describe_tokens(trained_tokens_, train_seconds_), result_.last_loss, best_eval_);
  return result_;
}

void Trainer::print_header() const {
  print_model(plan_.config);
  const std::string arithmetic =
      !stage_->counts_flops() ? std::string()
      : fmt::format(" | arithmetic: {} | mfu peak: {}", arithmetic_name(*model_, scaler_->scale()),
                    peak_.flops > 0 ? fmt::format("{:.4g} TFLOP/s per device ({})", peak_.flops / 1e12, peak_.what)
                                    : peak_.what);
  log::print0("batch: {} | {} steps | {} threads/rank | optimizer {} zero {} | backend {}{}", stage_->describe_batch(),
              plan_.num_iterations, ops::cpu_threads(), option_text(opts_.optim.optimizer), opts_.optim.zero,
              group_.backend_name(), arithmetic);
  if (const std::string scaling = describe_recipe_scaling(opts_, plan_); !scaling.empty()) log::print0("{}", scaling);
}

TrainResult Trainer::stopped(int64_t step) {
  const int sig = StopSignals::received() != 0 ? StopSignals::received() : SIGTERM;
  log::end_status0();
  write_trace(opts_, group_);
  log::print0("stopped by signal {} after step {}; continue with --resume latest", sig, step);
  result_.last_step = step;
  result_.stopped_by_signal = sig;
  return result_;
}

void Trainer::train_step(int64_t step, const StepSchedule& sched) {
  phases_ = StepPhases{};
  stage_->forward_backward(static_cast<float>(scaler_->scale()), phases_);
  finish_and_update(step, sched);
}

// The optimizer reads the gradients: wait for the last buckets' collectives (what this waits is
// the communication the backward did not hide), then update, with fp16 unscaled first and skipped
// on an overflow (Note [dynamic loss scaling]).
void Trainer::finish_and_update(int64_t step, const StepSchedule& sched) {
  ops::Backend& dev = ops::backend(device_);
  Stopwatch comm;
  reducer_->finish();
  if (device_.is_cuda()) dev.synchronize();
  group_.check();  // a bucket aborted at its timeout completes too, unaveraged: no update from it
  phases_.exposed_comm = comm.seconds();
  Stopwatch opt;
  {
    trace::Scope traced("optimizer");
    if (sched.muon_weight_decay) optimizer_->set_muon_weight_decay(*sched.muon_weight_decay);
    scaler_->update(*optimizer_, step, sched.lr, sched.momentum);
    if (device_.is_cuda()) dev.synchronize();
    group_.check();  // the parameters' all_gather under --zero 1|2
  }
  phases_.optimizer = opt.seconds();
}

// The loss is read here, once per step after its update (Note [reading the loss] in
// train/token_stage.cpp); the loop checks it before anything else reads or saves the model.
Agreed Trainer::agree() {
  const Stage::LossReading reading = stage_->read_loss();
  std::vector<double> v{reading.sum, reading.weight, static_cast<double>(StopSignals::received()),
                        checkpoints_->seconds_since_save()};
  const std::vector<double> figures = stage_->step_figures();
  v.insert(v.end(), figures.begin(), figures.end());
  dist::allreduce_scalars(group_, v, dist::ReduceOp::Avg);
  // With every micro-batch scoring, the weight is exactly 1 and the loss the plain mean.
  const bool scored = v[1] > 0;
  return Agreed{scored ? v[0] / v[1] : std::nan(""), scored, v[2] > 0, v[3],
                std::vector<double>(v.begin() + 4, v.end())};
}

// metrics.jsonl's line and the console's use the same names (train/metrics.h documents them).
double Trainer::log_step(int64_t step, double lr, double seconds, const Agreed& a) {
  const int64_t n = plan_.num_iterations, stop = stop_;
  const int64_t epoch = stage_->position().epoch;
  nlohmann::json line = {{"step", step + 1}, {"loss", a.loss}, {"lrm", lr}, {"epoch", epoch},
                         {"dt_ms", seconds * 1000}};
  std::string console = fmt::format("step {:05d}/{:05d} | loss {:.6f} | lrm {:.3f} | epoch {} | dt_ms {:.0f}",
                                    step + 1, n, a.loss, lr, epoch, seconds * 1000);
  const double step_tokens = stage_->describe_step(a.figures, step + 1, seconds, line, console);
  if (scaler_->enabled()) {
    // The scale the next step uses, and whether this one was skipped (every rank skipped it).
    line.update({{"loss_scale", scaler_->scale()}, {"skipped", scaler_->skipped()}});
    console += fmt::format(" | loss_scale {:g}{}", scaler_->scale(),
                           scaler_->skipped() ? " | skipped (fp16 overflow)" : "");
  }
  // From the mean step time of this run so far; evaluations and saves are not counted.
  const double eta =
      train_seconds_ / static_cast<double>(step + 1 - start_step_) * static_cast<double>(stop - step - 1);
  console += fmt::format(" | eta {}", format_duration(eta));
  // Rank 0's own phases and memory.
  const MemoryUse mem = memory_use(device_);
  line.update({{"data_ms", 1000 * phases_.data}, {"forward_ms", 1000 * phases_.forward},
               {"backward_ms", 1000 * phases_.backward}, {"comm_ms", 1000 * phases_.exposed_comm},
               {"optimizer_ms", 1000 * phases_.optimizer}, {"host_rss_mb", mem.host_rss_mb},
               {"host_peak_mb", mem.host_peak_mb}});
  if (opts_.optim.grad_clip > 0) line["grad_norm"] = optimizer_->last_grad_norm();
  if (device_.is_cuda()) line["device_peak_mb"] = mem.device_peak_mb;
  log::status0(console);
  metrics_->write(line);
  return step_tokens;
}

// With --save_best, a state better than the kept best (lower val bpb, every rank alike: the
// evaluation is collective) is saved and becomes OUT/best; not the state the run started from, which
// is untrained or the checkpoint just resumed.
bool Trainer::evaluate_and_log(int64_t step) {
  Stopwatch sw;
  const std::optional<EvalResult> r = stage_->evaluate_bpb();
  if (!r) return false;
  result_.eval = r;
  evaluated_step_ = step;
  if (!best_eval_ || r->bpb < best_eval_->second.bpb) best_eval_ = {step, *r};
  log::print0("step {:05d} | val loss {:.4f} | val bpb {:.4f} | {} tokens in {:.1f}s", step, r->loss, r->bpb,
              r->tokens, sw.seconds());
  metrics_->write({{"step", step}, {"val_loss", r->loss}, {"val_bpb", r->bpb}});
  if (!opts_.output.save_best || step == start_step_ || (kept_best_bpb_ && r->bpb >= *kept_best_bpb_)) return false;
  kept_best_bpb_ = r->bpb;
  return true;
}

void Trainer::save(int64_t step, bool best) {
  RunState state{stage_->position(), result_.eval, std::nullopt};
  if (scaler_->enabled()) state.loss_scale = {scaler_->scale(), scaler_->good_steps()};
  checkpoints_->save(step, state, dataset_identity(), best);
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
