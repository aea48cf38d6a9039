// Tokenizer files.
//
// Our own format is tiktoken's: one line per ordinary token, "base64(token bytes) SPACE rank", ranks
// 0..N-1 each exactly once. tiktoken's format has no place for the split pattern or the special
// tokens, so they go in a small JSON sidecar next to it, named FILE.json:
//   {"format": "nanoddp-bpe", "version": 1, "pattern": "...", "bos": "<|bos|>",
//    "special_tokens": {"<|bos|>": 4087, "<|user_start|>": 4088, ...}}
//
// tiktoken's own tables (gpt2, cl100k_base, o200k_base) are read from the npm package `tiktoken`
// that scripts/setup.sh installs into $NANODDP_CACHE/npm (never committed): encoders/NAME.json
// holds {"pat_str", "special_tokens", "bpe_ranks"}, where bpe_ranks is a compressed rank list:
// lines of "PREFIX FIRST_RANK base64 base64 ...", the tokens taking consecutive ranks from FIRST_RANK.
#pragma once

#include <string>

#include "data/bpe_tokenizer.h"

namespace nanoddp::data {

// Reads FILE and FILE.json. Throws nanoddp::Error naming the file and line of a garbage line, a
// duplicate rank or token, a missing rank, or a missing/corrupt sidecar.
BpeVocab read_tokenizer_file(const std::string& path);
// Writes FILE and FILE.json (each through a temporary file renamed into place).
void write_tokenizer_file(const std::string& path, const BpeVocab& vocab);
std::string sidecar_path(const std::string& path);
// Copies a tokenizer file and its sidecar (when it has one) to `dest` and sidecar_path(dest),
// replacing what is there.
void copy_tokenizer_file(const std::string& src, const std::string& dest);

// The names read_npm_encoding accepts.
bool is_npm_encoding(const std::string& name);
// tiktoken's table `name` from $NANODDP_CACHE/npm/node_modules/tiktoken/encoders/NAME.json; BOS is
// <|endoftext|>. Throws nanoddp::Error saying to run scripts/setup.sh when it is not installed.
BpeVocab read_npm_encoding(const std::string& name);

// $NANODDP_CACHE/npm/node_modules, $NANODDP_CACHE defaulting to ~/.cache/nanoddp.
std::string npm_modules_dir();
// npm_modules_dir()/package; throws nanoddp::Error with the fix when it is not installed.
std::string npm_package_dir(const std::string& package);

}  // namespace nanoddp::data
