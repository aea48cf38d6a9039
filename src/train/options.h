// Every option of `nanoddp train`, with its default and help text, in one place (see
// core/options.h), in sections that `--help` shows as groups. Flag names follow nanochat's
// base_train.py where nanochat has the option. The CLI binds them, checkpoints store them, and ranks
// compare them at start-up. Word-valued options are typed (option_types.h) and parsed where text
// enters, so code compares enums, never strings.
#pragma once

#include <cstdint>
#include <string>

#include "comm/backend_kind.h"
#include "ddp/optimizer_kind.h"
#include "train/option_types.h"

namespace nanoddp::train {

// The model's shape. Defaults are nanochat's d20 settings (its speedrun model).
struct ModelOptions {
  int64_t depth = 20;
  int64_t max_seq_len = 2048;
  int64_t aspect_ratio = 64;
  int64_t head_dim = 128;
  int64_t n_kv_head = 0;
  // nanochat today (2026 recipe; docs/recipe2026.md names the commit); classic = nanochat late 2025.
  model::Recipe recipe = model::Recipe::R2026;
  std::string window_pattern = "SSSL";

  template <typename V>
  void visit(V&& v) {
    v(depth, "depth", "Transformer depth: n_layer = depth, model_dim = depth * aspect_ratio (nanochat's one knob)");
    v(max_seq_len, "max_seq_len", "Sequence length T of each training row");
    v(aspect_ratio, "aspect_ratio", "model_dim = depth * aspect_ratio");
    v(head_dim, "head_dim", "Target attention head size: n_head = ceil(model_dim / head_dim)");
    v(n_kv_head, "n_kv_head", "Key/value heads for grouped-query attention (0 = n_head)");
    v(recipe, "recipe", "Model and optimizer: 2026 (nanochat today, at its commit 92d63d4: value embeddings, smear, "
      "backout, per-layer scalars, sliding windows, Polar Express, NorMuon; docs/recipe2026.md) or classic "
      "(nanochat late 2025, the default before 2026-11-28)");
    v(window_pattern, "window_pattern", "--recipe 2026: attention windows per layer, tiled: S = a quarter of "
      "max_seq_len (rounded up to 128), L = all of it; the last layer is always L");
  }
};

// How many tokens a step takes and how many steps a run takes.
struct BatchOptions {
  int64_t device_batch_size = 32;
  // 524288 = 2^19 tokens = 32 rows x 2048 tokens x 8 GPUs: one micro-step per step on an 8-GPU node.
  int64_t total_batch_size = 524288;
  int64_t num_iterations = -1;
  double num_epochs = -1;
  double target_flops = -1;
  double target_param_data_ratio = 20;

  template <typename V>
  void visit(V&& v) {
    v(device_batch_size, "device_batch_size", "Rows per micro-batch on each rank (B)");
    v(total_batch_size, "total_batch_size", "Tokens per optimizer step over all ranks; gradient accumulation = "
      "total / (B * T * world), which must divide exactly (-1: one micro-step; a 2026 base run without "
      "--num_epochs: nanochat's automatic batch)");
    v(num_iterations, "num_iterations", "Optimizer steps (-1: from --num_epochs, --target_flops or "
      "--target_param_data_ratio)");
    v(num_epochs, "num_epochs", "Passes over the training data (-1 = off; --num_iterations wins when both are set)");
    v(target_flops, "target_flops", "Train for this many FLOPs (-1 = off)");
    v(target_param_data_ratio, "target_param_data_ratio", "Train on ratio * params tokens (Chinchilla: 20)");
  }
};

// The optimizer, its learning rates and schedule, and DDP's gradient buckets.
struct OptimOptions {
  ddp::OptimizerKind optimizer = ddp::OptimizerKind::Muon;
  // An int, not a bool: 0, 1 or 2 (see the help text).
  int zero = 0;
  double embedding_lr = 0.2;
  double unembedding_lr = 0.004;
  double matrix_lr = 0.02;
  double adamw_matrix_lr = 0.003;
  MuonPrecision muon_precision = MuonPrecision::BF16;
  double sgd_lr = 0.01;
  double sgd_momentum = 0.9;
  double weight_decay = 0.0;
  double grad_clip = 0.0;
  double init_lr_frac = 1.0;
  double warmup_ratio = 0.0;
  double warmdown_ratio = 0.2;
  double final_lr_frac = 0.0;
  // Bucket sizes are PyTorch DDP's defaults.
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  // nanochat's 2026 recipe (train/recipe_options.h: the defaults that differ by recipe).
  double scalar_lr = 0.5;
  int64_t warmup_steps = 0;

