// The nanoddp binary at the edges of its numbers, paths and run time: values that overflow are
// "too large" with their bound (not saturated, wrapped or misdiagnosed), bad paths are named with
// their flag and problem (not the library's "filesystem error"), missing files are called missing,
// and a SIGTERM during sampling or evaluation stops the command promptly with a line saying so.
// test_flag_fuzz.cpp sweeps every flag; this file pins the cases that were wrong, by message.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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

using testing::Outcome;

class Limits : public ::testing::Test {
 protected:
  Limits() : scratch_(std::string("cli_limits_") + ::testing::UnitTest::GetInstance()->current_test_info()->name()) {}

  std::string path(const std::string& child) const { return scratch_.str(child); }

  Outcome nanoddp(const std::vector<std::string>& args) const {
    return testing::run_to_end(testing::nanoddp_argv(args), {"NANODDP_CACHE=" + path("cache")}, 120s);
  }

  // Fails unless the command exits 1 or 2 with one error line holding every `wants` and none of
  // `not_wants`.
  void expect_error(const std::vector<std::string>& args, const std::vector<std::string>& wants,
                    const std::vector<std::string>& not_wants = {}) {
    std::string cmd = "nanoddp";
    for (const auto& a : args) cmd += " " + a.substr(0, 80);
    SCOPED_TRACE(cmd);
    const Outcome o = nanoddp(args);
    EXPECT_TRUE(o.status == 1 || o.status == 2) << "exit " << o.status << "\n" << o.err;
    int lines = 0;
    std::istringstream in(o.err);
    for (std::string line; std::getline(in, line);) lines += line.find("error") != std::string::npos;
    EXPECT_EQ(lines, 1) << o.err;
    for (const auto& w : wants) EXPECT_NE(o.err.find(w), std::string::npos) << "wanted '" << w << "' in:\n" << o.err;
    for (const auto& w : not_wants)
      EXPECT_EQ(o.err.find(w), std::string::npos) << "did not want '" << w << "':\n" << o.err;
  }

  void expect_success(const std::vector<std::string>& args) {
    const Outcome o = nanoddp(args);
    ASSERT_EQ(o.status, 0) << o.err;
  }

