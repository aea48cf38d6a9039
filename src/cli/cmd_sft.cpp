// nanoddp sft: nanochat's chat_sft (and mid-training with --mask all) as one command: fine-tunes a
// base or SFT checkpoint on conversations (data/conversation.h), packed into rows, strided by
// rank, with gradient accumulation and DDP / ZeRO exactly as `train`, under every launcher.
// The model (depth, widths, context, recipe) and the tokenizer are the source checkpoint's; a 2026
// source trains with nanochat's 2026 optimizer and chat_sft's settings (train/recipe_options.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "core/error.h"
#include "model/config.h"
#include "train/checkpoint.h"
#include "train/recipe_options.h"

namespace nanoddp::cli {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    NANODDP_CHECK(s.find(',') == std::string::npos, "conversation file names may not contain commas: {}", s);
    out += (out.empty() ? "" : ",") + s;
  }
  return out;
}

struct SftInputs {
  std::string source;
  std::vector<std::string> data, val_data;
  bool load_optimizer = true;
};

}  // namespace

// The model (depth, widths, context), the dataset (for its tokenizer) and the weights of `source`:
// what sft and rl start from, whatever shape flags were given, and the recipe of its model_config.
nlohmann::json take_source_model(train::TrainOptions& o, const std::string& source) {
  check_input_path("--source", source, PathKind::Directory);
  const std::string dir = train::resolve_checkpoint(source);
  const nlohmann::json meta = train::read_checkpoint_meta(dir);
  NANODDP_CHECK(meta.contains("data_dir"), "--source {}: its meta.json names no dataset (for the tokenizer); start "
                "from a checkpoint written by `nanoddp train`, `sft` or `rl`, or by `nanoddp import --data DIR`", dir);
  if (meta.contains("options")) {
    const auto& src = meta.at("options");
    o.model.depth = src.at("depth");
    o.model.aspect_ratio = src.at("aspect_ratio");
    o.model.head_dim = src.at("head_dim");
    o.model.n_kv_head = src.at("n_kv_head");
    o.model.max_seq_len = src.at("max_seq_len");
  } else {
    // `nanoddp import` (nanochat's weights, say): the shape flags that give its model_config back,
    // --depth layers of depth x --aspect_ratio wide, in heads of --head_dim.
    NANODDP_CHECK(meta.contains("model_config"), "--source {}: its meta.json has neither the options it was trained "
                  "with nor a model_config", dir);
    const model::GPTConfig c = model::GPTConfig::from_json(meta.at("model_config"));
    NANODDP_CHECK(c.n_layer > 0 && c.n_head > 0 && c.n_embd % c.n_layer == 0 && c.n_embd % c.n_head == 0, "--source "
                  "{}: a model {} wide with {} layers and {} heads is not one that --depth and --aspect_ratio make "
                  "(the width must be a multiple of the depth)", dir, c.n_embd, c.n_layer, c.n_head);
    o.model.depth = c.n_layer;
    o.model.aspect_ratio = c.n_embd / c.n_layer;
    o.model.head_dim = c.n_embd / c.n_head;
    o.model.n_kv_head = c.n_kv_head;
    o.model.max_seq_len = c.max_seq_len;
  }
  if (meta.contains("model_config")) {
    const model::GPTConfig c = model::GPTConfig::from_json(meta.at("model_config"));
    o.model.recipe = c.recipe;
    if (c.is_2026()) o.model.window_pattern = c.window_pattern;
  }
  o.input.data = meta.at("data_dir");
  o.output.init_from = dir;
  return meta.value("options", nlohmann::json::object());
}

void apply_source_recipe(train::TrainOptions& o, const CLI::App& cmd, const nlohmann::json& source_options) {
  train::apply_chat_recipe_defaults(o, o.model.recipe == model::Recipe::R2026, [&](const std::string& flag) {
    const CLI::Option* opt = cmd.get_option_no_throw("--" + flag);
    return opt != nullptr && opt->count() > 0;
  }, source_options);
}

void remove_flags(CLI::App& cmd, const std::vector<std::string>& flags) {
  for (const std::string& flag : flags) cmd.remove_option(cmd.get_option(flag));
}

void add_sft_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("sft", "Fine-tune a checkpoint on conversations (nanochat's chat_sft)");
  auto opts = std::make_shared<train::TrainOptions>();
  // SFT's defaults where they differ from base training's (nanochat's chat_sft): one epoch, the
  // learning rate decaying linearly to zero over it, one micro-step per step, an evaluation only at
  // the end; the run is recorded as stage sft.
  opts->chat.stage = train::RunStage::Sft;
  opts->batch.num_epochs = 1;
  opts->optim.warmdown_ratio = 1.0;
  opts->batch.total_batch_size = -1;
  opts->eval.eval_every = -1;
  add_option_flags(*cmd, *opts);
  // --data means conversation files here; the dataset (for the tokenizer) and the model's shape
  // are the source's (take_source_model), so their flags would be ignored: they are not offered.
  remove_flags(*cmd, {"--data", "--conversations", "--val_conversations", "--init_from", "--stage", "--depth",
                      "--max_seq_len", "--aspect_ratio", "--head_dim", "--n_kv_head", "--recipe", "--window_pattern"});
  remove_flags(*cmd, section_flags(train::RlOptions{}));
  auto in = std::make_shared<SftInputs>();
  cmd->add_option("--source", in->source, "The checkpoint to fine-tune: a checkpoint directory or a run's --out")
      ->required();
  cmd->add_option("--data", in->data, "JSONL conversation files to train on")->required()->expected(1, -1);
  cmd->add_option("--val_data,--val-data", in->val_data, "JSONL conversation files to evaluate on")->expected(1, -1);
  // nanochat's chat_sft (2026) warm-starts the optimizer from the base checkpoint; the classic chat_sft
  // started it fresh, so each recipe's default is its own.
  CLI::Option* load_optimizer = cmd->add_flag("--load_optimizer,--load-optimizer", in->load_optimizer,
                                              "Start the optimizer from the source checkpoint's state (momentum "
                                              "buffers and moments, not its learning rates); default: on for a "
                                              "2026 source (nanochat's chat_sft), off for a classic one");
  cmd->callback([cmd, opts, in, load_optimizer] {
    train::TrainOptions o = *opts;
    apply_source_recipe(o, *cmd, take_source_model(o, in->source));
    o.output.load_optimizer = load_optimizer->count() > 0 ? in->load_optimizer : o.model.recipe == model::Recipe::R2026;
    o.chat.conversations = join(in->data);
    o.chat.val_conversations = join(in->val_data);
    run_train_command(o);
  });
}

}  // namespace nanoddp::cli
