#include "data/prepare.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/bpe_tokenizer.h"
#include "data/dataset.h"
#include "data/documents.h"
#include "data/input_kind.h"
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

// Note [staged output]: a dataset is written into a staging directory and moved into OUT only once
// it is complete, so a failed or interrupted prepare leaves no partial dataset in OUT (which would
// make the retry demand --overwrite) and --overwrite keeps the old dataset until the new one exists.
//  - OUT missing: the staging directory is its sibling OUT.tmp-<pid>, and commit() renames it to
//    OUT. Parent directories created for it are removed again when the prepare fails.
//  - OUT an existing directory (it may hold other files, even the input): the staging directory is
//    OUT/.prepare.tmp-<pid>; commit() removes the old dataset's files and moves the new ones up.
// Either way the staging directory is on OUT's filesystem, so the final renames cannot fail for
// crossing devices. A SIGTERM, SIGINT or SIGHUP stops the prepare between batches of documents
// (prepare_dataset's `stop`), and the staging directory goes as on a failure. A prepare killed
// outright (kill -9, a crash) leaves its staging directory behind, with the pid in its name: the
// next prepare of the same OUT removes it (Note [stale staging]), and until then a prepare whose
// input holds it does not read it (Note [not text] in documents.cpp).
// Note [stale staging]: the staging directories of earlier prepares of the same OUT whose process is
// gone: OUT.tmp-<pid> beside OUT and OUT/.prepare.tmp-<pid>, named exactly so (digits only), whose
// pid no process has (kill(pid, 0) fails with ESRCH; a live one, even if it is another program that
// reused the pid, keeps its folder), and which hold nothing but a dataset's files (dataset.h's
// is_prepare_staging_dir), so that a user's folder that merely has such a name is never touched.
// The pid test is this machine's: two machines preparing one OUT on a shared file system is not
// supported (the second commit would fail anyway). Returns the folders removed.
std::vector<std::string> remove_stale_staging(const fs::path& out) {
  const std::string sibling_prefix = out.filename().string() + ".tmp-";
  std::vector<std::pair<fs::path, std::string>> places = {{out.parent_path(), sibling_prefix},
                                                          {out, ".prepare.tmp-"}};
  std::vector<std::string> removed;
  for (const auto& [dir, prefix] : places) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.starts_with(prefix) || name.size() == prefix.size()) continue;
      pid_t pid = 0;
      const char* first = name.data() + prefix.size();
      const char* last = name.data() + name.size();
      const auto [end, err] = std::from_chars(first, last, pid);
      if (err != std::errc() || end != last || pid <= 0 || pid == ::getpid()) continue;
      if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
      if (!it->is_directory(ec) || !is_prepare_staging_dir(it->path().string())) continue;
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      if (!rm) removed.push_back(it->path().string());
    }
  }
  return removed;
}

class StagedOutput {
 public:
  StagedOutput(const std::string& out, bool overwrite) : out_(out) {
    // Absolute and without a trailing '/', so that "." and "out/" have a name to suffix.
    path_ = fs::absolute(out).lexically_normal();
    if (!path_.has_filename()) path_ = path_.parent_path();
    NANODDP_CHECK(path_ != path_.root_path(), "--out {} is the root directory; choose a directory for the dataset",
                  out);
    std::error_code ec;
    const auto st = fs::status(path_, ec);
    NANODDP_CHECK(!ec || st.type() == fs::file_type::not_found, "cannot access --out {}: {}", out, ec.message());
    existed_ = fs::exists(st);
    if (existed_) {
      NANODDP_CHECK(fs::is_directory(st), "--out {} exists and is not a directory; remove it or choose another --out",
                    out);
      const auto found = dataset_files(path_);
      NANODDP_CHECK(found.empty() || overwrite, "{} already holds a dataset ({} and more); pass --overwrite to replace "
                    "it or choose another --out", out, found.front().filename().string());
      staging_ = path_ / fmt::format(".prepare.tmp-{}", ::getpid());
    } else {
      // The directories about to be created, from OUT's parent up, to remove on failure.
      // Stops at the first that exists or cannot be examined: those are not ours to remove.
      for (fs::path p = path_.parent_path(); p != p.root_path(); p = p.parent_path()) {
        if (fs::exists(p, ec) || ec) break;
        created_.push_back(p);
      }
      fs::create_directories(path_.parent_path(), ec);
      if (ec) {
        remove_created();
        NANODDP_FAIL("cannot create the directory of --out {}: {}; choose another --out", out, ec.message());
      }
      staging_ = path_.parent_path() / fmt::format("{}.tmp-{}", path_.filename().string(), ::getpid());
    }
    for (const auto& dir : remove_stale_staging(path_))
      log::warn("removed {}, the staging folder of a data prepare that was killed", dir);
    fs::remove_all(staging_, ec);  // a leftover of an earlier process with this pid
    if (!fs::create_directory(staging_, ec) || ec) {
      remove_created();
      NANODDP_FAIL("cannot write into {}: {} (creating {}); make it writable or choose another --out",
                   existed_ ? out : path_.parent_path().string(), ec ? ec.message() : "it exists", staging_.string());
    }
  }