  // A byte-tokenizer dataset of 20 short documents.
  std::string dataset(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::ofstream docs(path(name + ".jsonl"));
    for (int i = 0; i < 20; i++) docs << "{\"text\": \"Document " << i << " says the quick brown fox jumps.\"}\n";
    docs.close();
    std::vector<std::string> args{"data", "prepare", "--input", path(name + ".jsonl"), "--out", path(name),
                                  "--val_every", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    expect_success(args);
    return path(name);
  }

  // A checkpoint of a one-layer model whose context is `context` tokens (imported, so it takes no
  // training), with `data`'s tokenizer.
  std::string checkpoint(const std::string& name, const std::string& data, int64_t context) {
    model::GPTConfig c;
    c.vocab_size = 265;
    c.n_layer = 1;
    c.n_embd = 64;
    c.n_head = 1;
    c.n_kv_head = 1;
    c.max_seq_len = context;
    model::GPT gpt(c, Device::cpu());
    SafetensorsWriter w;
    for (const auto& p : gpt.parameters()) w.add(p.name, p.data);
    w.set_metadata("nanoddp.model_config", c.to_json().dump());
    w.set_metadata("nanoddp.tokenizer", "bytes");
    w.write(path(name + ".safetensors"));
    expect_success({"import", "--input", path(name + ".safetensors"), "--out", path(name), "--data", data});
    return path(name);
  }

  // The tiniest train command line on `data` (classic: width 16 is below the 2026 smear gate's 24, and
  // the budgets below are counted in classic's steps).
  std::vector<std::string> tiny_train(const std::string& data, const std::string& out) const {
    return {"train", "--data", data, "--out", out, "--depth", "1", "--aspect_ratio", "16", "--head_dim", "16",
            "--max_seq_len", "16", "--device_batch_size", "1", "--total_batch_size", "16", "--eval_tokens", "16",
            "--threads", "1", "--recipe", "classic"};
  }

  testing::ScratchDir scratch_;
};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::string k2to63 = "9223372036854775808", k2to63m1 = "9223372036854775807", k2to64 = "18446744073709551616";

// Values past int64 were read as 2^63 - 1 (loops without end), an empty value as 0 (a run that
// learned nothing, exit 0), and nan, inf or 1e400 (inf) as themselves.
TEST_F(Limits, NumbersAreReadWholeOrRefusedByName) {
  const std::string data = dataset("data");
  const auto train = tiny_train(data, path("run"));
  expect_error(train + std::vector<std::string>{"--num_iterations", k2to64}, {"--num_iterations", "too large",
                                                                              "the largest is " + k2to63m1});
  expect_error(train + std::vector<std::string>{"--num_iterations", "-" + k2to64}, {"--num_iterations", "too small"});
  expect_error(train + std::vector<std::string>{"--seed", k2to64}, {"--seed", "too large", "18446744073709551615"});
  expect_error(train + std::vector<std::string>{"--unembedding_lr", ""}, {"--unembedding_lr", "empty"});
  expect_error(train + std::vector<std::string>{"--num_iterations", ""}, {"--num_iterations", "empty"});
  expect_error(train + std::vector<std::string>{"--matrix_lr", "nan"}, {"--matrix_lr", "not a number"});
  expect_error(train + std::vector<std::string>{"--warmup_ratio", "inf"}, {"--warmup_ratio", "not finite"});
  expect_error(train + std::vector<std::string>{"--grad_clip", "1e400"}, {"--grad_clip", "too large"});
  expect_error(train + std::vector<std::string>{"--num_iterations", "1e3"}, {"--num_iterations", "not a whole number"});
  // strtoll's base 0 read a leading 0 as octal: 010 was 8 iterations.
  expect_success(train + std::vector<std::string>{"--num_iterations", "010", "--eval_every", "-1"});
  std::ifstream metrics(path("run/metrics.jsonl"));
  std::string last, line;
  while (std::getline(metrics, line)) last = line.empty() ? last : line;
  EXPECT_NE(last.find("\"step\":10"), std::string::npos) << "the last metrics line is not step 10: " << last;
}

// Products and conversions that overflowed were misdiagnosed or ran forever; each is now "too
// large" with its bound, before any work.
TEST_F(Limits, OverflowsAreTooLargeWithTheirBound) {
  const std::string data = dataset("data");
  const auto train = tiny_train(data, path("run"));
  expect_error(train + std::vector<std::string>{"--target_flops", "1e30"}, {"--target_flops", "too large", "2^40"},
               {"half of one step"});
  expect_error(train + std::vector<std::string>{"--num_epochs", "1e300"}, {"--num_epochs", "too large"});
  expect_error(train + std::vector<std::string>{"--target_param_data_ratio", "1e300"},
               {"--target_param_data_ratio", "too large"});
  expect_error(train + std::vector<std::string>{"--aspect_ratio", k2to63m1}, {"--aspect_ratio", "too large", "1048576"},
               {"n_embd"});
  expect_error(train + std::vector<std::string>{"--bucket_cap_mb", "1e300"}, {"--bucket_cap_mb", "too large"},
               {"must be positive"});
  expect_error(train + std::vector<std::string>{"--first_bucket_mb", "1e-300"}, {"--first_bucket_mb", "one byte"});
  // With --stop_at, a huge --num_iterations gave a learning-rate multiplier of -1 (gradient ascent).
  expect_error(train + std::vector<std::string>{"--num_iterations", k2to63m1, "--stop_at", "1"},
               {"--num_iterations", "too large", "1099511627776"});
  // 2^40 steps of 2^40 tokens: the count of tokens seen would overflow.
  expect_error(train + std::vector<std::string>{"--num_iterations", "1099511627776", "--total_batch_size",
                                                "1099511627776", "--device_batch_size", "16"},
               {"too large", "2^62"});
  expect_error(train + std::vector<std::string>{"--timeout", "1e300"}, {"--timeout", "too large"});
  // Was: a NaN loss at step 1, naming no flag.
  expect_error(train + std::vector<std::string>{"--matrix_lr", "1e300"}, {"--matrix_lr", "too large", "1000"});
  expect_error(train + std::vector<std::string>{"--loss_scale_init", "1e300"}, {"--loss_scale_init", "too large"});
  const std::string run = checkpoint("model", data, 64);
  expect_success({"task", "--count", "4", "--format", "questions", "--out", path("q.jsonl")});
  const std::vector<std::string> rl = {"rl", "--source", run, "--task", path("q.jsonl"), "--out", path("rl")};
  expect_error(rl + std::vector<std::string>{"--num_samples", k2to63m1}, {"--num_samples", "too large", "65536"});
  expect_error(rl + std::vector<std::string>{"--examples_per_step", k2to63m1}, {"--examples_per_step", "too large"});
  expect_error(rl + std::vector<std::string>{"--max_new_tokens", k2to63m1}, {"--max_new_tokens", "too large"});
  const std::vector<std::string> eval = {"eval", "--checkpoint", run, "--task", path("q.jsonl")};
  expect_error(eval + std::vector<std::string>{"--num_samples", k2to63m1}, {"--num_samples", "too large", "65536"});
  expect_error(eval + std::vector<std::string>{"--num_samples", k2to63}, {"--num_samples", "too large"});
  expect_error(eval + std::vector<std::string>{"--timeout", "1e300"}, {"--timeout", "1e9"});
  expect_error({"env", "--timeout", "1e300"}, {"--timeout", "too large"});
  expect_error({"import", "--input", path("model.safetensors"), "--out", path("imported"), "--max_seq_len", "0"},
               {"--max_seq_len", "between 1 and"});
}

// Paths that cannot be written were reported as "filesystem error: ..." without the flag.
TEST_F(Limits, BadPathsNameTheFlagThePathAndTheProblem) {
  const std::string data = dataset("data");
  std::ofstream(path("file.txt")) << "a file\n";
  const std::string too_long = "/tmp/" + std::string(300, 'x') + "/run";
  const std::vector<std::string> fs_error = {"filesystem error"};
  for (const auto& out : {path("file.txt"), std::string("/proc/nanoddp_run"), path("file.txt/run"), too_long}) {
    expect_error(tiny_train(data, out), {"--out", out.substr(0, 40)}, fs_error);
    expect_error({"data", "prepare", "--input", path("data.jsonl"), "--out", out}, {"--out"}, fs_error);
    expect_error({"task", "--out", out == path("file.txt") ? path("data") : out}, {"--out"}, fs_error);
  }
  expect_error(tiny_train(data, ""), {"--out is empty"}, fs_error);
  expect_error(tiny_train(data, path("file.txt")), {"is a file, not a directory"});
  expect_error(tiny_train(data, "/proc/nanoddp_run"), {"kernel file system"});
  expect_error(tiny_train(data, too_long), {"too long", "255"});
  const std::string run = checkpoint("model", data, 64);
  expect_error({"export", "--checkpoint", run, "--out", "/proc/self/nanoddp.safetensors"}, {"--out", "/proc/self"},
               fs_error);
  expect_error({"import", "--input", path("missing.safetensors"), "--out", path("imported")},
               {"--input", "missing.safetensors", "does not exist"});
  expect_error({"sample", "--checkpoint", path("missing")}, {"--checkpoint", path("missing"), "does not exist"});
  expect_error({"sample", "--checkpoint", path("file.txt")}, {"--checkpoint", "is a file, not a directory"});
  expect_error({"data", "prepare", "--input", path("missing.jsonl"), "--out", path("d2")},
               {"--input", "missing.jsonl", "does not exist"});
  // serve said only "... is neither a complete checkpoint" for all three, without the flag; a walk
  // of /proc failed on whichever of the kernel's files it could not read.
  expect_error({"serve", "--checkpoint", path("missing")}, {"--checkpoint", path("missing"), "does not exist"});
  expect_error({"serve", "--checkpoint", path("file.txt")}, {"--checkpoint", "is a file, not a directory"});
  expect_error({"serve", "--checkpoint", data}, {"--checkpoint " + data, "neither a complete checkpoint"});
  expect_error({"data", "prepare", "--input", "/proc", "--out", path("d3")}, {"--input /proc", "kernel file system"},
               fs_error);
  EXPECT_FALSE(fs::exists(path("d3")));
}

// export --out and tokenizer train --out replaced a checkpoint's optimizer file or a dataset's
// tokenizer copy without a word, breaking the resume or the dataset; now only with --overwrite, and
// a user's own file beside them is still theirs to replace.
TEST_F(Limits, OutputsReplaceTheFilesOfACheckpointOrDatasetOnlyWithOverwrite) {
  const std::string corpus = path("tok.jsonl");
  std::ofstream(corpus) << "{\"text\": \"the quick brown fox jumps over the lazy dog again and again\"}\n";
  expect_success({"tokenizer", "train", "--input", corpus, "--vocab_size", "300", "--out", path("tok.tiktoken")});
  const std::string data = dataset("data", {"--tokenizer", path("tok.tiktoken")});
  const std::string run = checkpoint("model", dataset("bytes"), 64);
  std::string step;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) step = e.path().string();
  // An imported checkpoint has no optimizer state; a copy stands for a trained one's.
  fs::copy_file(step + "/model.safetensors", step + "/optim_rank0.safetensors");
  auto bytes = [](const std::string& f) { return testing::read_file(f); };
  for (const std::string name : {"optim_rank0.safetensors", "model.safetensors", "meta.json"}) {
    const std::string target = step + "/" + name;
    const std::string before = bytes(target);
    expect_error({"export", "--checkpoint", run, "--out", target},
                 {"--out " + target, "a file of the checkpoint in " + step, "--overwrite"});
    EXPECT_EQ(bytes(target), before) << target;
  }
  const std::string tok = data + "/tokenizer.tiktoken";
  const std::string tok_before = bytes(tok), meta_before = bytes(data + "/meta.json");
  const std::vector<std::string> train_tok = {"tokenizer", "train", "--input", corpus, "--vocab_size", "280"};
  expect_error(train_tok + std::vector<std::string>{"--out", tok}, {"--out " + tok, "the dataset prepared in " + data,
                                                                    "--overwrite"});
  // Its sidecar FILE.json would be the dataset's meta.json.
  expect_error(train_tok + std::vector<std::string>{"--out", data + "/meta"}, {data + "/meta.json", "the dataset"});
  expect_error({"export", "--checkpoint", run, "--out", data + "/meta.json"}, {"the dataset prepared in " + data});
  EXPECT_EQ(bytes(tok), tok_before);
  EXPECT_EQ(bytes(data + "/meta.json"), meta_before);
  // Not a file of the dataset or the checkpoint: written as before.
  expect_success(train_tok + std::vector<std::string>{"--out", data + "/mine.tiktoken"});
  expect_success({"export", "--checkpoint", run, "--out", step + "/weights.safetensors"});
  // Told: replaced.
  expect_success(train_tok + std::vector<std::string>{"--out", tok, "--overwrite"});
  EXPECT_NE(bytes(tok), tok_before);
  expect_success({"export", "--checkpoint", run, "--out", step + "/optim_rank0.safetensors", "--overwrite"});
}

