#include "train/validate.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "comm/consistency.h"
#include "core/error.h"
#include "core/options.h"
#include "ops/ops.h"
#include "train/schedule.h"

namespace nanoddp::train {

namespace {

// Model sizes beyond these are typos, not experiments: depth 1000 is ~600x nanochat's d20, and a
// context of 2^20 tokens is 500x its 2048.
constexpr int64_t kMaxDepth = 1000;
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxDeviceBatch = int64_t{1} << 24;
// The model's width depth x aspect_ratio (nanochat's d20 is 1280), and so any head size or head count.
constexpr int64_t kMaxModelDim = int64_t{1} << 20;
// Tokens per optimizer step (nanochat's is 2^19) and per evaluation (its 20 x 2^19).
constexpr int64_t kMaxBatchTokens = int64_t{1} << 40;
// 1 TiB: a bucket of gradients is a buffer; its size in bytes must fit an int64 with room to spare.
constexpr double kMaxBucketMb = 1 << 20;
// Seconds, about 31 years: a wait longer than this is a typo, and longer ones overflow the clocks'
// integer nanoseconds.
constexpr double kMaxTimeoutSeconds = 1e9;
constexpr double kMaxLearningRate = 1000;
constexpr int64_t kMaxTaskItems = int64_t{1} << 24;
// RL: completions per question and per step (nanochat's chat_rl: 16 x 16).
constexpr int64_t kMaxRlSamples = int64_t{1} << 16;
constexpr int64_t kMaxRlSamplesPerStep = int64_t{1} << 24;

// A whole-number flag with an upper bound: "too large" and the bound, not a wrapped product later.
void at_most(int64_t v, int64_t bound, const char* flag, const char* what) {
  NANODDP_CHECK(v <= bound, "--{} {} is too large: {} is at most {}", flag, v, what, bound);
}

void positive(int64_t v, const char* flag) { NANODDP_CHECK(v >= 1, "--{} must be at least 1 (got {})", flag, v); }

// -1 means "not set" for these flags; anything else must be a real count.
void minus_one_or_positive(int64_t v, const char* flag, const char* meaning) {
  NANODDP_CHECK(v == -1 || v >= 1, "--{} must be -1 ({}) or at least 1 (got {})", flag, meaning, v);
}

void finite_non_negative(double v, const char* flag) {
  NANODDP_CHECK(std::isfinite(v) && v >= 0, "--{} must be a finite number >= 0 (got {})", flag, v);
}

// Learning rates, and the factors that multiply them, as f32 numbers: 0 or more, and at most 1000,
// 5000 times nanochat's largest rate (0.2). A larger one is a typo: its first update sends the
// weights to inf or NaN, and the run fails on a NaN loss without naming the flag.
void learning_rate_factor(double v, const char* flag) {
  finite_non_negative(v, flag);
  NANODDP_CHECK(v <= kMaxLearningRate, "--{} {} is too large: at most {:g}", flag, v, kMaxLearningRate);
}

// In MiB, converted to whole bytes by the reducer: at least one byte, and not so large that the
// conversion overflows (which read as a size of 0, "must be positive").
void bucket_size(double mb, const char* flag) {
  NANODDP_CHECK(std::isfinite(mb) && mb * 1048576 >= 1, "--{} must be positive, at least one byte (got {} MiB)", flag,
                mb);
  NANODDP_CHECK(mb <= kMaxBucketMb, "--{} {} is too large: at most {:g} MiB", flag, mb, kMaxBucketMb);
}

void fraction(double v, const char* flag) {
  NANODDP_CHECK(std::isfinite(v) && v >= 0 && v <= 1, "--{} must be between 0 and 1 (got {})", flag, v);
}

// The model's shape: depth, width, heads and context, each bounded so that sizes derived from them fit.
void validate_model_shape(const TrainOptions& o) {
  NANODDP_CHECK(o.model.depth >= 1 && o.model.depth <= kMaxDepth, "--depth must be between 1 and {} (got {})", kMaxDepth, o.model.depth);
  NANODDP_CHECK(o.model.max_seq_len >= 1 && o.model.max_seq_len <= kMaxSeqLen, "--max_seq_len must be between 1 and {} (got {})",
                kMaxSeqLen, o.model.max_seq_len);
  positive(o.model.aspect_ratio, "aspect_ratio");
  // Divided, not multiplied: depth x aspect_ratio itself can overflow (it showed n_embd=-2).
  NANODDP_CHECK(o.model.aspect_ratio <= kMaxModelDim / o.model.depth,
                "--aspect_ratio {} is too large: the model's width "
                "depth x aspect_ratio ({} x {}) is at most {}",
                o.model.aspect_ratio, o.model.depth, o.model.aspect_ratio, kMaxModelDim);
  at_most(o.model.head_dim, kMaxModelDim, "head_dim", "the attention head size");
  at_most(o.model.n_kv_head, kMaxModelDim, "n_kv_head", "the number of key/value heads");
  NANODDP_CHECK(o.model.head_dim >= 2 && o.model.head_dim % 2 == 0,
                "--head_dim must be even and at least 2 (got {}): rotary "
                "embeddings rotate pairs of dimensions",
                o.model.head_dim);
  NANODDP_CHECK(o.model.n_kv_head >= 0, "--n_kv_head must be 0 (= n_head) or positive (got {})", o.model.n_kv_head);
}

// The batch and the step budget.
void validate_batch(const TrainOptions& o) {
  // Bounded so that device_batch_size x max_seq_len x world size stays inside int64 for any world
  // below 2^19 ranks (2^24 x 2^20 x 2^19 = 2^63): an overflow wrapped to 0, then divided by it. No
  // device holds such a batch.
  NANODDP_CHECK(o.batch.device_batch_size >= 1 && o.batch.device_batch_size <= kMaxDeviceBatch,
                "--device_batch_size must be between 1 and {} (got {})", kMaxDeviceBatch, o.batch.device_batch_size);
  minus_one_or_positive(o.batch.total_batch_size, "total_batch_size", "one micro-step per step");
  at_most(o.batch.total_batch_size, kMaxBatchTokens, "total_batch_size", "the tokens of one step");
  minus_one_or_positive(o.batch.num_iterations, "num_iterations", "from --target_flops or --target_param_data_ratio");
  at_most(o.batch.num_iterations, kMaxSteps, "num_iterations", "the number of optimizer steps");
  NANODDP_CHECK(o.batch.num_epochs == -1 || (std::isfinite(o.batch.num_epochs) && o.batch.num_epochs > 0),
                "--num_epochs must be -1 (off) or a positive number (got {})", o.batch.num_epochs);
}

// RL's own options, checked only for --stage rl.
void validate_rl(const TrainOptions& o) {
  if (o.chat.stage != RunStage::Rl) return;
  NANODDP_CHECK(!o.rl.task.empty(), "--task is required: a questions file or one of spelling, letters, arithmetic, "
                "addition");
  positive(o.rl.task_count, "task_count");
  // Checked even for a questions file, which ignores it: as many as data/tasks.cpp can make.
  at_most(o.rl.task_count, kMaxTaskItems, "task_count", "the number of a bundled task's problems");
  NANODDP_CHECK(o.rl.num_samples >= 2, "--num_samples must be at least 2 (got {}): RL learns from how an example's "
                "samples differ from their mean reward, and a single sample never does", o.rl.num_samples);
  at_most(o.rl.num_samples, kMaxRlSamples, "num_samples", "the completions per question");
  positive(o.rl.examples_per_step, "examples_per_step");
  NANODDP_CHECK(o.rl.examples_per_step <= kMaxRlSamplesPerStep / o.rl.num_samples, "--examples_per_step {} is too large: "
                "the completions sampled per step, examples_per_step x num_samples ({} x {}), are at most {}",
                o.rl.examples_per_step, o.rl.examples_per_step, o.rl.num_samples, kMaxRlSamplesPerStep);
  positive(o.rl.max_new_tokens, "max_new_tokens");
  // A completion ends where the context does: longer is a typo, not a request.
  at_most(o.rl.max_new_tokens, kMaxSeqLen, "max_new_tokens", "a completion's length in tokens");
  NANODDP_CHECK(std::isfinite(o.rl.temperature) && o.rl.temperature > 0, "--temperature must be positive (got {}): RL "
                "learns from differences between samples, and greedy samples do not differ", o.rl.temperature);
  NANODDP_CHECK(o.rl.top_k == 0 || o.rl.top_k >= 2, "--top_k must be 0 (all tokens) or at least 2 (got {}): RL "
                "learns from differences between samples, and --top_k 1 samples greedily", o.rl.top_k);
}

// The compute budget, loss scaling, the optimizer and its learning rates.
void validate_optimizer(const TrainOptions& o) {
  NANODDP_CHECK(o.batch.target_flops == -1 || (std::isfinite(o.batch.target_flops) && o.batch.target_flops > 0),
                "--target_flops must be -1 (off) or a positive number (got {})", o.batch.target_flops);
  NANODDP_CHECK(std::isfinite(o.batch.target_param_data_ratio) && o.batch.target_param_data_ratio > 0,
                "--target_param_data_ratio must be positive (got {})", o.batch.target_param_data_ratio);
  NANODDP_CHECK(std::isfinite(o.runtime.loss_scale_init) && o.runtime.loss_scale_init >= 1,
                "--loss_scale_init must be a finite "
                "number of at least 1 (got {})",
                o.runtime.loss_scale_init);
  // The scale multiplies an f32 loss and doubles from here: above 2^64 the first scaled gradient
  // overflows f32 (max ~2^128), and the halving that follows would take ~64 skipped steps.
  NANODDP_CHECK(o.runtime.loss_scale_init <= 0x1p64, "--loss_scale_init {} is too large: at most 2^64 = {:g}",
                o.runtime.loss_scale_init, 0x1p64);
  NANODDP_CHECK(o.runtime.loss_scale_growth_interval >= 1, "--loss_scale_growth_interval must be at least 1 (got {})",
                o.runtime.loss_scale_growth_interval);
  NANODDP_CHECK(o.optim.zero >= 0 && o.optim.zero <= 2, "--zero must be 0, 1 or 2 (got {})", o.optim.zero);
  learning_rate_factor(o.optim.embedding_lr, "embedding_lr");
  learning_rate_factor(o.optim.unembedding_lr, "unembedding_lr");
  learning_rate_factor(o.optim.matrix_lr, "matrix_lr");
  learning_rate_factor(o.optim.adamw_matrix_lr, "adamw_matrix_lr");
  learning_rate_factor(o.optim.sgd_lr, "sgd_lr");
  fraction(o.optim.sgd_momentum, "sgd_momentum");
  learning_rate_factor(o.optim.weight_decay, "weight_decay");
  finite_non_negative(o.optim.grad_clip, "grad_clip");
  NANODDP_CHECK(std::isfinite(o.optim.init_lr_frac) && o.optim.init_lr_frac > 0,
                "--init_lr_frac must be positive (got {})", o.optim.init_lr_frac);
  learning_rate_factor(o.optim.init_lr_frac, "init_lr_frac");
}

// The schedule of the learning rate, the gradient buckets, evaluation, saving and sampling.
void validate_schedule(const TrainOptions& o) {
  NANODDP_CHECK(o.eval.sample_every == -1 || o.eval.sample_every >= 1, "--sample_every must be -1 (only at the end) or at "
                "least 1 (got {})", o.eval.sample_every);
  fraction(o.optim.warmup_ratio, "warmup_ratio");
  learning_rate_factor(o.optim.scalar_lr, "scalar_lr");
  NANODDP_CHECK(o.optim.warmup_steps >= 0 && o.optim.warmup_steps <= kMaxSteps, "--warmup_steps must be between 0 "
                "and {} (got {})", kMaxSteps, o.optim.warmup_steps);
  fraction(o.optim.warmdown_ratio, "warmdown_ratio");
  fraction(o.optim.final_lr_frac, "final_lr_frac");
  NANODDP_CHECK(o.optim.warmup_ratio + o.optim.warmdown_ratio <= 1,
                "--warmup_ratio + --warmdown_ratio must be at most 1 (got "
                "{} + {})",
                o.optim.warmup_ratio, o.optim.warmdown_ratio);
  bucket_size(o.optim.bucket_cap_mb, "bucket_cap_mb");
  bucket_size(o.optim.first_bucket_mb, "first_bucket_mb");
  NANODDP_CHECK(o.eval.eval_every >= -1, "--eval_every must be -1 (only at the end) or at least 0 (got {})",
                o.eval.eval_every);
  positive(o.eval.eval_tokens, "eval_tokens");
  at_most(o.eval.eval_tokens, kMaxBatchTokens, "eval_tokens", "the tokens of one evaluation");
  NANODDP_CHECK(o.output.save_every >= -1, "--save_every must be -1 (only at the end) or at least 0 (got {})",
                o.output.save_every);
  finite_non_negative(o.output.save_minutes, "save_minutes");
  NANODDP_CHECK(o.output.keep_last >= 1,
                "--keep_last must be at least 1 (got {}): the newest checkpoint is always kept", o.output.keep_last);
  minus_one_or_positive(o.output.stop_at, "stop_at", "off");
  at_most(o.output.stop_at, kMaxSteps, "stop_at", "a step number");
  NANODDP_CHECK(o.eval.sample_tokens >= 0, "--sample_tokens must be 0 (no sample) or positive (got {})",
                o.eval.sample_tokens);
  at_most(o.eval.sample_tokens, kMaxSeqLen, "sample_tokens", "a sample's length in tokens");
}

// The machine: timeouts, threads, peak FLOPs, and how the run starts.
void validate_runtime(const TrainOptions& o) {
  NANODDP_CHECK(std::isfinite(o.runtime.timeout) && o.runtime.timeout > 0, "--timeout must be a positive number of seconds (got {})",
                o.runtime.timeout);
  NANODDP_CHECK(o.runtime.timeout <= kMaxTimeoutSeconds, "--timeout {} is too large: at most {:g} seconds", o.runtime.timeout,
                kMaxTimeoutSeconds);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  NANODDP_CHECK(o.runtime.threads >= 0 && o.runtime.threads <= cores,
                "--threads must be between 0 (all cores) and {}, the cores "
                "of this machine (got {})",
                cores, o.runtime.threads);
  finite_non_negative(o.runtime.peak_flops, "peak_flops");
  // sft and rl set init_from to their --source, which a resumed run keeps as its provenance (the
  // weights come from the checkpoint resumed); only train's own --init_from conflicts with --resume.
  NANODDP_CHECK(o.output.init_from.empty() || o.output.resume.empty() || o.chat.stage != RunStage::Base,
                "--init_from starts a new run and "
                "--resume continues one: give one of them");
}

}  // namespace

void validate_options(const TrainOptions& o) {
  // --optimizer, --stage, --mask, --dtype, --resume and the like are typed (option_types.h): their
  // words were checked where they were read.
  validate_model_shape(o);
  validate_batch(o);
  validate_rl(o);
  validate_optimizer(o);
  validate_schedule(o);
  validate_runtime(o);
}

void check_fp8(const TrainOptions& o, Device device) {
  if (!o.runtime.fp8) return;
  const std::string why = ops::fp8_unsupported(device);
  NANODDP_CHECK(why.empty(), "--fp8 cannot run on {}: {}; drop --fp8", device.str(), why);
  NANODDP_CHECK(activation_dtype(o.runtime.dtype, device) == DType::BF16,
                "--fp8 runs with bf16 activations (nanochat's): drop --dtype or give --dtype bf16");
  const int64_t tokens = o.batch.device_batch_size * o.model.max_seq_len;
  NANODDP_CHECK(tokens % 16 == 0,
                "--fp8 needs --device_batch_size x --max_seq_len ({} x {} = {}) to be a multiple of 16, the FP8 GEMMs' "
                "rule",
                o.batch.device_batch_size, o.model.max_seq_len, tokens);
}

DType activation_dtype(DtypeChoice dtype, Device device) {
  switch (dtype) {
    case DtypeChoice::F32: return DType::F32;
    case DtypeChoice::BF16: return DType::BF16;
    case DtypeChoice::F16: return DType::F16;
    case DtypeChoice::Auto: break;
  }
  return device.is_cuda() ? DType::BF16 : DType::F32;
}

const char* dtype_flag(DType dtype) {
  switch (dtype) {
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    default: return "fp32";
  }
}

double estimate_rank_bytes(const model::GPTConfig& c, const TrainOptions& o) {
  const double params = static_cast<double>(c.num_params());
  // f32 weights, gradients and two optimizer moments (AdamW; Muon keeps one, plus its scratch).
  const double state = 16 * params;
  const double tokens = static_cast<double>(o.batch.device_batch_size) * static_cast<double>(o.model.max_seq_len);
  // Per layer and token the backward keeps ~16 activations of width C (norms, q/k/v, attention
  // output, the 4C MLP hidden layer twice); the LM head's logits are f32 of the padded vocabulary.
  const double acts = tokens * (static_cast<double>(c.n_layer) * 16.0 * static_cast<double>(c.n_embd) +
                                2.0 * static_cast<double>(c.padded_vocab())) * 4.0;
  return state + acts;
}

void check_fits_in_memory(const model::GPTConfig& config, const TrainOptions& opts, int local_ranks) {
  // MemAvailable: what the kernel can give without swapping (free + reclaimable caches).
  std::ifstream meminfo("/proc/meminfo");
  double available = 0;
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  if (available <= 0) return;  // not Linux, or no /proc: nothing to compare with
  const double need = estimate_rank_bytes(config, opts) * std::max(1, local_ranks);
  NANODDP_CHECK(need <= available, "this model needs about {:.1f} GiB on this machine ({} rank(s), {:.0f}M parameters, "
                "{} x {} tokens per micro-batch) but only {:.1f} GiB is available: lower --depth, --device_batch_size or "
                "--max_seq_len, or use fewer ranks per machine", need / (1 << 30), std::max(1, local_ranks),
                config.num_params() / 1e6, opts.batch.device_batch_size, opts.model.max_seq_len, available / (1 << 30));
}

void check_save_best_evaluates(const TrainOptions& opts) {
  const bool rl = opts.chat.stage == RunStage::Rl;
  const bool evaluates = !rl && (opts.chat.conversations.empty() || !opts.chat.val_conversations.empty());
  NANODDP_CHECK(!opts.output.save_best || evaluates,
                "--save_best keeps the checkpoint with the lowest validation bpb, but this run evaluates nothing{}: "
                "drop --save_best{}", rl ? " (RL is measured by its reward)" : "", rl ? "" : " or give --val_conversations");
}

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

}  // namespace nanoddp::train