  ~StagedOutput() {
    if (committed_) return;
    // Best effort, and never throwing: this runs while an error is on its way to the user.
    std::error_code ec;
    fs::remove_all(staging_, ec);
    remove_created();
  }

  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  // Where the dataset's files are written.
  std::string dir() const { return staging_.string(); }

  // Moves the finished dataset into OUT, replacing one that is already there.
  void commit() {
    std::error_code ec;
    if (!existed_) {
      fs::rename(staging_, path_, ec);
      NANODDP_CHECK(!ec, "cannot rename {} to --out {}: {} (did something else create {} meanwhile?)",
                    staging_.string(), out_, ec.message(), out_);
    } else {
      for (const auto& p : dataset_files(path_)) {
        fs::remove(p, ec);
        NANODDP_CHECK(!ec, "cannot remove {} of the old dataset: {}", p.string(), ec.message());
      }
      for (const auto& e : fs::directory_iterator(staging_)) {
        fs::rename(e.path(), path_ / e.path().filename(), ec);
        NANODDP_CHECK(!ec, "cannot move {} into --out {}: {}", e.path().string(), out_, ec.message());
      }
      fs::remove(staging_, ec);
    }
    committed_ = true;
  }

 private:
  // Innermost first; fs::remove() takes only empty directories, so nothing that appeared in them is lost.
  void remove_created() noexcept {
    std::error_code ec;
    for (const auto& p : created_)
      if (fs::is_directory(fs::symlink_status(p, ec))) fs::remove(p, ec);
  }

  // The files of a dataset (and of an interrupted write of one) in `dir`, and nothing else.
  static std::vector<fs::path> dataset_files(const fs::path& dir) {
    std::vector<fs::path> found;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (is_dataset_file_name(it->path().filename().string())) found.push_back(it->path());
    NANODDP_CHECK(!ec, "cannot list --out directory {}: {}", dir.string(), ec.message());
    return found;
  }

  std::string out_;                // as the user wrote it, for messages
  fs::path path_;                  // absolute
  fs::path staging_;
  std::vector<fs::path> created_;  // OUT's missing parents, innermost first
  bool existed_ = false;
  bool committed_ = false;
};

// The tokenizer spec meta.json records: built-in names as they are; a tokenizer file is written into
// `dir` (from memory: the file given may be the one in OUT that commit() replaces).
std::string record_tokenizer(const std::string& spec, const Tokenizer& tok, const std::string& dir) {
  if (is_builtin(spec)) return spec;
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok);
  NANODDP_ASSERT(bpe != nullptr, "tokenizer file {} did not load as a BPE", spec);
  const fs::path copy = fs::path(dir) / "tokenizer.tiktoken";
  write_tokenizer_file(copy.string(), bpe->vocab());
  return copy.filename().string();
}