// A dataset whose tokenizer file is gone was said to name an "unknown tokenizer"; a questions file
// named without .jsonl, an "unknown task".
TEST_F(Limits, MissingFilesAreCalledMissing) {
  const std::string corpus = path("tok.jsonl");
  std::ofstream(corpus) << "{\"text\": \"the quick brown fox jumps over the lazy dog again and again\"}\n";
  expect_success({"tokenizer", "train", "--input", corpus, "--vocab_size", "300", "--out", path("tok.tiktoken")});
  const std::string data = dataset("data", {"--tokenizer", path("tok.tiktoken")});
  for (const auto& e : fs::directory_iterator(data))
    if (e.path().extension() == ".tiktoken") fs::remove(e.path());
  expect_error(tiny_train(data, path("run")), {"tokenizer file", "is missing", "meta.json"}, {"unknown tokenizer"});
  const std::string bytes = dataset("bytes");
  const std::string run = checkpoint("model", bytes, 64);
  expect_error({"eval", "--checkpoint", run, "--task", "nope.txt"}, {"nope.txt", "does not exist"}, {"unknown task"});
}

// Whether `pid` has a handler for SIGTERM (bit 15 of SigCgt in /proc/PID/status): the command has
// reached the loop that handles it.
bool catches_sigterm(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("SigCgt:")) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1;
  return false;
}

