#include "train/trainer.h"

#include <cmath>
#include <filesystem>

#include "core/log.h"
#include "core/options.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "comm/consistency.h"
#include "ddp/optimizer.h"
#include "ddp/reducer.h"
#include "model/generate.h"
#include "model/gpt.h"
#include "nanoddp/build_config.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "ops/profile.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/schedule.h"

namespace nanoddp::train {

// The H100 SXM's dense bf16 tensor-core peak (NVIDIA's datasheet figure without sparsity), the MFU
// denominator nanochat and llm.c report against on any GPU unless --peak_flops says otherwise.
constexpr double kH100DenseBf16Flops = 989e12;

namespace {

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
  NANODDP_CHECK(o.device_batch_size >= 1, "--device_batch_size must be positive");
  // Tokens of one micro-step over all ranks.
  const int64_t per_micro = o.device_batch_size * o.max_seq_len * world;
  const int64_t total = o.total_batch_size < 0 ? per_micro : o.total_batch_size;
  NANODDP_CHECK(total % per_micro == 0, "--total_batch_size {} is not a multiple of device_batch_size x max_seq_len x "
                "world size = {} x {} x {} = {}: choose a total batch that divides, or another device batch", total,
                o.device_batch_size, o.max_seq_len, world, per_micro);
  p.grad_accum = total / per_micro;
  p.tokens_per_step = total;
  // The length of training, first that applies (as in nanochat): --num_iterations, --target_flops,
  // then tokens = target_param_data_ratio x parameters.
  if (o.num_iterations > 0) {
    p.num_iterations = o.num_iterations;
  } else if (o.target_flops > 0) {
    p.num_iterations = std::llround(o.target_flops / (p.config.flops_per_token(o.max_seq_len) * total));
  } else {
    p.num_iterations = static_cast<int64_t>(o.target_param_data_ratio * p.config.num_params()) / total;
  }
  NANODDP_CHECK(p.num_iterations >= 1, "the run would take 0 steps: set --num_iterations");
  // --eval_tokens counts over all ranks, like per_micro.
  p.eval_micro_batches = std::max<int64_t>(1, o.eval_tokens / per_micro);
  return p;
}

// "1h02m", "3m07s", "12s"
std::string format_duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// One run on this rank: built once, run() once.
class Trainer {
 public:
  Trainer(const TrainOptions& opts, dist::ProcessGroup& group, Device device);
  TrainResult run();

