// nanoddp export / import: checkpoints to and from safetensors files under nanochat's names.
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>

#include "cli/commands.h"
#include "cli/number_flags.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "core/error.h"
#include "data/tokenizer_file.h"
#include "train/checkpoint.h"
#include "train/model_io.h"

namespace nanoddp::cli {

void add_export_commands(CLI::App& root) {
  auto* exp = root.add_subcommand("export", "Write a checkpoint's weights as safetensors (nanochat's names, f32)");
  // "out": where `nanoddp train` writes by default (--out), so a plain `nanoddp export --out F` works
  // after a default run.
  auto checkpoint = std::make_shared<std::string>("out");
  auto file = std::make_shared<std::string>();
  exp->add_option("--checkpoint", *checkpoint, "Checkpoint directory, or a run's OUT directory (its newest)")
      ->capture_default_str();
  exp->add_option("--out", *file, "The .safetensors file to write")->required();
  auto overwrite = std::make_shared<bool>(false);
  exp->add_flag("--overwrite", *overwrite, "Replace --out even where it is a file of a checkpoint, run folder or "
                "dataset");
  exp->callback([checkpoint, file, overwrite] {
    check_output_path("--out", *file, PathKind::File);
    const std::string dir = resolve_checkpoint_flag("--checkpoint", *checkpoint);
    if (!*overwrite) {
      // FILE, and for a trained tokenizer its copy beside it (train/model_io.h's export_safetensors).
      check_not_owned("--out", *file, *file);
      const auto meta = train::read_checkpoint_meta(dir);
      const auto tok = meta.find("tokenizer");
      if (tok != meta.end() && tok->is_string() && tok->get<std::string>().ends_with(".tiktoken")) {
        const std::string copy = std::filesystem::path(*file).replace_extension(".tiktoken").string();
        check_not_owned("--out", *file, copy);
        check_not_owned("--out", *file, data::sidecar_path(copy));
      }
    }
    train::export_safetensors(dir, *file);
    fmt::print("exported {} to {}\n", dir, *file);
  });

  auto* imp = root.add_subcommand("import", "Make a checkpoint from a safetensors file with nanochat's names");
  // ImportOptions has no visit() (no help texts of its own), so its flags are bound one by one.
  auto opts = std::make_shared<train::ImportOptions>();
  imp->add_option("--input", opts->input, "The .safetensors file to read")->required();
  imp->add_option("--out", opts->out, "Run directory to create the checkpoint in")->required();
  imp->add_option("--data", opts->data, "Dataset directory whose tokenizer goes with these weights");
  add_number_option(*imp, flag_names("vocab_size"), opts->vocab_size,
                    "True vocabulary size (files without nanoddp metadata; default: --data's)");
  add_number_option(*imp, flag_names("n_head"), opts->n_head, "Attention heads (files without nanoddp metadata)");
  add_number_option(*imp, flag_names("max_seq_len"), opts->max_seq_len,
                    "Context length (files without nanoddp metadata)")->capture_default_str();
  imp->add_flag("--overwrite", opts->overwrite, "Move a run already in --out aside (OUT.previous-<id>), never deleting it");
  imp->callback([opts] {
    // Token ids are int32; sizes as train's --max_seq_len and model width allow.
    NANODDP_CHECK(opts->vocab_size >= 0 && opts->vocab_size <= INT32_MAX, "--vocab_size must be 0 (--data's) or "
                  "between 1 and {} (got {})", INT32_MAX, opts->vocab_size);
    NANODDP_CHECK(opts->n_head >= 0 && opts->n_head <= (1 << 20), "--n_head must be 0 (nanochat's rule) or between 1 "
                  "and {} (got {})", 1 << 20, opts->n_head);
    NANODDP_CHECK(opts->max_seq_len >= 1 && opts->max_seq_len <= (1 << 20), "--max_seq_len must be between 1 and {} "
                  "(got {})", 1 << 20, opts->max_seq_len);
    check_input_path("--input", opts->input, PathKind::File);
    check_output_path("--out", opts->out, PathKind::Directory);
    fmt::print("imported {} as {}\n", opts->input, train::import_safetensors(*opts));
  });
}

}  // namespace nanoddp::cli