// Waits (up to a minute) until `p` catches SIGTERM; false when it never does.
bool waits_for_sigterm_handler(testing::Proc& p) {
  for (int i = 0; i < 60000; i++) {
    if (catches_sigterm(p.pid())) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// Sampling and evaluation died silently on SIGTERM (or, had they caught it, would have run on):
// each now stops at the next token with a line saying so, and exits 128 + 15.
TEST_F(Limits, SigtermStopsSamplingAndEvaluationWithALine) {
  const std::string data = dataset("data");
  // A long context, so that generation runs long enough to be interrupted.
  const std::string run = checkpoint("model", data, 16384);
  expect_success({"task", "--count", "50", "--format", "questions", "--out", path("q.jsonl")});
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"sample", {"sample", "--checkpoint", run, "--max_tokens", "16000", "--temperature", "1"}},
      {"chat", {"chat", "--checkpoint", run, "--prompt", "hi", "--max_tokens", "16000", "--temperature", "1"}},
      {"eval", {"eval", "--checkpoint", run, "--task", path("q.jsonl"), "--num_samples", "1000", "--max_tokens",
                "16000", "--temperature", "1"}},
  };
  for (const auto& [name, args] : commands) {
    SCOPED_TRACE(name);
    testing::Proc p(testing::nanoddp_argv(args), {"NANODDP_CACHE=" + path("cache")});
    ASSERT_TRUE(waits_for_sigterm_handler(p)) << "never installed its SIGTERM handler:\n" << p.err();
    ::kill(p.pid(), SIGTERM);
    const auto status = p.wait_exit(60s);
    ASSERT_TRUE(status.has_value()) << "still running 60 s after SIGTERM";
    EXPECT_EQ(*status, 128 + SIGTERM) << p.err();
    EXPECT_NE(p.err().find("nanoddp " + name + ": stopped by SIGTERM"), std::string::npos) << p.err();
  }
}

