// Tokenizer benchmark: nanoddp's encoder against the npm `tiktoken` encoder (tiktoken's Rust core
// compiled to WASM, run by node) on the same text in the same run, and BPE training times.
//
//   build/bench/bench_tokenizer [--encodings cl100k_base,gpt2,o200k_base] [--repeat 3]
//
// Text: the Brown corpus (500 documents, 6.0 MB), encoded document by document (encode_ordinary in
// node; encode / encode_batch here). Each figure is the best of --repeat passes; every pass of ours
// starts from a freshly loaded tokenizer, so its piece cache starts empty. Training: vocabularies of
// 4096 and 32768 on the same corpus, all cores.
// "MB/s" is wall-clock throughput. "cpu s" is the CPU time the pass used over all threads of its
// process, and "MB/cpu-s" the throughput per CPU-second: on a machine shared with other work the
// wall clock depends on the load, CPU time much less; equal CPU time for 1 and N threads shows
// that the threads add no overhead.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "data/bpe_trainer.h"
#include "data/corpora.h"
#include "data/tokenizer.h"

namespace {

using namespace nanoddp;
namespace fs = std::filesystem;

struct Pass {
  double seconds = 1e30;      // wall clock
  double cpu_seconds = 0;     // CPU time of the process during that pass (all threads)
  int64_t tokens = 0;
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Best of `repeat` passes over all documents on `threads` threads.
Pass time_ours(const std::string& encoding, const std::vector<std::string>& docs, int threads, int repeat) {
  std::vector<std::string_view> views(docs.begin(), docs.end());
  Pass best;
  for (int r = 0; r < repeat; r++) {
    auto tok = data::load_tokenizer(encoding);  // fresh: an empty piece cache
    Stopwatch clock;
    const double cpu0 = process_cpu_seconds();
    int64_t tokens = 0;
    if (threads == 1) {
      for (auto v : views) tokens += static_cast<int64_t>(tok->encode(v).size());
    } else {
      for (auto& ids : tok->encode_batch(views, threads)) tokens += static_cast<int64_t>(ids.size());
    }
    const double wall = clock.seconds();
    if (wall < best.seconds) best = {wall, process_cpu_seconds() - cpu0, tokens};
  }
  return best;
}

// Runs the node reference's bench command; returns its JSON.
nlohmann::json time_node(const std::string& encoding, const std::string& docs_file, int repeat) {
  const std::string cmd = fmt::format("node {}/tools/tiktoken_reference.mjs bench --encoding {} --input {} --repeat {}",
                                      NANODDP_SOURCE_DIR, encoding, docs_file, repeat);
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (pipe != nullptr && (n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pipe != nullptr ? pclose(pipe) : -1;
  NANODDP_CHECK(status == 0, "the node reference failed ({}); is node installed and scripts/setup.sh run?", cmd);
  return nlohmann::json::parse(out);
}

void write_docs(const std::string& path, const std::vector<std::string>& docs) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& d : docs) {
    const uint32_t n = static_cast<uint32_t>(d.size());
    out.write(reinterpret_cast<const char*>(&n), 4);
    out << d;
  }
}

void bench_encoding(const std::string& encoding, const std::vector<std::string>& docs, const std::string& docs_file,
                    int repeat) {
  const int all = data::resolve_threads(0);
  const auto node = time_node(encoding, docs_file, repeat);
  const double bytes = node["bytes"].get<double>();
  const double node_mbs = node["mb_per_s"].get<double>();
  const double node_cpu_mbs = bytes / 1e6 / node["cpu_seconds"].get<double>();
  fmt::print("{:<12} {:<20} {:>7} {:>10} {:>8.2f} {:>7} {:>7.3f} {:>10.2f} {:>7}\n", encoding, "npm tiktoken (WASM)",
             1, node["tokens"].get<int64_t>(), node_mbs, "1.00x", node["cpu_seconds"].get<double>(), node_cpu_mbs,
             "1.00x");
  for (int threads : {1, all}) {
    const Pass p = time_ours(encoding, docs, threads, repeat);
    const double mbs = bytes / 1e6 / p.seconds;
    const double cpu_mbs = bytes / 1e6 / p.cpu_seconds;
    fmt::print("{:<12} {:<20} {:>7} {:>10} {:>8.2f} {:>7} {:>7.3f} {:>10.2f} {:>7}\n", encoding, "nanoddp", threads,
               p.tokens, mbs, fmt::format("{:.2f}x", mbs / node_mbs), p.cpu_seconds, cpu_mbs,
               fmt::format("{:.2f}x", cpu_mbs / node_cpu_mbs));
    NANODDP_CHECK(p.tokens == node["tokens"].get<int64_t>(), "token counts differ from the reference: {} vs {}",
                  p.tokens, node["tokens"].get<int64_t>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer benchmark: nanoddp vs npm tiktoken (WASM) on the Brown corpus; BPE training times"};
  std::vector<std::string> encodings = {"cl100k_base", "gpt2", "o200k_base"};
  int repeat = 3;
  std::vector<int> train_vocabs = {4096, 32768};
  app.add_option("--encodings", encodings, "tiktoken encodings to compare")->delimiter(',');
  app.add_option("--repeat", repeat, "passes per measurement (the best is reported)");
  app.add_option("--train_vocabs,--train-vocabs", train_vocabs, "vocabulary sizes to train (none: skip)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<std::string> docs;
    data::for_each_corpus_document("brown", "", [&](std::string&& d) { docs.push_back(std::move(d)); });
    const fs::path scratch = fs::path(NANODDP_BINARY_DIR) / "bench-scratch";
    fs::create_directories(scratch);
    const std::string docs_file = (scratch / "brown_docs.bin").string();
    write_docs(docs_file, docs);
    int64_t bytes = 0;
    for (auto& d : docs) bytes += static_cast<int64_t>(d.size());
    fmt::print("Brown corpus: {} documents, {} bytes; {} cores; best of {} passes\n\n", docs.size(), bytes,
               data::resolve_threads(0), repeat);
    fmt::print("{:<12} {:<20} {:>7} {:>10} {:>8} {:>7} {:>7} {:>10} {:>7}\n", "encoding", "encoder", "threads",
               "tokens", "MB/s", "vs npm", "cpu s", "MB/cpu-s", "vs npm");
    for (const auto& e : encodings) bench_encoding(e, docs, docs_file, repeat);

    if (!train_vocabs.empty()) {
      const std::string jsonl = (scratch / "brown.jsonl").string();
      data::write_corpus_jsonl("brown", "", jsonl);
      fmt::print("\nBPE training on the Brown corpus (nanochat's split pattern, {} threads)\n", data::resolve_threads(0));
      fmt::print("{:>8} {:>12} {:>12} {:>12} {:>16}\n", "vocab", "count (s)", "merge (s)", "total (s)", "distinct pieces");
      for (int v : train_vocabs) {
        data::BpeTrainOptions opt;
        opt.input = {jsonl};
        opt.vocab_size = v;
        data::BpeTrainStats st;
        Stopwatch clock;
        data::train_bpe(opt, &st);
        fmt::print("{:>8} {:>12.2f} {:>12.2f} {:>12.2f} {:>16}\n", v, st.count_seconds, st.merge_seconds,
                   clock.seconds(), st.distinct_pieces);
      }
    }
  } catch (const Error& e) {
    fmt::print(stderr, "bench_tokenizer: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
