// Every subcommand of the nanoddp binary, driven with missing, garbage and wrong-kind inputs (a file
// where a directory belongs and the reverse) and with outputs it cannot write, must fail the way
// src/cli/main.cpp promises: exit status 1 (2 for a command line that does not parse), never 0 and
// never a signal (abort 134, segfault 139); a line on stderr that says "error"; and no *.tmp left
// behind. Cases that once failed one of these ways are the tests named after them.
//
// Unwritable outputs: chmod does not stop root (which CI runs as), so the paths that fail for anyone
// are used: /dev/null/x (a file as a parent directory), /proc/x and /sys/x (filesystems that refuse
// new entries). A chmod 0555 directory is added when the test does not run as root.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/safetensors.h"
#include "model/gpt.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Where no one can write, root included.
const std::vector<std::string> kUnwritableParents = {"/dev/null", "/proc", "/sys"};

using testing::Outcome;

class Cli : public ::testing::Test {
 protected:
  Cli() : scratch_(std::string("cli_errors_") + ::testing::UnitTest::GetInstance()->current_test_info()->name()) {
    fs::create_directories(scratch_.path() / "cache");
    write("file.txt", "not a directory\n");
    fs::create_directories(scratch_.path() / "empty_dir");
    // The test of a 0555 directory means something only where permissions bind.
    if (::geteuid() != 0) {
      fs::create_directories(scratch_.path() / "read_only");
      fs::permissions(scratch_.path() / "read_only", fs::perms(0555));
    }
  }
  ~Cli() override {
    std::error_code ec;  // so ScratchDir can remove it
    fs::permissions(scratch_.path() / "read_only", fs::perms(0755), ec);
  }

  std::string path(const std::string& child) const { return scratch_.str(child); }

  void write(const std::string& child, const std::string& text) const {
    std::ofstream(path(child), std::ios::binary) << text;
  }

  // Output paths no one can write under: one per unwritable parent, plus the 0555 directory when
  // not root.
  std::vector<std::string> unwritable(const std::string& name) const {
    std::vector<std::string> out;
    for (const auto& p : kUnwritableParents) out.push_back(p + "/nanoddp_cli_test_" + name);
    if (::geteuid() != 0) out.push_back(path("read_only/" + name));
    return out;
  }

  // Runs nanoddp with $NANODDP_CACHE at an empty directory, so that nothing depends on what npm
  // packages this machine has.
  Outcome nanoddp(const std::vector<std::string>& args) const {
    return testing::run_to_end(testing::nanoddp_argv(args), {"NANODDP_CACHE=" + path("cache")}, 60s);
  }

  // Scratch entries whose names say they are temporary (FILE.tmp, DIR.tmp-<pid>, .prepare.tmp-<pid>).
  std::vector<std::string> leftovers() const {
    std::vector<std::string> found;
    for (const auto& e : fs::recursive_directory_iterator(scratch_.path()))
      if (e.path().filename().string().find(".tmp") != std::string::npos) found.push_back(e.path().string());
    return found;
  }

  // The contract every failure keeps; `wants`: substrings the error must contain.
  Outcome expect_failure(const std::vector<std::string>& args, std::initializer_list<std::string> wants = {}) {
    std::string cmd = "nanoddp";
    for (const auto& a : args) cmd += " " + a;
    SCOPED_TRACE(cmd);
    const Outcome o = nanoddp(args);
    EXPECT_TRUE(o.status == 1 || o.status == 2) << "exit status " << o.status << "\nstderr:\n" << o.err;
    bool error_line = false;
    std::istringstream lines(o.err);
    for (std::string line; std::getline(lines, line);) error_line |= line.find("error") != std::string::npos;
    EXPECT_TRUE(error_line) << "no line of stderr says error:\n" << o.err;
    // What an exception that escaped main() or a failed assertion would print.
    EXPECT_EQ(o.err.find("terminate called"), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("internal error"), std::string::npos) << o.err;
    for (const auto& w : wants) EXPECT_NE(o.err.find(w), std::string::npos) << "wanted '" << w << "' in:\n" << o.err;
    EXPECT_EQ(leftovers(), std::vector<std::string>{});
    return o;
  }

  void expect_success(const std::vector<std::string>& args) {
    const Outcome o = nanoddp(args);
    ASSERT_EQ(o.status, 0) << o.err;
  }

  // A JSONL corpus of `docs` documents.
  std::string corpus(const std::string& name, int docs) const {
    std::ofstream f(path(name));
    for (int i = 0; i < docs; i++)
      f << nlohmann::json{{"text", "Document " + std::to_string(i) + " says the quick brown fox jumps again."}}.dump()
        << "\n";
    return path(name);
  }

  // A dataset prepared with the byte tokenizer (265 ids).
  std::string dataset(const std::string& name) {
    expect_success({"data", "prepare", "--input", corpus(name + ".jsonl", 10), "--out", path(name), "--val_every", "2"});
    return path(name);
  }

  // A tiny GPT as an exported file would hold it (vocabulary 265 padded to 320 rows); without
  // nanoddp's metadata when `bare`, as a file from nanochat would be.
  // `nan`: one weight of the last block's MLP is NaN, as in a damaged file.
  std::string model_file(const std::string& name, bool bare = false, bool nan = false) const {
    model::GPTConfig c;
    c.vocab_size = 265;
    c.n_layer = 1;
    c.n_embd = 64;
    c.n_head = 1;
    c.n_kv_head = 1;
    c.max_seq_len = 16;
    model::GPT gpt(c, Device::cpu());
    if (nan)
      for (auto& p : gpt.parameters())
        if (p.name == "transformer.h.0.mlp.c_proj.weight") p.data.data<float>()[7] = std::nanf("");
    SafetensorsWriter w;
    for (const auto& p : gpt.parameters()) w.add(p.name, p.data);
    if (!bare) {
      w.set_metadata("nanoddp.model_config", c.to_json().dump());
      w.set_metadata("nanoddp.tokenizer", "bytes");
    }
    w.write(path(name));
    return path(name);
  }