// A SIGTERM killed data prepare and tokenizer train silently, and prepare left its OUT.tmp-<pid>
// staging folder behind; each now stops between documents, writes nothing and exits 128 + 15 with
// a line. The second input is a FIFO, so neither can finish before the test has sent the signal:
// whatever it reads from it is what the test writes, a document at a time, after the signal.
TEST_F(Limits, SigtermStopsDataPrepareAndTokenizerTrainAndLeavesNothing) {
  dataset("data");  // writes data.jsonl
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"data prepare", {"data", "prepare", "--input", path("data.jsonl"), path("fifo.txt"), "--out", path("stopped"),
                        "--val_every", "2", "--batch_bytes", "1"}},
      {"tokenizer train", {"tokenizer", "train", "--input", path("data.jsonl"), path("fifo.txt"), "--vocab_size",
                           "300", "--out", path("stopped.tiktoken")}},
  };
  for (const auto& [name, args] : commands) {
    SCOPED_TRACE(name);
    const std::string fifo = path("fifo.txt");
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    testing::Proc p(testing::nanoddp_argv(args), {"NANODDP_CACHE=" + path("cache")});
    ASSERT_TRUE(waits_for_sigterm_handler(p)) << "never installed its SIGTERM handler:\n" << p.err();
    ::kill(p.pid(), SIGTERM);
    std::optional<int> status;
    // Feeds the FIFO whenever it is open for reading (O_NONBLOCK: ENXIO while it is not).
    for (int i = 0; i < 6000 && !status; i++) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) {
        const std::string doc = "a document written after the signal\n";
        EXPECT_EQ(::write(fd, doc.data(), doc.size()), static_cast<ssize_t>(doc.size()));
        ::close(fd);
      }
      status = p.wait_exit(10ms);
    }
    ASSERT_TRUE(status.has_value()) << "still running 60 s after SIGTERM";
    EXPECT_EQ(*status, 128 + SIGTERM) << p.err();
    EXPECT_NE(p.err().find("nanoddp " + name + ": stopped by SIGTERM after"), std::string::npos) << p.err();
    for (const auto& e : fs::directory_iterator(scratch_.path()))
      EXPECT_FALSE(e.path().filename().string().starts_with("stopped")) << e.path();
  }
}

}  // namespace
}  // namespace nanoddp
