#include "data/prepare.h"

#include <filesystem>
#include <regex>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/timer.h"
#include "data/bpe_tokenizer.h"
#include "data/dataset.h"
#include "data/documents.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"

namespace nanoddp::data {

namespace fs = std::filesystem;

namespace {

// One split's shards: tokens appended in order, cut into files of exactly shard_tokens tokens.
class ShardSink {
 public:
  ShardSink(std::string dir, std::string prefix, int64_t vocab_size, int64_t shard_tokens)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), vocab_size_(vocab_size), shard_tokens_(shard_tokens) {}

  void append(const int32_t* tokens, int64_t n) {
    while (n > 0) {
      if (!writer_) {
        paths_.push_back(fmt::format("{}/{}_{:06d}.bin", dir_, prefix_, paths_.size()));
        writer_ = std::make_unique<ShardWriter>(paths_.back(), vocab_size_);
      }
      const int64_t take = std::min(n, shard_tokens_ - writer_->size());
      writer_->append(tokens, take);
      tokens += take, n -= take, total_ += take;
      if (writer_->size() == shard_tokens_) finish();
    }
  }

  void finish() {
    if (!writer_) return;
    writer_->finish();
    writer_.reset();
  }

  int64_t tokens() const { return total_; }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::string dir_, prefix_;
  int64_t vocab_size_, shard_tokens_;
  std::unique_ptr<ShardWriter> writer_;  // the shard being filled, if any
  std::vector<std::string> paths_;
  int64_t total_ = 0;
};

int64_t count_utf8_chars(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;  // every byte but continuation bytes
  return n;
}

bool is_builtin(const std::string& spec) { return spec == "bytes" || is_npm_encoding(spec); }

// Makes `dir` ready for a new dataset: created if missing; a dataset already there is an error
// unless `overwrite`, which removes its files (and nothing else).
void prepare_output_dir(const std::string& dir, bool overwrite) {
  fs::create_directories(dir);
  const std::regex ours(R"((train|val)_[0-9]+\.bin(\.tmp)?|meta\.json(\.tmp)?|tokenizer\.tiktoken(\.json)?)");
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), ours)) found.push_back(e.path());
  if (found.empty()) return;
  NANODDP_CHECK(overwrite, "{} already holds a dataset ({} and more); pass --overwrite to replace it or choose "
                "another --out", dir, found.front().filename().string());
  for (const auto& p : found) fs::remove(p);
}

// The tokenizer spec meta.json records: built-in names as they are; a tokenizer file is written into
// `dir` (from memory: the file given may be the one --overwrite just removed from `dir`).
std::string record_tokenizer(const std::string& spec, const Tokenizer& tok, const std::string& dir) {
  if (is_builtin(spec)) return spec;
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok);
  NANODDP_ASSERT(bpe != nullptr, "tokenizer file {} did not load as a BPE", spec);
  const fs::path copy = fs::path(dir) / "tokenizer.tiktoken";
  write_tokenizer_file(copy.string(), bpe->vocab());
  return copy.filename().string();
}

}  // namespace

PrepareStats prepare_dataset(const PrepareOptions& opt) {
  NANODDP_CHECK(!opt.out.empty(), "--out is required: the directory to write the dataset into");
  NANODDP_CHECK(opt.shard_tokens > 0 && opt.shard_tokens <= UINT32_MAX, "--shard_tokens {} must be in [1, 2^32)",
                opt.shard_tokens);
  NANODDP_CHECK(opt.val_every >= 2, "--val_every {} must be at least 2 (every k-th document goes to validation)",
                opt.val_every);
  Stopwatch clock;
  auto tok = load_tokenizer(opt.tokenizer);
  DocumentReader reader(opt.input);
  prepare_output_dir(opt.out, opt.overwrite);

  ShardSink train(opt.out, "train", tok->vocab_size(), opt.shard_tokens);
  ShardSink val(opt.out, "val", tok->vocab_size(), opt.shard_tokens);
  const int32_t bos = tok->bos_id();
  PrepareStats st;
  int64_t index = 0;  // of the next non-empty document
  std::vector<std::string> batch;
  std::vector<std::string_view> views;
  while (read_document_batch(reader, batch, opt.batch_bytes)) {
    views.clear();
    for (const auto& d : batch) {
      if (d.empty())
        st.empty_documents++;
      else
        views.push_back(d);
    }
    const auto ids = tok->encode_batch(views, opt.threads);
    for (size_t i = 0; i < views.size(); i++, index++) {
      const bool is_val = index % opt.val_every == opt.val_every - 1;
      ShardSink& sink = is_val ? val : train;
      sink.append(&bos, 1);
      sink.append(ids[i].data(), static_cast<int64_t>(ids[i].size()));
      (is_val ? st.val_documents : st.train_documents)++;
      st.chars += count_utf8_chars(views[i]);
      st.bytes += static_cast<int64_t>(views[i].size());
    }
  }
  train.finish();
  val.finish();
  NANODDP_CHECK(index > 0, "empty corpus: no non-empty documents in {}", fmt::join(opt.input, ", "));
  NANODDP_CHECK(st.val_documents > 0 && st.train_documents > 0, "the corpus has {} documents and --val_every {} puts "
                "every {}-th in validation, which leaves the {} split empty; lower --val_every or add documents",
                index, opt.val_every, opt.val_every, st.val_documents == 0 ? "validation" : "training");

  DatasetMeta meta;
  meta.dir = opt.out;
  meta.tokenizer = record_tokenizer(opt.tokenizer, *tok, opt.out);
  meta.vocab_size = tok->vocab_size();
  meta.bos_id = bos;
  meta.token_width = tok->vocab_size() <= 65536 ? 2 : 4;
  meta.shard_tokens = opt.shard_tokens;
  meta.val_every = opt.val_every;
  meta.train_documents = st.train_documents;
  meta.val_documents = st.val_documents;
  meta.train_tokens = st.train_tokens = train.tokens();
  meta.val_tokens = st.val_tokens = val.tokens();
  meta.chars = st.chars;
  meta.bytes = st.bytes;
  meta.train_shards = train.paths();
  meta.val_shards = val.paths();
  write_dataset_meta(meta);
  st.train_shards = train.paths().size();
  st.val_shards = val.paths().size();
  st.seconds = clock.seconds();
  return st;
}

}  // namespace nanoddp::data