  // A checkpoint made by `nanoddp import`; returns the run directory.
  std::string checkpoint(const std::string& name, bool nan = false) {
    expect_success({"import", "--input", model_file(name + ".safetensors", false, nan), "--out", path(name)});
    return path(name);
  }

  // A trained tokenizer file (and its sidecar).
  std::string tokenizer(const std::string& name) {
    expect_success({"tokenizer", "train", "--input", corpus(name + ".jsonl", 20), "--vocab_size", "300", "--out",
                    path(name)});
    return path(name);
  }

  testing::ScratchDir scratch_;
};

TEST_F(Cli, UsageErrorsExitTwo) {
  // CLI11 reports these; each must still be "nanoddp: error: ..." and the usual status 2.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"no_such_command"},
           {"info", "--bogus"},
           {"train", "--bogus"},
           {"train", "--depth", "not_a_number"},
           {"sample", "--max_tokens", "x"},
           {"export"},
           {"import", "--out", path("x")},
           {"tokenizer"},
           {"tokenizer", "train", "--out", path("t")},
           {"tokenizer", "encode", "--tokenizer", "bytes"},
           {"tokenizer", "decode", "--input", path("file.txt")},
           {"data"},
           {"data", "prepare", "--out", path("d")},
           {"data", "prepare", "--input", path("file.txt"), "--out", path("d"), "--batch_bytes", "lots"},
           {"data", "corpus", "--out", path("c.jsonl")},
           // Was: read as 2^64 - 1.
           {"train", "--seed", "-1"},
           {"sample", "--checkpoint", path("x"), "--seed", "-3"},
           {"env", "--backend", "foo"},
       }) {
    const Outcome o = expect_failure(args, {"nanoddp: error: ", "--help` lists the"});
    EXPECT_EQ(o.status, 2) << o.err;
    // One line (was: CLI11's second line, "Run with --help for more information.").
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
  // A misspelt backend is named even where one process needs none (was: ignored, exit 0); like every
  // word-valued flag it is read where the command line is, with the words it may be.
  EXPECT_EQ(expect_failure({"train", "--backend", "glo", "--data", path("no_such_data")},
                           {"--backend", "must be auto, gloo, mpi or nccl (got 'glo')"}).status, 2);
  EXPECT_EQ(expect_failure({"train", "--optimizer", "adam"}, {"--optimizer", "must be muon, adamw or sgd (got 'adam')"})
                .status, 2);
  EXPECT_EQ(expect_failure({"sft", "--mask", "user"}, {"--mask", "must be assistant or all (got 'user')"}).status, 2);
  EXPECT_EQ(expect_failure({"train", "--resume", "5abc"}, {"--resume", "latest, auto or a step number"}).status, 2);
}

// Habits from argparse and torchrun: a typo gets the nearest command or flag, and a flag given twice
// takes its last value (scripts append overrides).
TEST_F(Cli, TyposGetDidYouMeanAndARepeatedFlagTakesTheLast) {
  EXPECT_EQ(expect_failure({"trian"}, {"unknown command 'trian' (did you mean 'train'?)"}).status, 2);
  EXPECT_EQ(expect_failure({"xyzzy"}, {"unknown command 'xyzzy'", "nanoddp --help"}).status, 2);
  EXPECT_EQ(expect_failure({"train", "--dpeth", "2"}, {"did you mean --depth (for --dpeth)?"}).status, 2);
  expect_failure({"train", "--device-batch_sise=3"}, {"did you mean --device_batch_size"});
  expect_failure({"sft", "--sorce", "x", "--data", "y"}, {"did you mean --source"});
  // The last --depth decides: 0 is refused by name, 2 passes validation and fails on the data.
  expect_failure({"train", "--depth", "2", "--depth", "0"}, {"--depth must be between 1"});
  expect_failure({"train", "--depth=0", "--depth=2", "--data", path("no_such_data")}, {"no_such_data"});
  // So do the flags a command adds by hand (was: "At Most 1 required but received 2").
  expect_failure({"sft", "--source", path("first"), "--source", path("second"), "--data", path("d.jsonl")},
                 {path("second")});
  // nanochat's spellings of the same settings are taken as ours.
  expect_failure({"train", "--device_type", "tpu"}, {"tpu"});
  expect_failure({"train", "--resume_from_step", "7", "--init_from", path("x")}, {"--init_from starts a new run"});
  // nanochat's flags without an equivalent say what to do instead.
  expect_failure({"train", "--core_metric_every", "2000"}, {"--core_metric_every is nanochat's", "nanoddp eval"});
  expect_failure({"train", "--model_tag=d20"}, {"--model_tag is nanochat's", "--out"});
}

TEST_F(Cli, Info) {
  expect_success({"info"});
  expect_failure({"info", "extra"});
}

