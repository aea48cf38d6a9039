// A run never loses work or lies: a run folder belongs to one run, flags are checked
// before anything runs, a non-finite loss stops the run before a checkpoint, a resume that does not
// fit the run is refused, SIGTERM saves before exiting, and --init_from starts from weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "comm/collective_watch.h"
#include "core/safetensors.h"
#include "data/conversation_loader.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "rendezvous/hash_store.h"
#include "run_outputs.h"
#include "subprocess.h"
#include "train/checkpoint.h"
#include "train/run_folder.h"
#include "train/stop_signals.h"
#include "train/validate.h"
#include "train_test_util.h"

namespace nanoddp {
namespace {

namespace fs = std::filesystem;

std::string run_id_of(const std::string& out) { return train::read_run_info(out).value().run_id; }

std::vector<nlohmann::json> metrics_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(RunFolder, AFreshRunIntoAnotherRunsFolderIsRefusedAndOverwriteMovesItAside) {
  testing::ScratchDir root("run_folder_claim");
  const std::string out = root.str("out");
  auto o = tiny(out);
  o.batch.num_iterations = 2;
  train_single(o);
  const std::string first = run_id_of(out);
  // Was: the new run's rotation deleted the old run's checkpoints and truncated its metrics, exit 0.
  NANODDP_EXPECT_ERROR(train_single(o), "holds run " + first, "--overwrite", "--resume latest");
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step_000002/DONE"));
  o.output.overwrite = true;
  train_single(o);
  const std::string moved = out + ".previous-" + first;
  EXPECT_TRUE(fs::exists(moved + "/checkpoints/step_000002/DONE")) << "the old run was not kept";
  EXPECT_TRUE(fs::exists(moved + "/metrics.jsonl"));
  EXPECT_NE(run_id_of(out), first);
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step_000002/DONE"));
  // A run that ended before its first checkpoint has nothing to resume: the error does not offer it.
  testing::ScratchDir bare("run_folder_no_checkpoint");
  auto b = tiny(bare.str());
  b.batch.num_iterations = 2;
  train_single(b);
  fs::remove_all(bare.str("checkpoints"));
  try {
    train_single(b);
    ADD_FAILURE() << "a run folder without checkpoints was taken over";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no complete checkpoint"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
}

TEST(RunFolder, RotationDeletesOnlyThisRunsCheckpoints) {
  testing::ScratchDir other("rotation_other"), out("rotation_own");
  auto o = tiny(other.str());
  o.batch.num_iterations = 3;
  train_single(o);
  // Another run's checkpoint lands in this run's folder (copied by hand, say).
  auto mine = tiny(out.str());
  mine.batch.num_iterations = 6;
  mine.output.save_every = 1;
  mine.output.keep_last = 1;
  mine.output.stop_at = 1;
  train_single(mine);
  // At a step before the one resumed (one after it is set aside, see ResumingAnEarlierStep...), and
  // one this run never saves (a fresh run saves no step 0; a save replaces a checkpoint as a whole).
  fs::copy(other.str("checkpoints/step_000003"), out.str("checkpoints/step_000000"), fs::copy_options::recursive);
  // Resuming from step 1 then saves steps 2..6 with keep_last 1.
  mine.output.stop_at = -1;
  mine.output.resume = resume_spec("1");
  train_single(mine);
  EXPECT_TRUE(fs::exists(out.str("checkpoints/step_000000/DONE"))) << "another run's checkpoint was rotated away";
  EXPECT_TRUE(fs::exists(out.str("checkpoints/step_000006/DONE")));
  EXPECT_FALSE(fs::exists(out.str("checkpoints/step_000005")));
}

// A val split too small for one batch of windows stops the run before it trains or claims --out.
// Was: every step trained, then the final evaluation failed with nothing saved, and the folder,
// claimed, refused the next run while its advice (--resume latest) found nothing to resume.
TEST(RunFolder, AValSplitTooSmallStopsTheRunBeforeItStarts) {
  testing::ScratchDir dir("small_val");
  {
    std::ofstream corpus(dir.str("c.jsonl"));
    for (int i = 0; i < 40; i++) {
      std::string text;
      for (int w = 0; w < 400; w++) text += "word ";
      corpus << "{\"text\": \"" << text << i << "\"}\n";
    }
  }
  data::PrepareOptions p;
  p.input = {dir.str("c.jsonl")};
  p.out = dir.str("data");
  p.tokenizer = "bytes";
  p.val_every = 40;  // one document of about 2000 tokens: 3 windows of 512+1
  data::prepare_dataset(p);
  auto o = tiny(dir.str("out"));
  o.input.data = dir.str("data");
  o.model.max_seq_len = 512;
  o.batch.device_batch_size = 4;
  o.batch.total_batch_size = 4 * 512;
  o.batch.num_iterations = 2;
  NANODDP_EXPECT_ERROR(train_single(o), "val split", "3 windows");
  EXPECT_FALSE(fs::exists(dir.str("out/run.json"))) << "--out was claimed by a run that never started";
}

// Resuming a step before the newest abandons the later checkpoints: they are set aside, never
// deleted, and no longer count as the run's newest. Was: the rotation kept the abandoned step 6
// and deleted the step 5 just saved (exit 0), and --resume latest went back to step 6.
TEST(RunFolder, ResumingAnEarlierStepSetsTheLaterOnesAside) {
  testing::ScratchDir out("resume_earlier");
  auto o = tiny_saving(out.str(), 6, 2);
  o.output.keep_last = 2;
  train_single(o);  // keeps steps 4 and 6
  o.output.resume = resume_spec("4");
  o.output.stop_at = 5;
  o.output.keep_last = 1;
  EXPECT_EQ(train_single(o).last_step, 5);
  EXPECT_TRUE(fs::exists(out.str("checkpoints/step_000005/DONE"))) << "the save just made was rotated away";
  EXPECT_EQ(train::latest_checkpoint(out.str()), 5);
  EXPECT_TRUE(fs::exists(out.str("checkpoints/after_step_000004/step_000006/DONE"))) << "step 6 was not kept";
  o.output.resume = resume_spec("latest");
  o.output.stop_at = -1;
  EXPECT_EQ(train_single(o).last_step, 6);
  EXPECT_EQ(train::latest_checkpoint(out.str()), 6);
}

// The evaluation at the step a run resumes from stays in metrics.jsonl when the resumed run does
// not evaluate that step again (off the --eval_every cadence). Was: dropped.
TEST(RunFolder, AResumeKeepsTheEvaluationAtItsStep) {
  testing::ScratchDir out("resume_metrics");
  auto o = tiny(out.str());
  o.batch.num_iterations = 8;
  o.eval.eval_every = 4;
  o.output.stop_at = 5;
  train_single(o);  // evaluates steps 0, 4 and 5 (its last)
  o.output.stop_at = -1;
  o.output.resume = resume_spec("latest");
  train_single(o);  // evaluates step 8 only
  std::vector<int64_t> evaluated, trained;
  for (const auto& j : metrics_lines(out.str())) {
    if (j.contains("val_bpb")) evaluated.push_back(j.at("step"));
    if (j.contains("loss")) trained.push_back(j.at("step"));
  }
  EXPECT_EQ(evaluated, (std::vector<int64_t>{0, 4, 5, 8}));
  EXPECT_EQ(trained, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // --resume auto on the finished run has nothing to do, and says so without failing.
  o.output.resume = resume_spec("auto");
  EXPECT_EQ(train_single(o).last_step, 8);
  EXPECT_EQ(metrics_lines(out.str()).size(), evaluated.size() + trained.size());
}

// A validation file too small for one batch stops a chat-stage run before it trains. Was: found at
// the final evaluation, after the last step, with no checkpoint saved.
TEST(RunFolder, ATooSmallValidationFileStopsTheRunBeforeItTrains) {
  testing::ScratchDir out("small_val");
  const std::string train = out.str("train.jsonl"), val = out.str("val.jsonl");
  {
    std::ofstream t(train);
    for (int i = 0; i < 60; i++)
      t << R"([{"role": "user", "content": "what is 12 + 30?"}, {"role": "assistant", "content": "it is 42"}])"
        << "\n";
    std::ofstream(val) << R"([{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "2"}])" << "\n";
  }
  auto o = tiny(out.str("run"));
  o.chat.conversations = train;
  o.chat.val_conversations = val;
  o.eval.eval_every = -1;
  o.batch.num_iterations = 3;
  NANODDP_EXPECT_ERROR(train_single(o), "too few");
  EXPECT_FALSE(fs::exists(out.str("run/checkpoints"))) << "it trained first";
}

TEST(RunFolder, ALauncherRestartResumesOnlyItsOwnJobsRun) {
  testing::ScratchDir out("restart_job");
  auto o = tiny(out.str());
  o.batch.num_iterations = 4;
  o.output.stop_at = 2;
  ::setenv("NANODDP_JOB_ID", "job-a", 1);
  train_single(o);
  o.output.stop_at = -1;
  ::setenv("NANODDP_RESTART_COUNT", "1", 1);
  // Another job's restart must not pick this run up: it starts fresh and finds the folder taken.
  ::setenv("NANODDP_JOB_ID", "job-b", 1);
  NANODDP_EXPECT_ERROR(train_single(o), "holds run");
  // Its own job's restart resumes from step 2.
  ::setenv("NANODDP_JOB_ID", "job-a", 1);
  auto r = train_single(o);
  EXPECT_EQ(r.last_step, 4);
  EXPECT_EQ(testing::training_losses(out.str()).size(), 4u);
  // A restart after the final checkpoint has nothing to do (and is not an error).
  EXPECT_EQ(train_single(o).last_step, 4);
  ::unsetenv("NANODDP_RESTART_COUNT");
  ::unsetenv("NANODDP_JOB_ID");
}

TEST(Resume, ANumIterationsBehindTheCheckpointIsRefused) {
  testing::ScratchDir out("resume_behind");
  auto o = tiny(out.str());
  o.batch.num_iterations = 4;
  train_single(o);
  o.output.resume = resume_spec("latest");
  // Was: training went on past the schedule's end with a negative LR multiplier, never stopping.
  o.batch.num_iterations = 2;
  NANODDP_EXPECT_ERROR(train_single(o), "step 4", "beyond", "--num_iterations");
  o.batch.num_iterations = 4;
  NANODDP_EXPECT_ERROR(train_single(o), "already");
  o.output.resume = resume_spec("3");
  NANODDP_EXPECT_ERROR(train_single(o), "complete checkpoints: 4");
}

TEST(Resume, AnotherSeedOrDatasetIsRefusedUnlessAllowed) {
  testing::ScratchDir out("resume_seed"), data("resume_other_data");
  auto o = tiny(out.str());
  o.batch.num_iterations = 4;
  o.output.stop_at = 2;
  train_single(o);
  o.output.stop_at = -1;
  o.output.resume = resume_spec("latest");
  auto seed = o;
  seed.input.seed = 7;
  NANODDP_EXPECT_ERROR(train_single(seed), "--seed 42", "--allow_changed_data");
  testing::make_byte_dataset(data.str(), 150, 3);
  auto other = o;
  other.input.data = data.str("data");
  NANODDP_EXPECT_ERROR(train_single(other), "another dataset", "--allow_changed_data");
  other.output.allow_changed_data = true;
  EXPECT_EQ(train_single(other).last_step, 4);
}

TEST(Options, EveryMeaninglessValueIsRefusedWithItsRange) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* what;
    std::function<void(train::TrainOptions&)> set;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"0 tokens per step", [](auto& o) { o.batch.total_batch_size = 0; }, "--total_batch_size must be -1"},
      {"0 iterations", [](auto& o) { o.batch.num_iterations = 0; }, "--num_iterations must be -1"},
      {"negative iterations", [](auto& o) { o.batch.num_iterations = -7; }, "got -7"},
      {"NaN learning rate", [=](auto& o) { o.optim.matrix_lr = nan; }, "--matrix_lr must be a finite number"},
      {"infinite learning rate", [=](auto& o) { o.optim.embedding_lr = inf; }, "--embedding_lr"},
      {"negative weight decay", [](auto& o) { o.optim.weight_decay = -1; }, "--weight_decay"},
      {"100000 threads", [](auto& o) { o.runtime.threads = 100000; }, "the cores of this machine"},
      {"keep no checkpoint", [](auto& o) { o.output.keep_last = 0; }, "--keep_last must be at least 1"},
      {"depth 0", [](auto& o) { o.model.depth = 0; }, "--depth must be between 1"},
      {"depth 100000", [](auto& o) { o.model.depth = 100000; }, "--depth must be between 1"},
      {"odd head_dim", [](auto& o) { o.model.head_dim = 33; }, "--head_dim must be even"},
      {"device batch 2^53", [](auto& o) { o.batch.device_batch_size = int64_t{1} << 53; },
       "--device_batch_size must be between 1 and 16777216"},
      {"warmup + warmdown > 1", [](auto& o) { o.optim.warmup_ratio = 0.6; }, "at most 1"},
      {"zero 3", [](auto& o) { o.optim.zero = 3; }, "--zero must be 0, 1 or 2"},
      {"loss scale 0",
       [](auto& o) {
         o.runtime.dtype = train::DtypeChoice::F16;
         o.runtime.loss_scale_init = 0;
       },
       "--loss_scale_init must be"},
      {"resume and init_from",
       [](auto& o) {
         o.output.resume = resume_spec("latest");
         o.output.init_from = "x";
       },
       "give one of them"},
  };
  testing::ScratchDir out("bad_options");
  for (const auto& c : cases) {
    auto o = tiny(out.str());
    c.set(o);
    SCOPED_TRACE(c.what);
    NANODDP_EXPECT_ERROR(train::validate_options(o), c.message);
    NANODDP_EXPECT_ERROR(train_single(o), c.message);
  }
  EXPECT_FALSE(fs::exists(out.str("checkpoints"))) << "a refused run wrote checkpoints";
}

TEST(Options, AModelThatCannotFitIsRefusedUpFront) {
  testing::ScratchDir out("too_big");
  auto o = tiny(out.str());
  // depth 200 at nanochat's widths: ~10^11 parameters, over a TB of state. Was: memory grew with no
  // output until the OOM killer.
  o.model.depth = 200;
  o.model.aspect_ratio = 64;
  o.model.head_dim = 128;
  NANODDP_EXPECT_ERROR(train_single(o), "this model needs about", "GiB", "lower --depth");
}

TEST(Failure, ANonFiniteLossStopsTheRunBeforeACheckpoint) {
  testing::ScratchDir out("nan_loss");
  auto o = tiny_saving(out.str(), 6, 1);
  o.output.stop_at = 2;
  train_single(o);
  // Rewrites a checkpoint file with NaN in the first f32 tensor that `pick` accepts.
  auto poison = [](const std::string& file, const std::function<bool(const std::string&)>& pick) {
    SafetensorsWriter w;
    SafetensorsFile f(file);
    bool done = false;
    for (const auto& name : f.names()) {
      Tensor t = f.read(name);
      if (!done && t.dtype() == DType::F32 && t.numel() > 0 && pick(name)) {
        for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
        done = true;
      }
      w.add(name, t);
    }
    ASSERT_TRUE(done) << file;
    w.write(file + ".poisoned");
    fs::rename(file + ".poisoned", file);
  };
  const std::string dir = out.str("checkpoints/step_000002");
  // NaN optimizer state (a bad disk, a diverged earlier run): the first resumed step's update makes
  // the weights NaN and the next loss says so. Was: trained on to the end, every later checkpoint
  // NaN and marked complete.
  const std::string optimizer = dir + "/" + train::CheckpointFiles::optimizer(0);
  const std::string backup = optimizer + ".orig";
  fs::copy_file(optimizer, backup);
  poison(optimizer, [](const std::string&) { return true; });
  o.output.stop_at = -1;
  o.output.resume = resume_spec("latest");
  o.output.save_every = 100;
  NANODDP_EXPECT_ERROR(train_single(o), "the training loss is nan", "Lower the learning rates");
  EXPECT_EQ(train::latest_checkpoint(out.str()), 2) << "a checkpoint was saved after the loss went NaN";
  // NaN weights are refused when read, naming the file, before they evaluate or log anything.
  fs::rename(backup, optimizer);
  poison(dir + "/model.safetensors", [](const std::string&) { return true; });
  NANODDP_EXPECT_ERROR(train_single(o), "model.safetensors: parameter", "holds NaN or infinite values");
  EXPECT_EQ(train::latest_checkpoint(out.str()), 2);
}

TEST(InitFrom, ANewRunStartsFromTheWeightsOfAnother) {
  testing::ScratchDir base("init_base"), tuned("init_tuned");
  auto o = tiny(base.str());
  o.batch.num_iterations = 6;
  o.eval.eval_every = 6;
  auto a = train_single(o);
  auto b_opts = tiny(tuned.str());
  b_opts.output.init_from = base.str();  // a run folder: its newest checkpoint
  b_opts.batch.num_iterations = 2;
  b_opts.eval.eval_every = 2;
  train_single(b_opts);
  // The new run's evaluation at step 0 is of the base run's final weights: the same numbers.
  const auto evals = metrics_lines(tuned.str());
  ASSERT_FALSE(evals.empty());
  bool found = false;
  for (const auto& line : evals)
    if (line.value("step", -1) == 0 && line.contains("val_loss")) {
      EXPECT_EQ(line["val_loss"].get<double>(), a.eval->loss);
      found = true;
    }
  EXPECT_TRUE(found) << "no evaluation at step 0";
  b_opts.output.init_from = tuned.str("nope.safetensors");
  b_opts.output.overwrite = true;
  NANODDP_EXPECT_ERROR(train_single(b_opts), "--init_from", "nope.safetensors");
}

// --recipe 2026 trains (its extra parameters through the optimizer too), records the recipe, and
// a run of the other recipe can neither resume it nor start from its weights: one line naming both.
TEST(Recipe, A2026RunTrainsAndTheOtherRecipeCannotResumeOrStartFromIt) {
  testing::ScratchDir dir("recipe_2026"), other("recipe_classic");
  auto o = tiny(dir.str());
  o.model.recipe = model::Recipe::R2026;
  o.batch.num_iterations = 2;
  o.eval.eval_every = 2;
  const auto result = train_single(o);
  ASSERT_TRUE(result.eval.has_value());
  EXPECT_TRUE(std::isfinite(result.eval->loss));
  const auto meta = nlohmann::json::parse(testing::read_file(
      dir.str(fmt::format("checkpoints/step_{:06d}/meta.json", *train::latest_checkpoint(dir.str())))));
  EXPECT_EQ(meta.at("model_config").at("recipe"), "2026");
  auto resume = o;
  resume.model.recipe = model::Recipe::Classic;
  resume.output.resume = resume_spec("latest");
  resume.batch.num_iterations = 4;
  NANODDP_EXPECT_ERROR(train_single(resume), "holds a --recipe 2026 model and this run is --recipe classic",
                       "give --recipe 2026");
  auto start = tiny(other.str());
  start.output.init_from = dir.str();
  NANODDP_EXPECT_ERROR(train_single(start), "--init_from", "--recipe 2026");
}

TEST(RunFolder, ARunKeepsItsTokenizerAndExportWritesItBesideTheWeights) {
  testing::ScratchDir dir("run_tokenizer");
  const std::string bin = testing::nanoddp_binary(), corpus = dir.str("corpus.jsonl"), tok = dir.str("t.tiktoken");
  testing::write_corpus_jsonl(corpus, 100, 5);
  auto run = [&](const std::vector<std::string>& args) {
    testing::Proc p(args);
    auto st = p.wait_exit(std::chrono::seconds(120));
    EXPECT_EQ(st.value_or(-1), 0) << p.all();
    return p.all();
  };
  run({bin, "tokenizer", "train", "--input", corpus, "--vocab_size", "300", "--out", tok});
  run({bin, "data", "prepare", "--input", corpus, "--tokenizer", tok, "--out", dir.str("data"), "--val_every", "10"});
  run({bin, "train", "--data", dir.str("data"), "--out", dir.str("run"), "--depth", "1", "--aspect_ratio", "32",
       "--head_dim", "32", "--max_seq_len", "16", "--device_batch_size", "2", "--total_batch_size", "32",
       "--num_iterations", "2", "--eval_every", "-1", "--eval_tokens", "32", "--threads", "1", "--peak_flops", "1e9"});
  const std::vector<std::string> greedy = {bin, "sample", "--checkpoint", dir.str("run"), "--prompt", "the",
                                           "--max_tokens", "5", "--temperature", "0"};
  const std::string before = run(greedy);
  // The dataset prepared again with another tokenizer of the same size: the run keeps reading with
  // its own copy, and naming that dataset is an error. Was: the new tokenizer, silently.
  const std::string corpus_b = dir.str("corpus_b.jsonl"), tok_b = dir.str("b.tiktoken");
  testing::write_corpus_jsonl(corpus_b, 100, 77);
  run({bin, "tokenizer", "train", "--input", corpus_b, "--vocab_size", "300", "--out", tok_b});
  ASSERT_NE(testing::read_file(tok_b), testing::read_file(tok));
  run({bin, "data", "prepare", "--input", corpus, "--tokenizer", tok_b, "--out", dir.str("data"), "--val_every", "10",
       "--overwrite"});
  EXPECT_EQ(run(greedy), before);
  {
    auto with_data = greedy;
    with_data.insert(with_data.end(), {"--data", dir.str("data")});
    testing::Proc p(with_data);
    EXPECT_EQ(p.wait_exit(std::chrono::seconds(120)).value_or(-1), 1) << p.all();
    EXPECT_NE(p.all().find("is not the one checkpoint"), std::string::npos) << p.all();
  }
  // Nor may a resumed run go on with it, --allow_changed_data or not: its checkpoints would be read
  // with the run's one tokenizer copy. Was: it trained on, and its later checkpoints sampled other text.
  const std::vector<std::string> resume = {bin, "train", "--data", dir.str("data"), "--out", dir.str("run"),
       "--depth", "1", "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len", "16", "--device_batch_size", "2",
       "--total_batch_size", "32", "--num_iterations", "3", "--eval_every", "-1", "--eval_tokens", "32", "--threads",
       "1", "--peak_flops", "1e9", "--resume", "latest", "--allow_changed_data"};
  {
    testing::Proc p(resume);
    EXPECT_EQ(p.wait_exit(std::chrono::seconds(120)).value_or(-1), 1) << p.all();
    EXPECT_NE(p.all().find("is not the one checkpoint"), std::string::npos) << p.all();
  }
  // The same table with other special tokens in its sidecar is another tokenizer too.
  run({bin, "data", "prepare", "--input", corpus, "--tokenizer", tok, "--out", dir.str("data"), "--val_every", "10",
       "--overwrite"});
  {
    auto side = nlohmann::json::parse(testing::read_file(dir.str("data/tokenizer.tiktoken.json")));
    ASSERT_TRUE(side.contains("special_tokens")) << side.dump();
    std::string renamed;
    for (auto& [text, id] : side["special_tokens"].items())
      if (text != side.value("bos", "")) renamed = text;
    ASSERT_FALSE(renamed.empty()) << side.dump();
    const auto id = side["special_tokens"][renamed];
    side["special_tokens"].erase(renamed);
    side["special_tokens"]["<|renamed|>"] = id;
    std::ofstream(dir.str("data/tokenizer.tiktoken.json")) << side.dump(2);
    testing::Proc p(resume);
    EXPECT_EQ(p.wait_exit(std::chrono::seconds(120)).value_or(-1), 1) << p.all();
    EXPECT_NE(p.all().find("is not the one checkpoint"), std::string::npos) << p.all();
  }
  // Was: sample and export needed the dataset folder for the tokenizer.
  fs::remove_all(dir.str("data"));
  const std::string text = run({bin, "sample", "--checkpoint", dir.str("run"), "--prompt", "the", "--max_tokens", "5"});
  EXPECT_NE(text.find("the"), std::string::npos);
  run({bin, "export", "--checkpoint", dir.str("run"), "--out", dir.str("w.safetensors")});
  EXPECT_TRUE(fs::exists(dir.str("w.tiktoken")));
  EXPECT_EQ(testing::read_file(dir.str("w.tiktoken")), testing::read_file(tok));
}

// SIGTERM (schedulers, the launcher), and SIGHUP (a closed terminal or a lost ssh session; was:
// killed the run unsaved with exit 129, leaving a half-written step_N.tmp) save at the next step
// and exit 128 + the signal.
class Signals : public ::testing::TestWithParam<int> {};

TEST_P(Signals, SaveAtTheNextStepAndExitWith128PlusTheSignal) {
  const int sig = GetParam();
  testing::ScratchDir out("signal_" + std::to_string(sig));
  const std::vector<std::string> args = {testing::nanoddp_binary(), "train", "--data", dataset(), "--out", out.str(),
                                         "--depth", "2", "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len",
                                         "32", "--device_batch_size", "4", "--total_batch_size", "128",
                                         "--num_iterations", "100000", "--eval_every", "-1", "--eval_tokens", "512",
                                         "--threads", "1", "--peak_flops", "1e9"};
  testing::Proc p(args);
  ASSERT_TRUE(p.wait_for_text("step 00003/")) << p.all();
  ::kill(p.pid(), sig);
  auto status = p.wait_exit(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 128 + sig) << p.all();
  EXPECT_NE(p.all().find(fmt::format("stopped by signal {}", sig)), std::string::npos) << p.all();
  const auto latest = train::latest_checkpoint(out.str());
  ASSERT_TRUE(latest.has_value()) << "the signal lost the run's work";
  EXPECT_GE(*latest, 3);
  for (const auto& entry : fs::directory_iterator(out.str("checkpoints")))
    EXPECT_FALSE(entry.path().filename().string().ends_with(".tmp")) << entry.path();
}

INSTANTIATE_TEST_SUITE_P(StopSignals, Signals, ::testing::Values(SIGTERM, SIGHUP),
                         [](const auto& info) { return info.param == SIGTERM ? "sigterm" : "sighup"; });

// A stop signal of an earlier run (a library caller that trains again in the same process) is not
// taken for the next run's: its collective watches wait for a peer behind them whose heartbeat
// paused, as they do without a signal. Was: the watches kept the old signal and gave that peer up
// after two heartbeat intervals.
TEST(StopSignal, AnEarlierRunsSignalIsForgottenByTheCollectiveWatches) {
  dist::note_stop_signal(SIGTERM);  // what the earlier run's handler recorded
  { train::StopSignals next_run; }
  auto store = std::make_shared<dist::HashStore>();
  store->set_string("progress/1", "1 5");  // rank 1: behind collective #2, its beat not advancing
  std::atomic<uint64_t> abandoned{0};
  dist::CollectiveWatch watch(store, 0, 2, std::chrono::milliseconds(1000),  // a heartbeat every 100 ms
                              {}, [&](uint64_t seq, const std::string&) { abandoned = seq; });
  watch.issued(1);
  watch.finished(1);
  watch.issued(2);
  // Blocked after kBlockedAfter; with a signal, given up two intervals (200 ms) later. Waiting six
  // times as long leaves room for a loaded machine.
  std::this_thread::sleep_for(dist::CollectiveWatch::kBlockedAfter * 6);
  EXPECT_EQ(abandoned.load(), 0u) << "the earlier run's signal gave up a peer of this one";
}

// One writer per run folder. Was: two concurrent `--resume latest` into one --out both ran to exit
// 0, one's checkpoints replaced by the other's. The second writer now gets one line naming the
// holder; the lock dies with its holder (kill -9 included), so the next run takes the folder.
TEST(RunFolder, ASecondWriterIsRefusedNamingTheHolderAndAKilledOneBlocksNothing) {
  testing::ScratchDir out("one_writer");
  auto o = tiny_saving(out.str(), 2, 1);
  train_single(o);
  const std::vector<std::string> args = {testing::nanoddp_binary(), "train", "--data", dataset(), "--out", out.str(),
                                         "--depth", "2", "--aspect_ratio", "32", "--head_dim", "32", "--max_seq_len",
                                         "32", "--device_batch_size", "4", "--total_batch_size", "256",
                                         "--num_iterations", "100000", "--eval_every", "-1", "--eval_tokens", "512",
                                         "--threads", "1", "--peak_flops", "1e9", "--resume", "latest",
                                         "--allow_changed_data", "--recipe", "classic"};
  testing::Proc first(args);
  ASSERT_TRUE(first.wait_for_text("step 00004/")) << first.all();
  auto second = o;
  second.batch.num_iterations = 100000;
  second.output.resume = resume_spec("latest");
  second.output.allow_changed_data = true;
  NANODDP_EXPECT_ERROR(train_single(second), fmt::format("--out {} is in use by another run (pid {} on host",
                                                         out.str(), first.pid()), "run.lock");
  ::kill(first.pid(), SIGKILL);
  ASSERT_TRUE(first.wait_exit(std::chrono::seconds(60)).has_value());
  second.output.stop_at = *train::latest_checkpoint(out.str()) + 1;
  EXPECT_EQ(train_single(second).last_step, second.output.stop_at);
}

// A start that fails its checks leaves no folder behind. Was (with the run lock): a mistyped --out
// given --resume latest failed, as it should, but left that folder behind holding run.lock. A
// folder that existed before is kept, lock file and all.
TEST(RunFolder, AFailedStartLeavesNoFolderItMade) {
  testing::ScratchDir root("failed_start");
  auto o = tiny(root.str("typo"));
  o.output.resume = resume_spec("latest");
  NANODDP_EXPECT_ERROR(train_single(o), "--resume latest: no complete checkpoint");
  EXPECT_FALSE(fs::exists(root.str("typo"))) << "the failed start left its --out behind";
  fs::create_directories(root.str("mine"));
  o.output.out = root.str("mine");
  NANODDP_EXPECT_ERROR(train_single(o), "--resume latest: no complete checkpoint");
  EXPECT_TRUE(fs::exists(root.str("mine"))) << "a folder the user made was removed";
}

// The staging folder of a save that a kill or a full disk interrupted is removed when the run
// starts again; a user's files that merely look alike are not.
TEST(RunFolder, StartUpRemovesInterruptedSavesAndNothingElse) {
  testing::ScratchDir out("interrupted_saves");
  auto o = tiny_saving(out.str(), 4, 2);
  o.output.stop_at = 2;
  train_single(o);
  const std::string cp = out.str("checkpoints/");
  fs::create_directories(cp + "step_000003.tmp");
  std::ofstream(cp + "step_000003.tmp/optim_rank0.safetensors") << "half written";
  fs::create_directories(cp + "step_000009.tmp");  // complete, its rename interrupted: kept
  std::ofstream(cp + "step_000009.tmp/DONE") << "9\n";
  std::ofstream(cp + "notes.tmp") << "a user's";
  fs::create_directories(cp + "step_000003.tmp.mine");
  o.output.stop_at = -1;
  o.output.resume = resume_spec("latest");
  EXPECT_EQ(train_single(o).last_step, 4);
  EXPECT_FALSE(fs::exists(cp + "step_000003.tmp"));
  EXPECT_TRUE(fs::exists(cp + "step_000009.tmp/DONE"));
  EXPECT_TRUE(fs::exists(cp + "notes.tmp"));
  EXPECT_TRUE(fs::exists(cp + "step_000003.tmp.mine"));
}

// A save that fails (a full disk) removes its staging folder. Was: step_N.tmp stayed, and the next
// resume filled the disk again before its first save.
TEST(RunFolder, AFailedSaveLeavesNoStagingFolder) {
  testing::ScratchDir out("failed_save");
  auto o = tiny_saving(out.str(), 4, 2);
  train::set_checkpoint_write_hook([](const std::string& path) {
    if (path.find("step_000004.tmp/model.safetensors") != std::string::npos)
      throw Error("cannot write " + path + " (disk full?)");
  });
  NANODDP_EXPECT_ERROR(train_single(o), "step_000004.tmp/model.safetensors", "disk full");
  train::set_checkpoint_write_hook({});
  EXPECT_EQ(train::latest_checkpoint(out.str()), 2);
  EXPECT_FALSE(fs::exists(out.str("checkpoints/step_000004.tmp")));
}

// A micro-batch whose targets are all masked stays out of the step's mean loss. At initialisation
// the LM head is zero, so every scored token's loss is ln(vocab) and so is the first step's mean;
// here its first micro-batch holds only the first prompt. Was: a 0 for it averaged in (ln(vocab) / 2).
TEST(Failure, AnSftMicroBatchWithNoScoredTokenStaysOutOfTheMean) {
  testing::ScratchDir out("sft_partly_scored");
  const std::string train = out.str("train.jsonl");
  {
    std::ofstream t(train);
    std::string prompt;
    for (int i = 0; i < 160; i++) prompt += static_cast<char>('a' + (i * 7) % 26);
    for (int i = 0; i < 20; i++)
      t << R"([{"role": "user", "content": ")" << prompt << R"("}, {"role": "assistant", "content": "ok"}])" << "\n";
  }
  auto o = tiny(out.str("run"));
  o.chat.conversations = train;
  o.eval.eval_every = -1;
  o.batch.num_iterations = 1;
  // The premise, read with the trainer's loader: micro-batch 1 scores nothing, micro-batch 2 does.
  const auto tok = data::load_dataset_tokenizer(dataset());
  data::LoaderOptions lo{o.batch.device_batch_size, o.model.max_seq_len, 0, 1, o.input.shuffle, o.input.seed};
  lo.step_units = 2;
  data::ConversationLoader loader({train}, *tok, lo, false);
  Tensor inputs = Tensor::empty({o.batch.device_batch_size, o.model.max_seq_len}, DType::I32);
  Tensor targets = Tensor::empty({o.batch.device_batch_size, o.model.max_seq_len}, DType::I32);
  std::vector<int64_t> scored;
  for (int m = 0; m < 2; m++) {
    loader.next(inputs, targets);
    scored.push_back(std::count_if(targets.data<int32_t>(), targets.data<int32_t>() + targets.numel(),
                                   [](int32_t t) { return t >= 0; }));
  }
  ASSERT_EQ(scored[0], 0);
  ASSERT_GT(scored[1], 0);
  train_single(o);
  const double want = std::log(static_cast<double>(data::read_dataset_meta(dataset()).vocab_size));
  // Relative 1e-5: each token's loss is an f32 log-sum-exp of zeros.
  EXPECT_NEAR(testing::training_losses(out.str("run")).at(1), want, 1e-5 * want);
}

// SFT rows whose targets are all masked (prompts longer than a micro-batch) score nothing. A
// micro-batch without a scored token stays out of the step's mean loss; a step without any stops
// the run. Was: logged loss 0.000000 and trained on, exit 0.
TEST(Failure, AnSftStepWithNoScoredTokenStopsInsteadOfLoggingZero) {
  testing::ScratchDir out("sft_unscored");
  const std::string train = out.str("train.jsonl");
  {
    std::ofstream t(train);
    const std::string prompt(600, 'a');
    for (int i = 0; i < 20; i++)
      t << R"([{"role": "user", "content": ")" << prompt << R"("}, {"role": "assistant", "content": "ok"}])" << "\n";
  }
  auto o = tiny(out.str("run"));
  o.chat.conversations = train;
  o.eval.eval_every = -1;
  o.batch.num_iterations = 3;
  NANODDP_EXPECT_ERROR(train_single(o), "step 1: no row of the step has a target to train on", "--mask all");
  EXPECT_FALSE(train::latest_checkpoint(out.str("run")).has_value());
}

}  // namespace
}  // namespace nanoddp