// Note [validation split]: three ways to choose the validation documents, one per habit.
//  - --val_every K (the default, K = 20): document i goes to validation when i % K == K - 1, so a
//    corpus ordered by genre is represented in both splits.
//  - --val_input FILES: those documents are validation, all of --input is training (WikiText's
//    train/valid files).
//  - --val_fraction F: the last ceil(F * T) of the corpus's T tokens (BOS included) are validation
//    (nanoGPT's 90/10 cut, there by characters, here by tokens). The cut may fall inside a document;
//    validation then starts with a BOS of its own, and the cut document counts in both splits. The
//    corpus is written once as "all" shards, then copied into the two splits once T is known.
// With none of them given, one plain text file read whole (nanoGPT's input.txt: a single document
// that every K-th document would never split) gets --val_fraction 0.1, and the output says so;
// anything else gets --val_every 20.
const char* kAllPrefix = "all";

// Copies the "all" shards into train and val, cutting after train_count tokens; removes each "all"
// shard once copied. Returns the documents (BOS tokens) in each part.
std::pair<int64_t, int64_t> split_at(const std::vector<std::string>& all, int64_t train_count, int32_t bos,
                                     ShardSink& train, ShardSink& val) {
  std::vector<int32_t> buf;
  int64_t pos = 0, train_docs = 0, val_docs = 0;
  for (const auto& path : all) {
    {
      ShardReader shard(path);
      constexpr int64_t kChunk = 1 << 20;
      buf.resize(static_cast<size_t>(std::min(kChunk, shard.size())));
      for (int64_t begin = 0; begin < shard.size(); begin += kChunk) {
        const int64_t n = std::min(kChunk, shard.size() - begin);
        shard.read(begin, n, buf.data());
        // [0, k) of this chunk is training, [k, n) validation.
        const int64_t k = std::clamp<int64_t>(train_count - pos, 0, n);
        if (k < n && pos + k == train_count && buf[static_cast<size_t>(k)] != bos) {
          val.append(&bos, 1);  // validation starts inside a document
          val_docs++;
        }
        train.append(buf.data(), k);
        val.append(buf.data() + k, n - k);
        train_docs += std::count(buf.begin(), buf.begin() + k, bos);
        val_docs += std::count(buf.begin() + k, buf.begin() + n, bos);
        pos += n;
      }
    }
    std::error_code ec;
    fs::remove(path, ec);  // the staging directory goes with everything in it if this fails
  }
  return {train_docs, val_docs};
}

// True when the input is one plain text file read whole: one document (Note [validation split]).
bool is_one_text_document(const DocumentReader& reader, TextSplit split) {
  const auto& files = reader.files();
  return split == TextSplit::kFile && files.size() == 1 && !files[0].ends_with(".jsonl") &&
         input_kind(files[0]) == InputKind::kText;
}

void check_prepare_options(const PrepareOptions& opt) {
  NANODDP_CHECK(!opt.out.empty(), "--out is required: the directory to write the dataset into");
  // llm.c reads a shard's token count as a signed 32-bit int.
  NANODDP_CHECK(opt.shard_tokens > 0 && opt.shard_tokens <= INT32_MAX, "--shard_tokens {} must be in [1, 2^31)",
                opt.shard_tokens);
  NANODDP_CHECK(opt.val_input.empty() || opt.val_fraction == 0, "--val_input and --val_fraction both choose the "
                "validation text; give one of them");
  NANODDP_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1, "--val_fraction {} must be in (0, 1): the fraction "
                "of the tokens held out for validation, e.g. 0.1", opt.val_fraction);
  NANODDP_CHECK(!opt.val_input.empty() || opt.val_fraction != 0 || opt.val_every == 0 || opt.val_every >= 2,
                "--val_every {} must be at least 2 (every k-th document goes to validation); to hold out the end of "
                "the text use --val_fraction 0.1", opt.val_every);
  // 0 would read no text at all and then report an empty corpus.
  NANODDP_CHECK(opt.batch_bytes > 0, "--batch_bytes {} must be positive (bytes of text encoded at a time)",
                opt.batch_bytes);
  NANODDP_CHECK(opt.threads >= 0, "--threads {} must be 0 (all cores) or positive", opt.threads);
}

// How the validation documents are chosen, once Note [validation split]'s default is applied.
struct ValSplit {
  bool by_files = false, by_fraction = false;
  bool chosen = false;  // no flag chose: the default was applied
  int32_t every = 0;
  double fraction = 0;
};