TEST_F(Cli, DataPrepareBadInputs) {
  const std::string out = path("dataset");
  expect_failure({"data", "prepare", "--input", path("missing.txt"), "--out", out}, {"missing.txt"});
  expect_failure({"data", "prepare", "--input", path("empty_dir"), "--out", out}, {"empty_dir"});
  write("garbage.jsonl", "{\"text\": \"fine\"}\n{this is not json\n");
  expect_failure({"data", "prepare", "--input", path("garbage.jsonl"), "--out", out}, {"garbage.jsonl"});
  const std::string docs = corpus("docs.jsonl", 10);
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--tokenizer", path("missing.tiktoken")},
                 {"missing.tiktoken"});
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--tokenizer", path("file.txt")}, {"file.txt"});
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--tokenizer", path("empty_dir")});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, DataPrepareBadValues) {
  const std::string docs = corpus("docs.jsonl", 10), out = path("dataset");
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--shard_tokens", "0"}, {"--shard_tokens"});
  // llm.c reads a shard's token count as a signed 32-bit int.
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--shard_tokens", "2147483648"},
                 {"--shard_tokens", "2^31"});
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--val_every", "1"}, {"--val_every"});
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--threads", "-1"}, {"--threads"});
  expect_failure({"data", "prepare", "--input", docs, "--out", out, "--batch_bytes", "-5"}, {"--batch_bytes"});
  EXPECT_FALSE(fs::exists(out));
}

// Regression: --batch_bytes 0 read nothing and then blamed the corpus ("empty corpus").
TEST_F(Cli, DataPrepareZeroBatchBytesIsNamed) {
  const std::string err = expect_failure(
      {"data", "prepare", "--input", corpus("docs.jsonl", 10), "--out", path("d"), "--batch_bytes", "0"},
      {"--batch_bytes 0 must be positive"}).err;
  EXPECT_EQ(err.find("empty corpus"), std::string::npos) << err;
}

// Regression: an --out that is a regular file, or that cannot be created, threw filesystem_error
// out of main (abort).
TEST_F(Cli, DataPrepareUnwritableOut) {
  const std::string docs = corpus("docs.jsonl", 10);
  expect_failure({"data", "prepare", "--input", docs, "--out", path("file.txt")}, {"file.txt", "not a directory"});
  EXPECT_EQ(testing::read_file(path("file.txt")), "not a directory\n");
  for (const auto& out : unwritable("dataset")) expect_failure({"data", "prepare", "--input", docs, "--out", out}, {out});
}

// Regression: a prepare that failed after writing shards left train_000000.bin (or an empty
// directory) behind, and the retry then demanded --overwrite.
TEST_F(Cli, DataPrepareFailureLeavesNothing) {
  // One document cannot fill both splits: found only after the shards are written.
  const std::string one = corpus("one.jsonl", 1), out = path("new/deeper/dataset");
  expect_failure({"data", "prepare", "--input", one, "--out", out}, {"validation split empty"});
  EXPECT_FALSE(fs::exists(path("new"))) << "the directories created for --out stay behind";
  expect_success({"data", "prepare", "--input", corpus("docs.jsonl", 10), "--out", out, "--val_every", "2"});
  EXPECT_TRUE(fs::exists(out + "/meta.json"));

  // Into an existing dataset: the failed --overwrite keeps the old one whole, and nothing else.
  const std::string before = testing::read_file(out + "/meta.json");
  std::vector<std::string> names_before;
  for (const auto& e : fs::directory_iterator(out)) names_before.push_back(e.path().filename().string());
  expect_failure({"data", "prepare", "--input", one, "--out", out, "--overwrite"}, {"validation split empty"});
  EXPECT_EQ(testing::read_file(out + "/meta.json"), before);
  std::vector<std::string> names_after;
  for (const auto& e : fs::directory_iterator(out)) names_after.push_back(e.path().filename().string());
  std::sort(names_before.begin(), names_before.end());
  std::sort(names_after.begin(), names_after.end());
  EXPECT_EQ(names_after, names_before);
  // Without --overwrite the existing dataset is refused, before any work.
  expect_failure({"data", "prepare", "--input", one, "--out", out}, {"--overwrite"});
}