 private:
  int64_t resume_step();
  void restore(int64_t step);
  void save(int64_t step);
  double train_step(int64_t step, double lr_mult);
  void evaluate_and_log(int64_t step);
  void sample();

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
  std::unique_ptr<data::TokenLoader> loader_;
  // One micro-batch: i32 [device_batch_size, max_seq_len] on the host.
  Tensor inputs_, targets_;
  std::unique_ptr<MetricsLog> metrics_;
  TrainResult result_;
  double peak_flops_ = 0;
  int64_t start_step_ = 0;
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
  // bf16 activations on a GPU (nanochat's autocast); f32 on the CPU.
  const DType act = device_.is_cuda() ? DType::BF16 : DType::F32;
  model_ = std::make_unique<model::GPT>(plan_.config, device_, act);
  model_->init_weights(opts.seed);
  // Muon orthogonalises each matrix whole, so with --zero no matrix may be split across ranks.
  ddp::ReducerOptions ro{.zero = static_cast<int>(opts.zero),
                         .whole_matrices = opts.optimizer == "muon",
                         .first_bucket_mb = opts.first_bucket_mb,
                         .bucket_cap_mb = opts.bucket_cap_mb};
  reducer_ = std::make_unique<ddp::Reducer>(*model_, group, ro);
  ddp::OptimizerConfig oc;
  oc.optimizer = opts.optimizer;
  oc.embedding_lr = opts.embedding_lr;
  oc.unembedding_lr = opts.unembedding_lr;
  oc.matrix_lr = opts.matrix_lr;
  oc.adamw_matrix_lr = opts.adamw_matrix_lr;
  oc.weight_decay = opts.weight_decay;
  NANODDP_CHECK(opts.muon_precision == "bf16" || opts.muon_precision == "f32", "--muon_precision must be bf16 or "
                "f32 (got '{}')", opts.muon_precision);
  oc.ns_bf16 = opts.muon_precision == "bf16";
  optimizer_ = std::make_unique<ddp::Optimizer>(*model_, *reducer_, oc);
  // Rank-strided: each rank reads its own rows of the one seeded order.
  data::LoaderOptions lo{opts.device_batch_size, opts.max_seq_len, group.rank(), group.size(), opts.shuffle,
                         opts.seed};
  loader_ = std::make_unique<data::TokenLoader>(opts.data, "train", lo);
  inputs_ = Tensor::empty({opts.device_batch_size, opts.max_seq_len}, DType::I32);
  targets_ = Tensor::empty({opts.device_batch_size, opts.max_seq_len}, DType::I32);
  // MFU's denominator: the user's --peak_flops, else on the CPU a layer-sized GEMM measured now,
  // else the H100's dense bf16 peak (the figure nanochat and PyTorch users quote MFU against).
  peak_flops_ = opts.peak_flops > 0 ? opts.peak_flops
                                    : (device_.is_cpu() ? ops::measure_matmul_flops(device_) : kH100DenseBf16Flops);
}

// The step to resume from, or -1 for a fresh run (see --resume; a launcher restart implies auto).
int64_t Trainer::resume_step() {
  std::string mode = opts_.resume;
  const char* restarts = std::getenv("NANODDP_RESTART_COUNT");
  // The launcher sets NANODDP_RESTART_COUNT > 0 when it restarts the job after a failure: go on from
  // the newest checkpoint instead of starting over.
  if (mode.empty() && restarts != nullptr && std::atoll(restarts) > 0) mode = "auto";
  if (mode.empty()) return -1;
  auto latest = latest_checkpoint(opts_.out);
  if (mode == "auto") return latest ? *latest : -1;
  if (mode == "latest") {
    NANODDP_CHECK(latest.has_value(), "--resume latest: no complete checkpoint under {}/checkpoints", opts_.out);
    return *latest;
  }
  int64_t step = -1;
  try {
    step = std::stoll(mode);
  } catch (const std::exception&) {
    NANODDP_FAIL("--resume must be latest, auto or a step number (got '{}')", mode);
  }
  NANODDP_CHECK(std::filesystem::exists(checkpoint_dir(opts_.out, step) + "/DONE"), "--resume {}: no complete "
                "checkpoint at {}", step, checkpoint_dir(opts_.out, step));
  return step;
}

void Trainer::restore(int64_t step) {
  const std::string dir = checkpoint_dir(opts_.out, step);
  const nlohmann::json meta = read_checkpoint_meta(dir);
  const int saved_world = meta.at("world_size");
  NANODDP_CHECK(saved_world == group_.size(), "checkpoint {} was written by {} rank(s) but this run has {}: resume "
                "with the same world size (resharding is not supported)", dir, saved_world, group_.size());
  NANODDP_CHECK(model::GPTConfig::from_json(meta.at("model_config")) == plan_.config, "checkpoint {} holds another "
                "model configuration ({}); resume with the same --depth and model flags", dir,
                meta.at("model_config").dump());
  // These shape the optimizer state and what the loader's cursor counts; other options (learning
  // rates, evaluation and save cadence, ...) may change across a resume.
  for (const char* key : {"zero", "optimizer", "device_batch_size", "total_batch_size", "max_seq_len"}) {
    const auto saved = meta.at("options").at(key), now = options_to_json(opts_).at(key);
    NANODDP_CHECK(saved == now, "checkpoint {} was trained with --{} {} but this run has {}; resume with the same "
                  "setting", dir, key, saved.dump(), now.dump());
  }
  SafetensorsFile weights(dir + "/model.safetensors");
  for (auto& p : model_->parameters()) weights.read_into(p.name, p.data);
  model_->refresh_compute_weights();
  optimizer_->load_state(SafetensorsFile(dir + "/" + CheckpointFiles::optimizer(group_.rank())));
  // The resumed run reads exactly the rows the interrupted one would have read next.
  loader_->set_state({meta.at("loader").at("epoch"), meta.at("loader").at("cursor")});
  // Keep the last evaluation, so the next checkpoint's meta.json carries it until the next one.
  if (meta.contains("val_bpb") && !meta["val_bpb"].is_null())
    result_.eval = EvalResult{meta.value("val_loss", 0.0), meta["val_bpb"], 0};
  log::print0("resumed from {} (step {})", dir, step);
}

void Trainer::save(int64_t step) {
  CheckpointContents c;
  c.step = step;
  for (const auto& p : model_->parameters()) c.model.emplace_back(p.name, p.data);
  c.optimizer = optimizer_->state();
  const auto loader = loader_->state();
  // data_dir is absolute so that `nanoddp sample` and `export` work from another directory.
  c.meta = {{"step", step},
            {"model_config", plan_.config.to_json()},
            {"options", options_to_json(opts_)},
            {"loader", {{"epoch", loader.epoch}, {"cursor", loader.cursor}}},
            {"world_size", group_.size()},
            {"data_dir", std::filesystem::absolute(opts_.data).string()},
            {"tokenizer", meta_.tokenizer},
            {"tokens_seen", step * plan_.tokens_per_step},
            {"nanoddp_version", NANODDP_VERSION},
            {"val_bpb", result_.eval ? nlohmann::json(result_.eval->bpb) : nlohmann::json()},
            {"val_loss", result_.eval ? nlohmann::json(result_.eval->loss) : nlohmann::json()}};
  save_checkpoint(opts_.out, c, group_, opts_.keep_last);
  log::print0("saved checkpoint {}", checkpoint_dir(opts_.out, step));
}

// One optimizer step: grad_accum micro-steps, gradients synchronised during the last backward.
double Trainer::train_step(int64_t step, double lr_mult) {
  double loss = 0;
  // Micro-batch gradients of the unscaled loss are summed; the reducer divides by grad_accum
  // (Note [accumulation order] in model/gpt.cpp).
  const int accum = static_cast<int>(plan_.grad_accum);
  for (int m = 0; m < accum; m++) {
    loader_->next(inputs_, targets_);
    const bool last = m == accum - 1;
    loss += model_->forward_backward(inputs_, targets_, 1.f, m > 0, last ? reducer_->sync_hook(accum) : nullptr);
  }
  // The optimizer reads the gradients: wait for the last buckets' collectives.
  reducer_->finish();
  optimizer_->step(lr_mult, muon_momentum(step));
  // For the log only: the reducer has already averaged the gradients.
  std::vector<double> mean{loss / static_cast<double>(plan_.grad_accum)};
  dist::allreduce_scalars(group_, mean, dist::ReduceOp::Avg);
  return mean[0];
}

void Trainer::evaluate_and_log(int64_t step) {
  Stopwatch sw;
  EvalResult r = evaluate(*model_, opts_.data, opts_.device_batch_size, opts_.max_seq_len, plan_.eval_micro_batches,
                          token_bytes_, group_);
  result_.eval = r;
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

TrainResult Trainer::run() {
  const int64_t resume = resume_step();
  if (resume >= 0) {
    restore(resume);
  } else {
    // A fresh run starts every rank from rank 0's weights (as PyTorch DDP's constructor does); a resumed
    // one has loaded the same file on every rank.
    reducer_->broadcast_parameters();
  }
  start_step_ = std::max<int64_t>(0, resume);
  metrics_ = std::make_unique<MetricsLog>(opts_.out, group_.rank() == 0, resume);
  // --stop_at ends early without changing n, so the LR schedule stays the full run's.
  const int64_t n = plan_.num_iterations, stop = opts_.stop_at > 0 ? std::min(opts_.stop_at, n) : n;
  const double flops_per_token = plan_.config.flops_per_token(opts_.max_seq_len);
  log::print0("model: depth {} | dim {} | heads {}/{} | vocab {} (padded {}) | {:.2f}M parameters",
              plan_.config.n_layer, plan_.config.n_embd, plan_.config.n_head, plan_.config.n_kv_head,
              plan_.config.vocab_size, plan_.config.padded_vocab(), plan_.config.num_params() / 1e6);
  log::print0("batch: {} tokens/step = {} ranks x {} rows x {} tokens x {} accumulation | {} steps | {} threads/rank "
              "| peak {:.1f} GFLOP/s per rank | optimizer {} zero {} | backend {}", plan_.tokens_per_step,
              group_.size(), opts_.device_batch_size, opts_.max_seq_len, plan_.grad_accum, n, ops::cpu_threads(),
              peak_flops_ / 1e9, opts_.optimizer, opts_.zero, group_.backend_name());
  double train_seconds = 0;  // time in training steps, for the ETA
  for (int64_t step = start_step_;; step++) {
    // Step s is the state after s steps: evaluate and save before training it, and go round once more
    // at `stop` for the final state. No save at start_step_: it is the checkpoint
    // just resumed from, or the untrained step 0.
    const bool last = step == stop;
    if (last || (opts_.eval_every > 0 && step % opts_.eval_every == 0)) evaluate_and_log(step);
    if (last || (opts_.save_every > 0 && step % opts_.save_every == 0 && step > start_step_)) save(step);
    if (last) break;
    const double lr = lr_multiplier(step, n, opts_.warmup_ratio, opts_.warmdown_ratio, opts_.final_lr_frac);
    Stopwatch sw;
    const double loss = train_step(step, lr);
    const double dt = sw.seconds(), tok_s = plan_.tokens_per_step / dt;
    // MFU of the whole job: achieved FLOP/s over the peak of world_size devices.
    const double mfu = flops_per_token * tok_s / (peak_flops_ * group_.size());
    train_seconds += dt;
    // From the mean step time of this run so far; evaluations and saves are not counted.
    const double eta = train_seconds / static_cast<double>(step + 1 - start_step_) * static_cast<double>(stop - step - 1);
    log::print0("step {:05d}/{:05d} | loss {:.6f} | lrm {:.3f} | dt {:.0f}ms | tok/s {:.0f} | mfu {:.1f}% | eta {}",
                step + 1, n, loss, lr, dt * 1000, tok_s, 100 * mfu, format_duration(eta));
    metrics_->write({{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"tokens_per_s", tok_s}, {"mfu", mfu},
                     {"dt_ms", dt * 1000}, {"tokens", (step + 1) * plan_.tokens_per_step}});
    result_.last_loss = loss;
  }
  result_.last_step = stop;
  // A --stop_at run is a pause, not the end: no sample.
  if (stop == n) sample();
  return result_;
}

}  // namespace

TrainResult run_training(const TrainOptions& opts, dist::ProcessGroup& group, Device device) {
  // comm/init sets it too; tests that build their own group have not.
  log::set_rank(group.rank(), group.size());
  Trainer trainer(opts, group, device);
  return trainer.run();
}


}  // namespace nanoddp::train
