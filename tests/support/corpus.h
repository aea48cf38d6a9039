// A small synthetic English-like corpus for training tests: sentences from a fixed grammar, so a
// model can learn it quickly and deterministically.
#pragma once

#include <cstdint>
#include <string>

namespace nanoddp::testing {

// Writes `docs` documents as JSONL ({"text": ...} per line) to `path`.
void write_corpus_jsonl(const std::string& path, int docs, uint64_t seed);

// Writes the corpus and prepares a byte-level dataset from it in `dir` (meta.json + shards).
void make_byte_dataset(const std::string& dir, int docs, uint64_t seed);

}  // namespace nanoddp::testing