ValSplit choose_val_split(const PrepareOptions& opt, const DocumentReader& reader, TextSplit text_split) {
  ValSplit v{!opt.val_input.empty(), opt.val_fraction != 0, false, opt.val_every, opt.val_fraction};
  v.chosen = !v.by_files && !v.by_fraction && v.every == 0;
  if (v.chosen && is_one_text_document(reader, text_split)) {
    v.fraction = 0.1;
    v.by_fraction = true;
  } else if (v.chosen) {
    v.every = 20;
  }
  return v;
}

// Tokenizes documents batch by batch into the shard sinks, counting into the stats.
struct Encoder {
  const PrepareOptions& opt;
  const Tokenizer& tok;
  const std::function<bool()>& stop;
  ShardSink& train;
  ShardSink& val;
  PrepareStats& st;
  std::vector<std::string> batch;
  std::vector<std::string_view> views;

  // Asked before each batch; once true, every loop ends and nothing is committed.
  bool stopping() { return st.stopped || (st.stopped = stop && stop()); }

  // Encodes every document of `docs`; the sink of the i-th non-empty one (counting from 0 over all
  // readers) is choose(i). Returns the number of non-empty documents.
  template <class Choose>
  int64_t encode(DocumentReader& docs, Choose&& choose) {
    const int32_t bos = tok.bos_id();
    int64_t index = 0;
    while (!stopping() && read_document_batch(docs, batch, opt.batch_bytes)) {
      views.clear();
      for (const auto& d : batch) {
        if (d.empty())
          st.empty_documents++;
        else
          views.push_back(d);
      }
      const auto ids = tok.encode_batch(views, opt.threads);
      for (size_t i = 0; i < views.size(); i++, index++) {
        ShardSink& sink = choose(index);
        sink.append(&bos, 1);
        sink.append(ids[i].data(), static_cast<int64_t>(ids[i].size()));
        if (&sink == &train) st.train_documents++;
        if (&sink == &val) st.val_documents++;
        st.chars += count_utf8_chars(views[i]);
        st.bytes += static_cast<int64_t>(views[i].size());
      }
    }
    return index;
  }
};

// Encodes the corpus into the train and val sinks as `split` says; returns the non-empty documents.
// Returns early, leaving the sinks unfinished, once `enc` is stopping.
int64_t encode_splits(const PrepareOptions& opt, const ValSplit& split, DocumentReader& reader,
                      std::optional<DocumentReader>& val_reader, ShardSink& all, Encoder& enc) {
  ShardSink& train = enc.train;
  ShardSink& val = enc.val;
  if (split.by_files) {
    int64_t documents = enc.encode(reader, [&](int64_t) -> ShardSink& { return train; });
    const int64_t held = enc.encode(*val_reader, [&](int64_t) -> ShardSink& { return val; });
    if (enc.stopping()) return documents;
    NANODDP_CHECK(documents > 0, "no training text: no non-empty documents in --input {}", fmt::join(opt.input, ", "));
    NANODDP_CHECK(held > 0, "no validation text: no non-empty documents in --val_input {}",
                  fmt::join(opt.val_input, ", "));
    return documents + held;
  }
  if (split.by_fraction) {
    const int64_t documents = enc.encode(reader, [&](int64_t) -> ShardSink& { return all; });
    if (enc.stopping()) return documents;
    all.finish();
    const int64_t total = all.tokens();
    const auto held = static_cast<int64_t>(std::ceil(split.fraction * static_cast<double>(total)));
    // ceil() holds out at least one token, so only the training split can end up empty.
    NANODDP_CHECK(documents == 0 || held < total, "--val_fraction {} of {} tokens leaves the training split empty; "
                  "choose a smaller fraction", split.fraction, total);
    std::tie(enc.st.train_documents, enc.st.val_documents) =
        split_at(all.paths(), total - held, enc.tok.bos_id(), train, val);
    return documents;
  }
  const int32_t every = split.every;
  return enc.encode(reader, [&](int64_t i) -> ShardSink& { return i % every == every - 1 ? val : train; });
}

