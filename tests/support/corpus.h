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

// The data folder of a byte-level dataset of 200 documents (seed 11), made on the first call in a
// scratch folder named after `name` and this process's id, and shared by the later calls: ctest runs
// the test cases of one file as parallel processes, each with its own.
const std::string& process_byte_dataset(const std::string& name);

}  // namespace nanoddp::testing