  template <typename V>
  void visit(V&& v) {
    v(optimizer, "optimizer", "muon: Muon for block matrices + AdamW for embeddings (nanochat); adamw: AdamW only; sgd: SGD with momentum only");
    v(zero, "zero", "Optimizer sharding: 0 replicated, 1 sharded state, 2 sharded state + gradients");
    v(embedding_lr, "embedding_lr", "AdamW lr of wte, times (model_dim/768)^-0.5");
    v(unembedding_lr, "unembedding_lr", "AdamW lr of lm_head, times (model_dim/768)^-0.5");
    v(matrix_lr, "matrix_lr", "Muon lr of the block matrices");
    v(adamw_matrix_lr, "adamw_matrix_lr", "AdamW lr of the block matrices with --optimizer adamw");
    v(muon_precision, "muon_precision", "Arithmetic of Muon's Newton-Schulz: bf16 (nanochat) or f32");
    v(sgd_lr, "sgd_lr", "SGD lr of every parameter with --optimizer sgd");
    v(sgd_momentum, "sgd_momentum", "SGD momentum with --optimizer sgd (torch.optim.SGD's rule)");
    v(weight_decay, "weight_decay", "Weight decay: AdamW's decoupled decay (classic recipe; default 0); with --recipe "
      "2026, Muon's cautious weight decay (default 0.28, scaled with depth and batch, cosine to 0 over the run)");
    v(grad_clip, "grad_clip", "Clip the gradients' global L2 norm to this before the update (0 = off; "
      "torch.nn.utils.clip_grad_norm_'s rule)");
    v(init_lr_frac, "init_lr_frac", "Every learning rate times this (nanochat's chat stages start from a fraction of "
      "base training's)");
    v(warmup_ratio, "warmup_ratio", "Fraction of iterations of linear LR warmup");
    v(warmdown_ratio, "warmdown_ratio", "Fraction of iterations of linear LR warmdown at the end");
    v(final_lr_frac, "final_lr_frac", "LR multiplier reached at the end of the warmdown");
    v(bucket_cap_mb, "bucket_cap_mb", "Gradient bucket size cap in MiB (PyTorch DDP: 25)");
    v(first_bucket_mb, "first_bucket_mb", "Size of the first gradient bucket in MiB (PyTorch DDP: 1)");
    v(scalar_lr, "scalar_lr", "Recipe 2026: AdamW lr of x0_lambdas, and of resid_lambdas times 0.01");
    v(warmup_steps, "warmup_steps", "Recipe 2026: steps of linear LR warmup (default 40; the classic recipe uses "
      "--warmup_ratio)");
  }
};

// The token shards and the order they are read in.
struct DataOptions {
  std::string data = "data";
  uint64_t seed = 42;
  bool shuffle = true;

  template <typename V>
  void visit(V&& v) {
    v(data, "data", "Dataset directory written by `nanoddp data prepare`");
    v(seed, "seed", "Seed of the initial weights and the data order");
    v(shuffle, "shuffle", "Shuffle training rows each epoch, seeded by seed and epoch (on by default; --shuffle=false "
      "reads them in order)");
  }
};

// What the run is, and for the chat stages (SFT and RL) conversations instead of token shards.
struct ChatOptions {
  RunStage stage = RunStage::Base;
  std::string conversations = "";
  std::string val_conversations = "";
  LossMask mask = LossMask::Assistant;