// meta.json of the staged dataset, and the stats that repeat it.
void write_staged_meta(const PrepareOptions& opt, const ValSplit& split, const Tokenizer& tok,
                       const std::string& dir, const ShardSink& train, const ShardSink& val, PrepareStats& st) {
  DatasetMeta meta;
  meta.dir = dir;
  meta.tokenizer = record_tokenizer(opt.tokenizer, tok, dir);
  meta.vocab_size = tok.vocab_size();
  meta.bos_id = tok.bos_id();
  meta.token_width = tok.vocab_size() <= 65536 ? 2 : 4;
  meta.shard_tokens = opt.shard_tokens;
  meta.val_every = split.by_files || split.by_fraction ? 0 : split.every;
  meta.val_split = split.by_files      ? fmt::format("files: {}", fmt::join(opt.val_input, ", "))
                   : split.by_fraction ? fmt::format("the last {:g} of the tokens", split.fraction)
                                       : fmt::format("every {}th document", split.every);
  st.val_split = meta.val_split;
  st.end_held_out_by_default = split.chosen && split.by_fraction;
  meta.text_split = opt.text_split;
  meta.train_documents = st.train_documents;
  meta.val_documents = st.val_documents;
  meta.train_tokens = st.train_tokens = train.tokens();
  meta.val_tokens = st.val_tokens = val.tokens();
  meta.chars = st.chars;
  meta.bytes = st.bytes;
  meta.train_shards = train.paths();
  meta.val_shards = val.paths();
  write_dataset_meta(meta);
}

PrepareStats prepare_staged(const PrepareOptions& opt, const std::function<bool()>& stop) {
  check_prepare_options(opt);
  const TextSplit text_split = parse_text_split(opt.text_split);
  Stopwatch clock;
  auto tok = load_tokenizer(opt.tokenizer);
  // The dataset files in --out are not text: the dataset being replaced, or the one being written.
  DocumentReader reader(opt.input, text_split, {opt.out});
  const ValSplit split = choose_val_split(opt, reader, text_split);
  std::optional<DocumentReader> val_reader;
  if (split.by_files) val_reader.emplace(opt.val_input, text_split, std::vector<std::string>{opt.out});
  // Declared before the sinks, so it outlives them: a failure removes their .tmp files first, then it
  // removes the staging directory. See Note [staged output].
  StagedOutput staged(opt.out, opt.overwrite);

  ShardSink train(staged.dir(), "train", tok->vocab_size(), opt.shard_tokens);
  ShardSink val(staged.dir(), "val", tok->vocab_size(), opt.shard_tokens);
  ShardSink all(staged.dir(), kAllPrefix, tok->vocab_size(), opt.shard_tokens);
  PrepareStats st;
  Encoder enc{opt, *tok, stop, train, val, st, {}, {}};
  const int64_t documents = encode_splits(opt, split, reader, val_reader, all, enc);
  if (enc.stopping()) return st;
  train.finish();
  val.finish();
  NANODDP_CHECK(documents > 0, "empty corpus: no non-empty documents in {}", fmt::join(opt.input, ", "));
  NANODDP_CHECK(st.val_documents > 0 && st.train_documents > 0, "the corpus has {} document{} and --val_every {} puts "
                "every {}-th in validation, which leaves the {} split empty; hold out the end of the text with "
                "--val_fraction 0.1, cut text files at blank lines with --text_split paragraphs, give validation "
                "text with --val_input, or lower --val_every", documents, documents == 1 ? "" : "s", split.every,
                split.every, st.val_documents == 0 ? "validation" : "training");
  write_staged_meta(opt, split, *tok, staged.dir(), train, val, st);
  staged.commit();
  st.train_shards = train.paths().size();
  st.val_shards = val.paths().size();
  st.seconds = clock.seconds();
  return st;
}

}  // namespace

PrepareStats prepare_dataset(const PrepareOptions& opt, const std::function<bool()>& stop) {
  // The layers below throw filesystem_error for some failures (a rename, a directory listing); the
  // staging directory is gone by the time it arrives here.
  try {
    return prepare_staged(opt, stop);
  } catch (const fs::filesystem_error& e) {
    NANODDP_FAIL("data prepare --out {} failed: {}; check that the input is readable and that --out is a writable "
                 "directory (or a path one can be created at)", opt.out, e.what());
  }
}

}  // namespace nanoddp::data