TEST_F(Cli, DataCorpus) {
  const std::string out = path("corpus.jsonl");
  // $NANODDP_CACHE is empty: the default package is not installed.
  expect_failure({"data", "corpus", "--name", "brown", "--out", out}, {"scripts/setup.sh"});
  expect_failure({"data", "corpus", "--name", "bogus", "--out", out, "--package_dir", path("empty_dir")}, {"bogus"});
  expect_failure({"data", "corpus", "--name", "brown", "--out", out, "--package_dir", path("empty_dir")});
  expect_failure({"data", "corpus", "--name", "nlp-corpus", "--out", out, "--package_dir", path("empty_dir")});
  expect_failure({"data", "corpus", "--name", "brown", "--out", out, "--package_dir", path("missing")}, {"missing"});
  expect_failure({"data", "corpus", "--name", "brown", "--out", out, "--package_dir", path("file.txt")});
  expect_failure({"data", "corpus", "--name", "brown", "--out", path("empty_dir"), "--package_dir", path("empty_dir")},
                 {"is a directory"});
  for (const auto& bad : unwritable("corpus.jsonl"))
    expect_failure({"data", "corpus", "--name", "brown", "--out", bad, "--package_dir", path("empty_dir")});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, TokenizerTrain) {
  const std::string docs = corpus("docs.jsonl", 20), out = path("tok.tiktoken");
  expect_failure({"tokenizer", "train", "--input", path("missing.txt"), "--out", out}, {"missing.txt"});
  expect_failure({"tokenizer", "train", "--input", docs, "--out", out, "--vocab_size", "10"}, {"--vocab_size"});
  expect_failure({"tokenizer", "train", "--input", docs, "--out", out, "--threads", "-2"}, {"--threads"});
  expect_failure({"tokenizer", "train", "--input", docs, "--out", out, "--vocab_size", "100000"}, {"--vocab_size"});
  expect_failure({"tokenizer", "train", "--input", docs, "--out", path("empty_dir"), "--vocab_size", "300"},
                 {"is a directory"});
  for (const auto& bad : unwritable("tok.tiktoken"))
    expect_failure({"tokenizer", "train", "--input", docs, "--out", bad, "--vocab_size", "300"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, TokenizerBadFiles) {
  const std::string tok = tokenizer("tok.tiktoken");
  write("text.txt", "hello");
  auto encode_with = [&](const std::string& t, std::initializer_list<std::string> wants) {
    expect_failure({"tokenizer", "encode", "--tokenizer", t, "--input", path("text.txt")}, wants);
  };
  encode_with(path("missing.tiktoken"), {"missing.tiktoken"});
  encode_with(path("empty_dir"), {"empty_dir"});
  encode_with(path("file.txt"), {"file.txt"});
  // Good ranks, then a sidecar that is not JSON, one without an integer id, one without a BOS.
  const std::string ranks = testing::read_file(tok), sidecar = testing::read_file(tok + ".json");
  write("bad_json.tiktoken", ranks);
  write("bad_json.tiktoken.json", "{\"format\": ");
  encode_with(path("bad_json.tiktoken"), {"bad_json.tiktoken.json"});
  auto side = nlohmann::json::parse(sidecar);
  side["special_tokens"]["<|bos|>"] = "first";
  write("bad_id.tiktoken", ranks);
  write("bad_id.tiktoken.json", side.dump());
  encode_with(path("bad_id.tiktoken"), {"bad_id.tiktoken.json", "<|bos|>"});
  // A rank far beyond the file's lines would size the table by it.
  write("huge_rank.tiktoken", ranks + "QUJD 2000000000\n");
  write("huge_rank.tiktoken.json", sidecar);
  encode_with(path("huge_rank.tiktoken"), {"huge_rank.tiktoken", "2000000000"});
}

// Regression: a special-token id of 99,999,999 was accepted, and a later command asked for 49 GiB.
TEST_F(Cli, TokenizerHugeSpecialIdIsRefused) {
  const std::string tok = tokenizer("tok.tiktoken");
  auto side = nlohmann::json::parse(testing::read_file(tok + ".json"));
  side["special_tokens"]["<|bos|>"] = 99'999'999;
  write("huge.tiktoken", testing::read_file(tok));
  write("huge.tiktoken.json", side.dump());
  write("text.txt", "hello");
  expect_failure({"tokenizer", "encode", "--tokenizer", path("huge.tiktoken"), "--input", path("text.txt")},
                 {"99999999", "<|bos|>"});
  expect_failure({"data", "prepare", "--input", corpus("docs.jsonl", 10), "--out", path("d"), "--tokenizer",
                  path("huge.tiktoken")},
                 {"99999999"});
  EXPECT_FALSE(fs::exists(path("d")));
}

TEST_F(Cli, TokenizerEncodeDecodeBadInputs) {
  for (const char* sub : {"encode", "decode"}) {
    expect_failure({"tokenizer", sub, "--tokenizer", "bytes", "--input", path("missing.txt")}, {"missing.txt"});
    expect_failure({"tokenizer", sub, "--tokenizer", "bytes", "--input", path("empty_dir")}, {"is a directory"});
    expect_failure({"tokenizer", sub, "--tokenizer", "no_such_tokenizer", "--input", path("file.txt")},
                   {"no_such_tokenizer"});
  }
  write("words.txt", "1 2 three");
  expect_failure({"tokenizer", "decode", "--tokenizer", "bytes", "--input", path("words.txt")}, {"three"});
}

// Regression: decode dropped ids outside the vocabulary without a word.
TEST_F(Cli, TokenizerDecodeOutOfRangeIdIsNamed) {
  for (const char* id : {"300", "-1", "99999999999"}) {
    write("ids.txt", std::string("72 105 ") + id + "\n");
    expect_failure({"tokenizer", "decode", "--tokenizer", "bytes", "--input", path("ids.txt")},
                   {std::string("token id ") + id, "vocab_size 265"});
  }
  // A trained tokenizer has its own bound.
  const std::string tok = tokenizer("tok.tiktoken");
  write("ids.txt", "72 300\n");
  expect_failure({"tokenizer", "decode", "--tokenizer", tok, "--input", path("ids.txt")},
                 {"token id 300", "vocab_size 300"});
}

TEST_F(Cli, ExportBadCheckpoints) {
  const std::string out = path("model.safetensors");
  expect_failure({"export", "--checkpoint", path("missing"), "--out", out}, {"missing"});
  expect_failure({"export", "--checkpoint", path("file.txt"), "--out", out}, {"file.txt"});
  expect_failure({"export", "--checkpoint", path("empty_dir"), "--out", out}, {"empty_dir"});
  // Complete-looking checkpoints (DONE present) with broken contents.
  const std::string good = checkpoint("run");
  const std::string ckpt = good + "/checkpoints/step_000000";
  auto broken = [&](const std::string& name, const std::string& file, const std::string& text) {
    fs::copy(ckpt, path(name), fs::copy_options::recursive);
    write(name + "/" + file, text);
    return path(name);
  };
  expect_failure({"export", "--checkpoint", broken("bad_meta", "meta.json", "{\"step\": "), "--out", out},
                 {"meta.json"});
  expect_failure({"export", "--checkpoint", broken("no_config", "meta.json", "{\"step\": 0}"), "--out", out},
                 {"model_config"});
  expect_failure({"export", "--checkpoint", broken("bad_weights", "model.safetensors", "garbage"), "--out", out},
                 {"model.safetensors"});
  EXPECT_FALSE(fs::exists(out));
}

// Regression: export onto an existing directory threw out of main and left DIR.tmp behind.
TEST_F(Cli, ExportOntoDirectoryIsAnError) {
  const std::string run = checkpoint("run");
  expect_failure({"export", "--checkpoint", run, "--out", path("empty_dir")}, {"empty_dir", "is a directory"});
  EXPECT_TRUE(fs::is_directory(path("empty_dir")));
  for (const auto& bad : unwritable("model.safetensors"))
    expect_failure({"export", "--checkpoint", run, "--out", bad}, {bad});
  // And it still works, replacing an existing file.
  write("model.safetensors", "old");
  expect_success({"export", "--checkpoint", run, "--out", path("model.safetensors")});
  EXPECT_NO_THROW(SafetensorsFile f(path("model.safetensors")));
}

TEST_F(Cli, ImportBadFiles) {
  const std::string out = path("imported");
  expect_failure({"import", "--input", path("missing.safetensors"), "--out", out}, {"missing.safetensors"});
  expect_failure({"import", "--input", path("empty_dir"), "--out", out}, {"empty_dir"});
  expect_failure({"import", "--input", path("file.txt"), "--out", out}, {"file.txt"});
  // A header length past the end of the file; a header that is not JSON.
  write("truncated.safetensors", std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10));
  expect_failure({"import", "--input", path("truncated.safetensors"), "--out", out}, {"truncated.safetensors"});
  write("bad_header.safetensors", std::string("\x04\x00\x00\x00\x00\x00\x00\x00{no}", 12));
  expect_failure({"import", "--input", path("bad_header.safetensors"), "--out", out}, {"bad_header.safetensors"});
  // A valid safetensors file that is not a GPT.
  {
    SafetensorsWriter w;
    w.add("transformer.wte.weight", Tensor::zeros({320 * 64}, DType::F32));  // 1-d: indexing it must not abort
    w.write(path("flat.safetensors"));
  }
  expect_failure({"import", "--input", path("flat.safetensors"), "--out", out, "--vocab_size", "265"},
                 {"transformer.wte.weight"});
  // Metadata that is not JSON, or that describes another model.
  auto with_metadata = [&](const std::string& name, const std::string& config) {
    SafetensorsFile f(model_file("source.safetensors"));
    SafetensorsWriter w;
    for (const auto& n : f.names()) w.add(n, f.read(n));
    w.set_metadata("nanoddp.model_config", config);
    w.write(path(name));
    return path(name);
  };
  expect_failure({"import", "--input", with_metadata("bad_meta.safetensors", "{oops"), "--out", out},
                 {"nanoddp.model_config"});
  auto config = nlohmann::json::parse(SafetensorsFile(model_file("source.safetensors")).metadata().at(
      "nanoddp.model_config"));
  config["n_embd"] = 4096;
  config["n_head"] = 32;
  config["n_kv_head"] = 32;
  config["n_layer"] = 1000;
  expect_failure({"import", "--input", with_metadata("big.safetensors", config.dump()), "--out", out},
                 {"model_dim 4096"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cli, ImportBareFileNeedsTheRightShape) {
  const std::string bare = model_file("bare.safetensors", /*bare=*/true), out = path("imported");
  expect_failure({"import", "--input", bare, "--out", out}, {"--vocab_size"});
  expect_failure({"import", "--input", bare, "--out", out, "--vocab_size", "100"}, {"vocab_size 100"});
  expect_failure({"import", "--input", bare, "--out", out, "--vocab_size", "265", "--n_head", "3"}, {"3 heads"});
  expect_failure({"import", "--input", bare, "--out", out, "--vocab_size", "-4"}, {"--vocab_size"});
  expect_failure({"import", "--input", bare, "--out", out, "--vocab_size", "265", "--max_seq_len", "0"},
                 {"max_seq_len"});
  EXPECT_FALSE(fs::exists(out));
  // With the right numbers it imports.
  expect_success({"import", "--input", bare, "--out", out, "--vocab_size", "265", "--n_head", "1", "--max_seq_len",
                  "16"});
  // Importing again into it would replace its step 0 (was: silently, exit 0): refused, or with
  // --overwrite the first import is moved aside, never deleted.
  const std::vector<std::string> again = {"import", "--input", model_file("other.safetensors"), "--out", out};
  expect_failure(again, {"holds", "--overwrite"});
  auto overwrite = again;
  overwrite.push_back("--overwrite");
  expect_success(overwrite);
  bool moved = false;
  for (const auto& e : fs::directory_iterator(path("")))
    moved |= e.path().filename().string().starts_with("imported.previous-") &&
             fs::exists(e.path() / "checkpoints/step_000000/DONE");
  EXPECT_TRUE(moved) << "the first import was not kept";
}

// Regression: an --out that is a regular file or cannot be created threw out of main.
TEST_F(Cli, ImportUnwritableOut) {
  const std::string input = model_file("model.safetensors");
  expect_failure({"import", "--input", input, "--out", path("file.txt")}, {"file.txt", "not a directory"});
  EXPECT_EQ(testing::read_file(path("file.txt")), "not a directory\n");
  for (const auto& bad : unwritable("imported")) expect_failure({"import", "--input", input, "--out", bad}, {bad});
}

// Regression: import --data with a dataset of another vocabulary wrote a checkpoint that failed later.
TEST_F(Cli, ImportRefusesDatasetOfAnotherVocabulary) {
  const std::string tok = tokenizer("tok.tiktoken");
  const std::string other = path("other_data");
  expect_success({"data", "prepare", "--input", corpus("docs.jsonl", 10), "--out", other, "--tokenizer", tok,
                  "--val_every", "2"});
  const std::string input = model_file("model.safetensors"), out = path("imported");
  expect_failure({"import", "--input", input, "--out", out, "--data", other}, {"300", "265", "other_data"});
  expect_failure({"import", "--input", input, "--out", out, "--data", path("missing")}, {"missing"});
  expect_failure({"import", "--input", input, "--out", out, "--data", path("file.txt")}, {"file.txt"});
  EXPECT_FALSE(fs::exists(out));
  // The matching dataset is accepted, and supplies a bare file's vocabulary.
  const std::string same = dataset("same_data");
  expect_success({"import", "--input", input, "--out", out, "--data", same});
  expect_success({"import", "--input", model_file("bare.safetensors", true), "--out", path("imported_bare"), "--data",
                  same, "--max_seq_len", "16"});
  // An imported model (nanochat's weights, say) is fine-tuned with sft: its shape flags come from
  // its model_config. Was: "its meta.json lacks the dataset and options".
  const std::string convs = path("convs.jsonl");
  {
    std::ofstream out(convs);
    for (int i = 0; i < 40; i++) out << R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])"
                                     << "\n";
  }
  expect_success({"sft", "--source", out, "--data", convs, "--out", path("sft"), "--device_batch_size", "2",
                  "--num_iterations", "2", "--threads", "1"});
  EXPECT_TRUE(fs::exists(path("sft/checkpoints/step_000002/DONE")));
  // Without the dataset at import, the message says how to give it.
  expect_failure({"sft", "--source", checkpoint("no_data"), "--data", convs, "--out", path("sft2")},
                 {"import --data"});
}

// Regression: an SFT validation split whose evaluated windows hold no assistant token (only the
// replies are scored) reported val loss and bpb 0.0000 as the best and exited 0. The reply "ok"
// comes after 40 bytes of question, past the 2 windows of 16 tokens that --eval_tokens 32 reads.
TEST_F(Cli, SftEvaluationThatScoresNoTokensIsAnError) {
  const std::string run = path("sft_base");
  expect_success({"import", "--input", model_file("sft_base.safetensors"), "--out", run, "--data",
                  dataset("sft_base_data")});
  const std::string convs = path("sft_train.jsonl"), val = path("sft_val.jsonl");
  {
    const std::string short_one = R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])";
    std::ofstream train(convs), v(val);
    for (int i = 0; i < 8; i++) train << short_one << "\n";
    // The validation split in its order (it is not shuffled): a long question first, so that the
    // first two windows of 16 tokens hold only its masked tokens, then replies that are scored.
    v << nlohmann::json::array({{{"role", "user"}, {"content", std::string(40, 'a')}},
                                {{"role", "assistant"}, {"content", "ok"}}})
             .dump()
      << "\n";
    for (int i = 0; i < 3; i++) v << short_one << "\n";
  }
  const std::vector<std::string> sft = {"sft", "--source", run, "--data", convs, "--val_data", val,
                                        "--device_batch_size", "1", "--num_iterations", "2", "--eval_every", "1",
                                        "--threads", "1"};
  std::vector<std::string> masked = sft;
  masked.insert(masked.end(), {"--eval_tokens", "32", "--out", path("sft_masked")});
  expect_failure(masked, {"the evaluation scored no tokens", "--eval_tokens"});
  // Over the whole split (the default --eval_tokens) the replies are scored, and the run succeeds.
  std::vector<std::string> whole = sft;
  whole.insert(whole.end(), {"--out", path("sft_whole")});
  expect_success(whole);
}