  template <typename V>
  void visit(V&& v) {
    v(stage, "stage", "What this run is, recorded in its checkpoints: base, sft or rl");
    v(conversations, "conversations", "Train on these JSONL conversation files (comma-separated) instead of --data's "
      "shards; --data still gives the tokenizer");
    v(val_conversations, "val_conversations", "Evaluate on these JSONL conversation files (comma-separated)");
    v(mask, "mask", "With --conversations: train on the assistant's tokens (assistant) or on every token (all)");
  }
};

// RL (nanoddp rl; nanochat's chat_rl): questions instead of token shards. Only `nanoddp rl`
// offers these flags (cli/commands.h).
struct RlOptions {
  std::string task = "";
  int64_t task_count = 1000;
  uint64_t task_seed = 1;
  int64_t num_samples = 16;
  int64_t examples_per_step = 16;
  int64_t max_new_tokens = 256;
  double temperature = 1.0;
  int64_t top_k = 50;
  // How a completion scores: auto, gsm8k, contains or exact (data/tasks.h).
  data::RewardRule reward = data::RewardRule::Auto;

  template <typename V>
  void visit(V&& v) {
    v(task, "task", "RL: a JSONL file of questions with answers (nanoddp task --format questions), or a bundled "
      "task's name");
    v(task_count, "task_count", "RL with a bundled task's name: how many problems");
    v(task_seed, "task_seed", "RL with a bundled task's name: the seed of the problems");
    v(num_samples, "num_samples", "RL: completions sampled per question (their mean reward is the baseline)");
    v(examples_per_step, "examples_per_step", "RL: questions per optimizer step over all ranks (a multiple of the "
      "world size)");
    v(max_new_tokens, "max_new_tokens", "RL: longest completion in tokens");
    v(temperature, "temperature", "RL: sampling temperature of the completions");
    v(top_k, "top_k", "RL: sample among the k most likely tokens (0 = all)");
    v(reward, "reward", "RL: how a completion scores: gsm8k (the answer after its last \"####\"), contains (the "
      "answer as a whole word or number), exact (the whole reply), auto (gsm8k for the bundled tasks and answers "
      "with \"####\", else contains)");
  }
};

// Where the run writes, when it saves, and how it starts: fresh, resumed or from other weights.
struct OutputOptions {
  std::string out = "out";
  int64_t save_every = -1;
  // Besides --save_every: a checkpoint at least this often, so that a killed run loses at most
  // about this much work (nanochat saves only at the end; schedulers kill jobs).
  double save_minutes = 30;
  int keep_last = 3;
  bool save_best = false;
  ResumeSpec resume;
  bool overwrite = false;
  bool allow_changed_data = false;
  std::string init_from = "";
  // sft's --load_optimizer (cli/cmd_sft.cpp, not a flag of train): the optimizer starts from the state
  // init_from's checkpoint saved (train/run_checkpoints.h).
  bool load_optimizer = false;
  int64_t stop_at = -1;

  template <typename V>
  void visit(V&& v) {
    v(out, "out", "Output directory: metrics.jsonl and checkpoints/");
    v(save_every, "save_every", "Save a checkpoint every N steps (-1 = only at the end)");
    v(save_minutes, "save_minutes", "Also save a checkpoint when this many minutes have passed since the last one "
      "(0 = off)");
    v(keep_last, "keep_last", "Checkpoints of this run kept on disk (older ones are deleted once a newer one is "
      "complete)");
    v(save_best, "save_best", "Also save the state after each evaluation with a new lowest val bpb and keep it as "
      "OUT/best (a link to its checkpoint, never deleted by --keep_last)");
    v(resume, "resume", "Resume: 'latest' (the newest complete checkpoint; an error if none), 'auto' (latest if any), "
      "or a step number");
    v(overwrite, "overwrite", "Start a fresh run even if --out holds another run: that run is moved aside to "
      "OUT.previous-<run id>, never deleted");
    v(allow_changed_data, "allow_changed_data", "Let a resumed run use another --seed or dataset than its checkpoint");
    v(init_from, "init_from", "Start a new run from these weights: a checkpoint, a run's --out folder or a "
      ".safetensors file (optimizer state and data position start fresh)");
    v(stop_at, "stop_at", "Save a checkpoint at this step and stop, without changing the schedule");
  }
};

// Validation loss and the samples printed during and after training.
struct EvalOptions {
  int64_t eval_every = 250;
  // nanochat's: 20 full batches of validation tokens.
  int64_t eval_tokens = 20 * 524288;
  int64_t sample_tokens = 0;
  int64_t sample_every = -1;
  std::string sample_prompt = "The";

