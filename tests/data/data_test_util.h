// Helpers for the data-layer tests: generated corpora, the npm reference data, and the node
// reference tool (tools/tiktoken_reference.mjs).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "test_util.h"

namespace nanoddp::testing {

// Empty when node and the npm packages are there, else what is missing (and how to install it).
std::string missing_node_reference();
std::string missing_npm_package(const std::string& package);

// English-like text: words of random syllables with a Zipf-like frequency, punctuation, numbers,
// newlines; `docs` documents of about `words` words each. Deterministic in `seed`.
std::vector<std::string> generated_documents(int docs, int words, uint64_t seed);

// Strings that stress the split patterns and BPE: digit runs, whitespace runs of every kind, mixed
// scripts, combining marks, emoji sequences, case-folding letters, punctuation runs. Valid UTF-8.
std::vector<std::string> adversarial_strings();
// Random valid UTF-8 from long-assigned blocks (Latin, Greek, Cyrillic, Arabic, Devanagari, Thai,
// Hangul, CJK, emoji, punctuation, combining marks), mixed with ASCII.
std::string random_unicode_text(size_t chars, uint64_t seed);
// Random bytes, about a third of them outside valid UTF-8.
std::string random_bytes(size_t n, uint64_t seed);

// A BPE vocabulary trained on generated_documents, with nanochat's pattern and specials.
data::BpeVocab small_trained_vocab(int vocab_size = 600);

// Documents as the node tool reads them: each a uint32 byte length, then the bytes.
void write_docs_file(const std::string& path, const std::vector<std::string>& docs);
// The node tool's output: for each document a uint32 count, then that many uint32 values.
std::vector<std::vector<uint32_t>> read_u32_arrays(const std::string& path);
// Runs `node tools/tiktoken_reference.mjs ARGS`; fails the test (returning false) on error.
bool run_node_reference(const std::string& args);

// The Brown corpus and nlp-corpus documents (npm packages must be installed).
std::vector<std::string> corpus_documents(const std::string& name);

}  // namespace nanoddp::testing