// Regression: import wrote a meta.json without world_size, which `train --resume` then reported as
// "json key 'world_size' not found". It is a model-only checkpoint and now says so.
// The items are made in memory: a count no memory holds is a range error, not "std::length_error
// ... a bug" (eval --count and rl --task_count take the same path).
TEST_F(Cli, Task) {
  expect_failure({"task", "--name", "arithmetic", "--count", "100000000000000000", "--out", path("t.jsonl")},
                 {"--count must be between 1 and 16777216"});
  expect_failure({"task", "--name", "arithmetic", "--count", "0", "--out", path("t.jsonl")}, {"--count"});
  expect_success({"task", "--name", "arithmetic", "--count", "5", "--out", path("t.jsonl")});
}

TEST_F(Cli, ImportWritesCompleteModelOnlyMeta) {
  const std::string run = checkpoint("run");
  const auto meta = nlohmann::json::parse(testing::read_file(run + "/checkpoints/step_000000/meta.json"));
  ASSERT_TRUE(meta.contains("world_size")) << meta.dump(2);
  EXPECT_TRUE(meta["world_size"].is_null()) << meta.dump(2);
  EXPECT_EQ(meta.value("model_only", false), true) << meta.dump(2);
  EXPECT_EQ(meta.value("step", -1), 0);
  EXPECT_TRUE(meta.contains("model_config"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_000000/DONE"));
}

TEST_F(Cli, Sample) {
  expect_failure({"sample", "--checkpoint", path("missing")}, {"missing"});
  expect_failure({"sample", "--checkpoint", path("file.txt")}, {"file.txt"});
  expect_failure({"sample", "--checkpoint", path("empty_dir")}, {"empty_dir"});
  const std::string run = checkpoint("run");
  expect_failure({"sample", "--checkpoint", run, "--device", "toaster"}, {"toaster"});
  expect_failure({"sample", "--checkpoint", run, "--data", path("missing")}, {"missing"});
  // A dataset of another tokenizer (a trained table, where the run used bytes) is refused by name.
  // Was: an id outside the model's vocabulary at the first token, or text decoded with the wrong
  // table and exit 0.
  const std::string other = path("sample_other_data");
  expect_success({"data", "prepare", "--input", corpus("sample_docs.jsonl", 10), "--out", other, "--tokenizer",
                  tokenizer("sample_tok.tiktoken"), "--val_every", "2"});
  expect_failure({"sample", "--checkpoint", run, "--data", other}, {"sample_other_data", "was tokenized with"});
  expect_failure({"sample", "--checkpoint", run, "--dtype", "fp8"},
                 {"--dtype: must be auto, fp32, bf16 or fp16 (got 'fp8')"});
  // A prompt of 20 bytes with its BOS fills the context of 16 (was: the prompt echoed, exit 0).
  expect_failure({"sample", "--checkpoint", run, "--prompt", std::string(20, 'a')}, {"--prompt is 21 tokens",
                                                                                     "context of 16"});
  // The same for chat's one message (was: "the last message is ... tokens", not naming the flag).
  expect_failure({"chat", "--checkpoint", run, "--prompt", std::string(20, 'a')},
                 {"--prompt: the last message is", "longer than the model's context of 16"});
  expect_failure({"chat", "--checkpoint", run, "--prompt", "hi", "--dtype", "half"}, {"--dtype: must be"});
  expect_failure({"eval", "--checkpoint", run, "--task", "arithmetic", "--dtype", "int8"}, {"--dtype: must be"});
  // A question that fills the model's context (16 tokens) has no room for an answer. Was: scored as
  // wrong, accuracy 0 and exit 0.
  expect_failure({"eval", "--checkpoint", run, "--task", "arithmetic", "--count", "2"},
                 {"not shorter than the model's context of 16"});
  // sft takes the model's shape from --source: the flags that would be ignored are not offered.
  expect_failure({"sft", "--source", run, "--data", path("missing.jsonl"), "--depth", "3"}, {"--depth"});
  // A GPU asked for where there is none: the flag and what to check, not a CUDA runtime message.
  if (cuda_device_count() == 0) {
    expect_failure({"sample", "--checkpoint", run, "--device", "cuda"},
                   {"--device cuda but no GPU is visible", "CUDA_VISIBLE_DEVICES", "--device cpu"});
    expect_failure({"sample", "--checkpoint", run, "--device", "cuda:1"},
                   {"--device cuda:1 but no GPU is visible", "CUDA_VISIBLE_DEVICES", "--device cpu"});
  }
  // A GPU index past the visible ones: how many there are, not a CUDA runtime message.
  const std::string past = "cuda:" + std::to_string(cuda_device_count() + 3);
  expect_failure({"sample", "--checkpoint", run, "--device", past},
                 {"--device " + past + " but", "CUDA_VISIBLE_DEVICES"});
}

// A checkpoint with one NaN weight is refused by every command that samples from it, naming the file
// and the tensor, as resume refuses it. Was: sample and chat printed NUL bytes and exited 0.
TEST_F(Cli, InferenceRefusesNonFiniteWeights) {
  const std::string run = checkpoint("nan_run", /*nan=*/true);
  const std::vector<std::string> wants = {"model.safetensors: parameter transformer.h.0.mlp.c_proj.weight holds NaN "
                                          "or infinite values"};
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"sample", "--checkpoint", run, "--max_tokens", "4"},
           {"chat", "--checkpoint", run, "--prompt", "hi", "--max_tokens", "4"},
           {"eval", "--checkpoint", run, "--task", "arithmetic", "--count", "1"},
           {"serve", "--checkpoint", run, "--port", "0", "--max_tokens", "4"}}) {
    const Outcome o = expect_failure(args, {wants[0], run});
    EXPECT_EQ(o.out.find('\0'), std::string::npos) << "NUL bytes on stdout";
  }
  // The same file without the NaN samples.
  expect_success({"sample", "--checkpoint", checkpoint("finite_run"), "--max_tokens", "4"});
}