  template <typename V>
  void visit(V&& v) {
    v(eval_every, "eval_every", "Evaluate validation loss and bits per byte every N steps (-1 = only at the end)");
    v(eval_tokens, "eval_tokens", "Validation tokens per evaluation (over all ranks)");
    v(sample_tokens, "sample_tokens", "At the end, rank 0 prints this many sampled tokens (0 = none)");
    v(sample_every, "sample_every", "Also sample every N steps (-1 = only at the end; needs --sample_tokens)");
    v(sample_prompt, "sample_prompt", "Prompt of the final sample");
  }
};

// Devices, process group, arithmetic and instrumentation.
struct RuntimeOptions {
  std::string device = "cpu";
  dist::BackendKind backend = dist::BackendKind::Auto;
  DtypeChoice dtype = DtypeChoice::Auto;
  // torch.cuda.amp.GradScaler's defaults: init_scale 2^16, growth_interval 2000.
  double loss_scale_init = 65536;
  int64_t loss_scale_growth_interval = 2000;
  // 300 s, the store's default wait (rendezvous/store.h).
  double timeout = 300;
  int threads = 0;
  double peak_flops = 0;
  bool trace = false;
  bool fp8 = false;

  template <typename V>
  void visit(V&& v) {
    v(device, "device", "cpu or cuda");
    v(backend, "backend", "Process group: auto, gloo, mpi, nccl");
    v(dtype, "dtype", "Activations and matmul inputs: fp32, bf16 (f32 accumulation, master weights, gradients and "
      "optimizer state), fp16 (the same, with dynamic loss scaling), or auto = fp32 on the CPU, bf16 on "
      "CUDA (also: float32, bfloat16, float16)");
    v(loss_scale_init, "loss_scale_init", "fp16: the initial loss scale (GradScaler's init_scale)");
    v(loss_scale_growth_interval, "loss_scale_growth_interval", "fp16: steps without an overflow before the loss "
      "scale doubles (an overflow halves it and skips the step)");
    v(timeout, "timeout", "Seconds before a collective or rendezvous that does not complete is an error");
    v(threads, "threads", "CPU threads per rank (0 = OMP_NUM_THREADS or all cores)");
    v(peak_flops, "peak_flops", "Peak FLOP/s of one device for MFU (0 = the GPU's datasheet figure; a CPU then reports no MFU)");
    v(fp8, "fp8", "nanochat's --fp8: the training GEMMs of the Linear layers nanochat converts (every block matrix and "
      "the LM head, widths of 128 or more) in FP8 with one scale per tensor (e4m3 inputs and weights, e5m2 "
      "gradients); evaluation stays bf16. Needs --device cuda on a GPU of compute capability 9.0+ (Hopper), bf16");
    v(trace, "trace", "Write OUT/trace.json: every rank's data, forward, backward, gradient collectives and optimizer "
      "on one time axis (Chrome trace format: open in ui.perfetto.dev or chrome://tracing)");
  }
};
// Each field is a flag and a JSON key named by its own name, flat (--depth, "depth"), whatever its
// section: checkpoints store options by it and restore() reads some back, so renaming a field breaks
// resuming older checkpoints.
struct TrainOptions {
  ModelOptions model;
  BatchOptions batch;
  OptimOptions optim;
  DataOptions input;
  ChatOptions chat;
  RlOptions rl;
  OutputOptions output;
  EvalOptions eval;
  RuntimeOptions runtime;

  // f(title, section) for each section, in the order --help shows them.
  template <typename F>
  void visit_sections(F&& f) {
    f("Model", model);
    f("Batch and length", batch);
    f("Optimization", optim);
    f("Data", input);
    f("Chat stages", chat);
    f("RL", rl);
    f("Output and checkpoints", output);
    f("Evaluation and sampling", eval);
    f("Runtime", runtime);
  }
  // v(field, name, help) for every field of every section.
  template <typename V>
  void visit(V&& v) {
    visit_sections([&](const char*, auto& section) { section.visit(v); });
  }
};

}  // namespace nanoddp::train
