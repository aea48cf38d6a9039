#include "corpus.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/prepare.h"
#include "test_util.h"

namespace nanoddp::testing {

void write_corpus_jsonl(const std::string& path, int docs, uint64_t seed) {
  static const char* subjects[] = {"the cat", "a dog", "the old man", "my sister", "the river", "a small bird"};
  static const char* verbs[] = {"sat on", "looked at", "ran past", "sang to", "waited for", "found"};
  static const char* objects[] = {"the mat", "a red door", "the green hill", "an open window", "the quiet town"};
  Rng rng(seed);
  std::ofstream out(path);
  for (int d = 0; d < docs; d++) {
    std::string text;
    const int sentences = 5 + static_cast<int>(rng.next_u64() % 10);
    for (int s = 0; s < sentences; s++) {
      std::string sentence = std::string(subjects[rng.next_u64() % 6]) + " " + verbs[rng.next_u64() % 6] + " " +
                             objects[rng.next_u64() % 5] + ". ";
      sentence[0] = static_cast<char>(std::toupper(sentence[0]));
      text += sentence;
    }
    out << nlohmann::json{{"text", text}}.dump() << "\n";
  }
}

void make_byte_dataset(const std::string& dir, int docs, uint64_t seed) {
  std::filesystem::create_directories(dir);
  const std::string corpus = dir + "/corpus.jsonl";
  write_corpus_jsonl(corpus, docs, seed);
  data::PrepareOptions o;
  o.input = {corpus};
  o.out = dir + "/data";
  o.tokenizer = "bytes";
  o.val_every = 10;
  o.overwrite = true;
  data::prepare_dataset(o);
}

const std::string& process_byte_dataset(const std::string& name) {
  static ScratchDir dir(name + "_" + std::to_string(::getpid()));
  static const std::string path = [] {
    make_byte_dataset(dir.str(), 200, 11);
    return dir.str("data");
  }();
  return path;
}

}  // namespace nanoddp::testing
