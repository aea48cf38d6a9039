#include "train/validate.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"

namespace nanoddp::train {

namespace {

// Model sizes beyond these are typos, not experiments: depth 1000 is ~600x nanochat's d20, and a
// context of 2^20 tokens is 500x its 2048.
constexpr int64_t kMaxDepth = 1000;
constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
constexpr int64_t kMaxDeviceBatch = int64_t{1} << 24;

void positive(int64_t v, const char* flag) { NANODDP_CHECK(v >= 1, "--{} must be at least 1 (got {})", flag, v); }

// -1 means "not set" for these flags; anything else must be a real count.
void minus_one_or_positive(int64_t v, const char* flag, const char* meaning) {
  NANODDP_CHECK(v == -1 || v >= 1, "--{} must be -1 ({}) or at least 1 (got {})", flag, meaning, v);
}

void finite_non_negative(double v, const char* flag) {
  NANODDP_CHECK(std::isfinite(v) && v >= 0, "--{} must be a finite number >= 0 (got {})", flag, v);
}

void fraction(double v, const char* flag) {
  NANODDP_CHECK(std::isfinite(v) && v >= 0 && v <= 1, "--{} must be between 0 and 1 (got {})", flag, v);
}

}  // namespace

void validate_options(const TrainOptions& o) {
  NANODDP_CHECK(o.depth >= 1 && o.depth <= kMaxDepth, "--depth must be between 1 and {} (got {})", kMaxDepth, o.depth);
  NANODDP_CHECK(o.max_seq_len >= 1 && o.max_seq_len <= kMaxSeqLen, "--max_seq_len must be between 1 and {} (got {})",
                kMaxSeqLen, o.max_seq_len);
  positive(o.aspect_ratio, "aspect_ratio");
  NANODDP_CHECK(o.head_dim >= 2 && o.head_dim % 2 == 0, "--head_dim must be even and at least 2 (got {}): rotary "
                "embeddings rotate pairs of dimensions", o.head_dim);
  NANODDP_CHECK(o.n_kv_head >= 0, "--n_kv_head must be 0 (= n_head) or positive (got {})", o.n_kv_head);
  // Bounded so that device_batch_size x max_seq_len x world size stays inside int64 for any world
  // below 2^19 ranks (2^24 x 2^20 x 2^19 = 2^63): an overflow wrapped to 0, then divided by it. No
  // device holds such a batch.
  NANODDP_CHECK(o.device_batch_size >= 1 && o.device_batch_size <= kMaxDeviceBatch,
                "--device_batch_size must be between 1 and {} (got {})", kMaxDeviceBatch, o.device_batch_size);
  minus_one_or_positive(o.total_batch_size, "total_batch_size", "one micro-step per step");
  minus_one_or_positive(o.num_iterations, "num_iterations", "from --target_flops or --target_param_data_ratio");
  NANODDP_CHECK(o.num_epochs == -1 || (std::isfinite(o.num_epochs) && o.num_epochs > 0),
                "--num_epochs must be -1 (off) or a positive number (got {})", o.num_epochs);
  NANODDP_CHECK(o.mask == "assistant" || o.mask == "all", "--mask must be assistant or all (got '{}')", o.mask);
  NANODDP_CHECK(o.stage == "base" || o.stage == "sft" || o.stage == "rl", "--stage must be base, sft or rl (got "
                "'{}')", o.stage);
  if (o.stage == "rl") {
    NANODDP_CHECK(!o.task.empty(), "--task is required: a questions file or one of spelling, letters, arithmetic");
    positive(o.task_count, "task_count");
    NANODDP_CHECK(o.num_samples >= 2, "--num_samples must be at least 2 (got {}): RL learns from how an example's "
                  "samples differ from their mean reward, and a single sample never does", o.num_samples);
    positive(o.examples_per_step, "examples_per_step");
    positive(o.max_new_tokens, "max_new_tokens");
    NANODDP_CHECK(std::isfinite(o.temperature) && o.temperature > 0, "--temperature must be positive (got {}): RL "
                  "learns from differences between samples, and greedy samples do not differ", o.temperature);
    NANODDP_CHECK(o.top_k == 0 || o.top_k >= 2, "--top_k must be 0 (all tokens) or at least 2 (got {}): RL "
                  "learns from differences between samples, and --top_k 1 samples greedily", o.top_k);
  }
  NANODDP_CHECK(o.target_flops == -1 || (std::isfinite(o.target_flops) && o.target_flops > 0),
                "--target_flops must be -1 (off) or a positive number (got {})", o.target_flops);
  NANODDP_CHECK(std::isfinite(o.target_param_data_ratio) && o.target_param_data_ratio > 0,
                "--target_param_data_ratio must be positive (got {})", o.target_param_data_ratio);
  NANODDP_CHECK(o.optimizer == "muon" || o.optimizer == "adamw", "--optimizer must be muon or adamw (got '{}')",
                o.optimizer);
  NANODDP_CHECK(o.muon_precision == "bf16" || o.muon_precision == "f32", "--muon_precision must be bf16 or f32 "
                "(got '{}')", o.muon_precision);
  activation_dtype(o.dtype, Device::cpu());  // the name's check
  NANODDP_CHECK(std::isfinite(o.loss_scale_init) && o.loss_scale_init >= 1, "--loss_scale_init must be a finite "
                "number of at least 1 (got {})", o.loss_scale_init);
  NANODDP_CHECK(o.loss_scale_growth_interval >= 1, "--loss_scale_growth_interval must be at least 1 (got {})",
                o.loss_scale_growth_interval);
  NANODDP_CHECK(o.zero >= 0 && o.zero <= 2, "--zero must be 0, 1 or 2 (got {})", o.zero);
  finite_non_negative(o.embedding_lr, "embedding_lr");
  finite_non_negative(o.unembedding_lr, "unembedding_lr");
  finite_non_negative(o.matrix_lr, "matrix_lr");
  finite_non_negative(o.adamw_matrix_lr, "adamw_matrix_lr");
  finite_non_negative(o.weight_decay, "weight_decay");
  finite_non_negative(o.grad_clip, "grad_clip");
  NANODDP_CHECK(std::isfinite(o.init_lr_frac) && o.init_lr_frac > 0, "--init_lr_frac must be positive (got {})",
                o.init_lr_frac);
  NANODDP_CHECK(o.sample_every == -1 || o.sample_every >= 1, "--sample_every must be -1 (only at the end) or at "
                "least 1 (got {})", o.sample_every);
  fraction(o.warmup_ratio, "warmup_ratio");
  fraction(o.warmdown_ratio, "warmdown_ratio");
  fraction(o.final_lr_frac, "final_lr_frac");
  NANODDP_CHECK(o.warmup_ratio + o.warmdown_ratio <= 1, "--warmup_ratio + --warmdown_ratio must be at most 1 (got "
                "{} + {})", o.warmup_ratio, o.warmdown_ratio);
  NANODDP_CHECK(std::isfinite(o.bucket_cap_mb) && o.bucket_cap_mb > 0, "--bucket_cap_mb must be positive (got {})",
                o.bucket_cap_mb);
  NANODDP_CHECK(std::isfinite(o.first_bucket_mb) && o.first_bucket_mb > 0,
                "--first_bucket_mb must be positive (got {})", o.first_bucket_mb);
  NANODDP_CHECK(o.eval_every >= -1, "--eval_every must be -1 (only at the end) or at least 0 (got {})", o.eval_every);
  positive(o.eval_tokens, "eval_tokens");
  NANODDP_CHECK(o.save_every >= -1, "--save_every must be -1 (only at the end) or at least 0 (got {})",
                o.save_every);
  finite_non_negative(o.save_minutes, "save_minutes");
  NANODDP_CHECK(o.keep_last >= 1, "--keep_last must be at least 1 (got {}): the newest checkpoint is always kept",
                o.keep_last);
  minus_one_or_positive(o.stop_at, "stop_at", "off");
  NANODDP_CHECK(o.sample_tokens >= 0, "--sample_tokens must be 0 (no sample) or positive (got {})", o.sample_tokens);
  NANODDP_CHECK(std::isfinite(o.timeout) && o.timeout > 0, "--timeout must be a positive number of seconds (got {})",
                o.timeout);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  NANODDP_CHECK(o.threads >= 0 && o.threads <= cores, "--threads must be between 0 (all cores) and {}, the cores "
                "of this machine (got {})", cores, o.threads);
  finite_non_negative(o.peak_flops, "peak_flops");
  // sft and rl set init_from to their --source, which a resumed run keeps as its provenance (the
  // weights come from the checkpoint resumed); only train's own --init_from conflicts with --resume.
  NANODDP_CHECK(o.init_from.empty() || o.resume.empty() || o.stage != "base", "--init_from starts a new run and "
                "--resume continues one: give one of them");
}

// nanochat's and PyTorch's names (bfloat16, float32) are accepted too.
DType activation_dtype(const std::string& dtype, Device device) {
  if (dtype == "bf16" || dtype == "bfloat16") return DType::BF16;
  if (dtype == "fp32" || dtype == "float32" || dtype == "f32") return DType::F32;
  if (dtype == "fp16" || dtype == "float16") return DType::F16;
  NANODDP_CHECK(dtype == "auto", "--dtype must be auto, fp32, bf16 or fp16 (got '{}')", dtype);
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
  const double tokens = static_cast<double>(o.device_batch_size) * static_cast<double>(o.max_seq_len);
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
                config.num_params() / 1e6, opts.device_batch_size, opts.max_seq_len, available / (1 << 30));
}

}  // namespace nanoddp::train