// Train's flags and checks belong to the trainer; here only the binary's contract is checked.
TEST_F(Cli, Train) {
  const std::vector<std::string> tiny = {"--depth", "1", "--max_seq_len", "16", "--device_batch_size", "2",
                                         "--total_batch_size", "32", "--num_iterations", "1"};
  auto train = [&](std::vector<std::string> more) {
    std::vector<std::string> args{"train"};
    args.insert(args.end(), tiny.begin(), tiny.end());
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  expect_failure(train({"--data", path("missing"), "--out", path("run")}), {"missing"});
  // nanoGPT's habit (--data input.txt) is told how to prepare the text, not to prepare into the file.
  expect_failure(train({"--data", path("file.txt"), "--out", path("run")}),
                 {"is a file", "nanoddp data prepare --input " + path("file.txt") + " --out data"});
  expect_failure(train({"--data", path("empty_dir"), "--out", path("run")}), {"empty_dir"});
  const std::string data = dataset("data");
  expect_failure(train({"--data", data, "--out", path("file.txt")}));
  for (const auto& bad : unwritable("run")) expect_failure(train({"--data", data, "--out", bad}));
  // A --sample_prompt that fills the context is refused before training (was: an empty sample after
  // the run, without a word).
  expect_failure(train({"--data", data, "--out", path("run"), "--sample_tokens", "4", "--sample_prompt",
                        std::string(20, 'a')}), {"--sample_prompt is 21 tokens", "context of 16"});
  // A budget smaller than one step says so, with the step's cost.
  expect_failure({"train", "--depth", "1", "--max_seq_len", "16", "--device_batch_size", "2", "--total_batch_size",
                  "32", "--target_flops", "1000", "--data", data, "--out", path("run")},
                 {"--target_flops 1000 is less than half of one step, which costs"});
}

// --fp8 needs FP8 GEMM hardware: on the CPU it is one error line, before any training, never a
// quiet run in full precision (nanochat prints a warning and ignores the flag).
TEST_F(Cli, TrainFp8OnTheCpuIsOneErrorLine) {
  const std::string data = dataset("data");
  const Outcome o = expect_failure({"train", "--fp8", "--device", "cpu", "--depth", "2", "--max_seq_len", "16",
                                    "--device_batch_size", "2", "--total_batch_size", "32", "--num_iterations", "1",
                                    "--data", data, "--out", path("run")},
                                   {"--fp8 cannot run on cpu", "compute capability 9.0", "drop --fp8"});
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_FALSE(fs::exists(path("run"))) << "claimed --out before refusing";
}

// --optimizer sgd, which the library has always had, through the command line: it trains, with its
// own learning rate and momentum, and the checkpoint records them.
TEST_F(Cli, TrainWithSgd) {
  const std::string data = dataset("data");
  const Outcome o = nanoddp({"train", "--depth", "1", "--max_seq_len", "16", "--device_batch_size", "2",
                             "--total_batch_size", "32", "--num_iterations", "3", "--eval_every", "-1", "--eval_tokens",
                             "32", "--data", data, "--out", path("run"), "--optimizer", "sgd", "--sgd_lr", "0.05",
                             "--sgd_momentum", "0.5"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("optimizer sgd"), std::string::npos) << o.out;
  const auto meta = nlohmann::json::parse(testing::read_file(path("run/checkpoints/step_000003/meta.json")));
  EXPECT_EQ(meta.at("options").at("optimizer"), "sgd");
  EXPECT_EQ(meta.at("options").at("sgd_lr"), 0.05);
  EXPECT_EQ(meta.at("options").at("sgd_momentum"), 0.5);
  // A momentum above 1 lets the buffer grow without bound: refused by name.
  expect_failure({"train", "--optimizer", "sgd", "--sgd_momentum", "1.5", "--data", data}, {"--sgd_momentum"});
}

// train's --help lists its flags in the sections of train/options.h; RL's section is rl's alone.
TEST_F(Cli, TrainHelpShowsTheSections) {
  const Outcome train = nanoddp({"train", "--help"});
  ASSERT_EQ(train.status, 0) << train.err;
  size_t last = 0;
  for (const char* title : {"Model:", "Batch and length:", "Optimization:", "Data:", "Chat stages:",
                            "Output and checkpoints:", "Evaluation and sampling:", "Runtime:"}) {
    const size_t at = train.out.find(std::string("\n") + title);
    ASSERT_NE(at, std::string::npos) << title << " in:\n" << train.out;
    EXPECT_GT(at, last) << title << " is out of order";
    last = at;
  }
  EXPECT_EQ(train.out.find("RL:"), std::string::npos);
  EXPECT_EQ(train.out.find("--task"), std::string::npos);
  // Defaults that differ by recipe show the default recipe's (2026, train/recipe_options.cpp) first.
  for (const char* shown : {"--embedding-lr FLOAT=0.3 (classic: 0.2)", "--unembedding-lr FLOAT=0.008 (classic: 0.004)",
                            "--total-batch-size INT=-1 (classic: 524288)", "--warmup-steps INT=40 (classic: 0)",
                            "--recipe TEXT=2026"})
    EXPECT_NE(train.out.find(shown), std::string::npos) << shown << " in:\n" << train.out;
  const Outcome rl = nanoddp({"rl", "--help"});
  ASSERT_EQ(rl.status, 0) << rl.err;
  EXPECT_NE(rl.out.find("\nRL:"), std::string::npos) << rl.out;
  for (const char* flag : {"--task ", "--num_samples", "--reward"}) EXPECT_NE(rl.out.find(flag), std::string::npos);
}

TEST_F(Cli, Run) {
  expect_failure({"run"}, {"command"});
  expect_failure({"run", "--bogus"}, {"--bogus"});
  expect_failure({"run", path("missing_program")}, {"missing_program"});
  expect_failure({"run", path("file.txt")}, {"file.txt"});
  expect_failure({"run", "--nproc_per_node", "0", "info"}, {"--nproc_per_node"});
  // A worker's error reaches the launcher's stderr, and its status the launcher's.
  expect_failure({"run", "--standalone", "--nproc_per_node", "1", "data", "prepare", "--input", path("missing.txt"),
                  "--out", path("d")},
                 {"missing.txt"});
}

}  // namespace
}  // namespace nanoddp
