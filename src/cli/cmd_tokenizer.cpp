// nanoddp tokenizer train | encode | decode.
#include <fmt/format.h>

#include <cerrno>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/option_flags.h"
#include "cli/path_checks.h"
#include "cli/stop_signal.h"
#include "core/error.h"
#include "core/files.h"
#include "data/bpe_trainer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"

namespace nanoddp::cli {

namespace {

// Checked: a full disk or a closed pipe must fail the command, not cut its output short silently.
void write_stdout(std::string_view bytes) {
  NANODDP_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size() && std::fflush(stdout) == 0,
                "cannot write to standard output: {}", std::strerror(errno));
}

void add_train(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("train", "Train a byte-level BPE (nanochat's split pattern and special tokens)");
  auto opts = std::make_shared<data::BpeTrainOptions>();
  auto out = std::make_shared<std::string>();
  add_option_flags(*cmd, *opts);
  // --input comes from BpeTrainOptions; --out is this command's own (the trainer writes no file).
  cmd->get_option("--input")->required();
  cmd->add_option("--out", *out, "tokenizer file to write (tiktoken format), plus FILE.json")->required();
  auto overwrite = std::make_shared<bool>(false);
  cmd->add_flag("--overwrite", *overwrite, "Replace --out (or FILE.json) even where it is a file of a dataset, "
                "checkpoint or run folder");
  cmd->callback([opts, out, overwrite] {
    // 0 means "no limit" or "all cores"; a negative value is a typo, not a wish for either.
    NANODDP_CHECK(opts->threads >= 0 && opts->max_chars >= 0 && opts->doc_cap >= 0, "--threads, --max_chars and "
                  "--doc_cap must be 0 or positive (got {}, {}, {})", opts->threads, opts->max_chars, opts->doc_cap);
    check_output_path("--out", *out, PathKind::File);
    if (!*overwrite) {
      check_not_owned("--out", *out, *out);
      check_not_owned("--out", *out, data::sidecar_path(*out));
    }
    data::BpeTrainStats st;
    // A signal stops it between batches of documents or merges, before anything is written.
    StopOnSignal signals;
    data::BpeVocab vocab = data::train_bpe(*opts, &st, [] { return StopOnSignal::received() != 0; });
    if (st.stopped)
      StopOnSignal::stop("tokenizer train", fmt::format("after {} documents; nothing was written to {}", st.documents,
                                                        *out));
    // As if loaded from the file: name records where a vocabulary came from (data/bpe_tokenizer.h).
    vocab.name = *out;
    data::write_tokenizer_file(*out, vocab);
    fmt::print("trained vocab {} ({} merges + 256 bytes + {} special tokens) on {} documents, {} bytes, {} distinct "
               "pieces\ncounting {:.2f} s, merging {:.2f} s\nwrote {} and {}\n",
               opts->vocab_size, vocab.tokens.size() - 256, vocab.specials.size(), st.documents, st.bytes,
               st.distinct_pieces, st.count_seconds, st.merge_seconds, *out, data::sidecar_path(*out));
  });
}

void add_encode(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("encode", "Print the token ids of a file's bytes, space-separated on one line");
  auto spec = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  auto allowed = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--tokenizer", *spec, "bytes | gpt2 | cl100k_base | o200k_base | a tokenizer file")->required();
  cmd->add_option("--input", *input, "file to encode")->required();
  // Off by default, so text that happens to contain "<|bos|>" cannot turn into a control token.
  cmd->add_option(flag_names("allowed_special"), *allowed,
                  "special tokens to recognise in the text ('all' for every one); by default none: they are "
                  "encoded as ordinary text");
  cmd->callback([spec, input, allowed] {
    auto tok = data::load_tokenizer(*spec);
    const std::string text = read_whole_file(*input, "--input");
    const bool all = std::find(allowed->begin(), allowed->end(), "all") != allowed->end();
    const auto ids = allowed->empty() ? tok->encode(text)
                                      : tok->encode_with_specials(text, all ? std::vector<std::string>{} : *allowed, all);
    fmt::memory_buffer buf;
    for (size_t i = 0; i < ids.size(); i++) {
      if (i > 0) buf.push_back(' ');
      fmt::format_to(std::back_inserter(buf), "{}", ids[i]);
    }
    buf.push_back('\n');
    write_stdout(std::string_view(buf.data(), buf.size()));
  });
}

void add_decode(CLI::App& parent) {
  auto* cmd = parent.add_subcommand("decode", "Write the bytes of whitespace-separated token ids to stdout");
  auto spec = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  cmd->add_option("--tokenizer", *spec, "bytes | gpt2 | cl100k_base | o200k_base | a tokenizer file")->required();
  cmd->add_option("--input", *input, "file of token ids")->required();
  cmd->callback([spec, input] {
    auto tok = data::load_tokenizer(*spec);
    const std::string text = read_whole_file(*input, "--input");
    std::vector<int32_t> ids;
    const int64_t vocab = tok->vocab_size();
    const char* p = text.data();
    const char* end = p + text.size();
    // Parsed by hand with from_chars: ids may be split by any whitespace, and an error names the bad word
    // and its position.
    for (;;) {
      while (p < end && std::isspace(static_cast<unsigned char>(*p))) p++;
      if (p == end) break;
      // int64_t, so that an id too large for int32 is reported as out of range, not as garbage.
      int64_t id = 0;
      auto [next, ec] = std::from_chars(p, end, id);
      NANODDP_CHECK(ec == std::errc() && (next == end || std::isspace(static_cast<unsigned char>(*next))),
                    "{}: '{}' (id number {}) is not a token id", *input,
                    std::string_view(p, std::min<size_t>(20, end - p)), ids.size() + 1);
      // Checked here for every tokenizer: the byte tokenizer's decode() would skip such an id silently.
      NANODDP_CHECK(id >= 0 && id < vocab, "{}: token id {} (id number {}) is out of range: tokenizer {} has "
                    "vocab_size {} (ids 0 to {}); were the ids made with another tokenizer?", *input, id,
                    ids.size() + 1, *spec, vocab, vocab - 1);
      ids.push_back(static_cast<int32_t>(id));
      p = next;
    }
    write_stdout(tok->decode(ids));
  });
}

}  // namespace

void add_tokenizer_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("tokenizer", "Train a BPE tokenizer; encode and decode with one");
  cmd->require_subcommand(1);
  add_train(*cmd);
  add_encode(*cmd);
  add_decode(*cmd);
}

}  // namespace nanoddp::cli
