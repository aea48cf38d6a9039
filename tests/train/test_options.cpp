// Training's typed options (train/options.h, train/option_types.h): the words checkpoints and
// config files have always stored read back as the same typed values, are written back the same,
// and a word that names nothing fails with the words that do. The sections hold every flag once.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "core/options.h"
#include "test_util.h"
#include "train/options.h"

namespace nanoddp {
namespace {

using train::ResumeSpec;
using Mode = ResumeSpec::Mode;

// The "options" of a checkpoint written while these options were strings (every word-valued key,
// none with its default), as its meta.json holds them.
const char* kOldOptions = R"({"optimizer": "adamw", "stage": "sft", "mask": "all", "dtype": "bfloat16",
  "backend": "gloo", "resume": "12", "reward": "exact", "muon_precision": "f32", "depth": 4})";

TEST(TrainOptions, AnOlderCheckpointsWordsReadAsTypedValues) {
  train::TrainOptions o;
  options_from_json(o, nlohmann::json::parse(kOldOptions), "meta.json");
  EXPECT_EQ(o.optim.optimizer, ddp::OptimizerKind::AdamW);
  EXPECT_EQ(o.chat.stage, train::RunStage::Sft);
  EXPECT_EQ(o.chat.mask, train::LossMask::All);
  EXPECT_EQ(o.runtime.dtype, train::DtypeChoice::BF16);  // PyTorch's name for bf16
  EXPECT_EQ(o.runtime.backend, dist::BackendKind::Gloo);
  EXPECT_EQ(o.output.resume, (ResumeSpec{Mode::Step, 12}));
  EXPECT_EQ(o.rl.reward, data::RewardRule::Exact);
  EXPECT_EQ(o.optim.muon_precision, train::MuonPrecision::F32);
  EXPECT_EQ(o.model.depth, 4);
}

// What options_to_json writes is what older builds wrote for the same settings (an alias is written
// as its name), so a checkpoint of this build resumes under an older one and the reverse; and it
// reads back as the same options.
TEST(TrainOptions, WordsAreWrittenAsBeforeAndReadBackAlike) {
  train::TrainOptions o;
  options_from_json(o, nlohmann::json::parse(kOldOptions), "meta.json");
  const nlohmann::json j = options_to_json(o);
  auto expected = nlohmann::json::parse(kOldOptions);
  expected["dtype"] = "bf16";
  for (const auto& [key, value] : expected.items()) EXPECT_EQ(j.at(key), value) << key;
  train::TrainOptions back;
  options_from_json(back, j, "round trip");
  EXPECT_TRUE(options_diff(o, back).empty());
  // The defaults, as every run without these flags has stored them.
  const nlohmann::json d = options_to_json(train::TrainOptions{});
  const auto defaults = nlohmann::json::parse(R"({"optimizer": "muon", "stage": "base", "mask": "assistant",
      "dtype": "auto", "backend": "auto", "resume": "", "reward": "auto", "muon_precision": "bf16"})");
  for (const auto& [key, value] : defaults.items())
    EXPECT_EQ(d.at(key), value) << key;
}

TEST(TrainOptions, EveryEnumWordRoundTrips) {
  auto round_trips = []<typename E>(std::initializer_list<E> values) {
    for (E v : values) {
      EXPECT_EQ(OptionText<E>::parse(option_text(v)), v) << option_text(v);
    }
  };
  round_trips({ddp::OptimizerKind::Muon, ddp::OptimizerKind::AdamW, ddp::OptimizerKind::Sgd});
  round_trips({train::RunStage::Base, train::RunStage::Sft, train::RunStage::Rl});
  round_trips({train::LossMask::Assistant, train::LossMask::All});
  round_trips({train::DtypeChoice::Auto, train::DtypeChoice::F32, train::DtypeChoice::BF16, train::DtypeChoice::F16});
  round_trips({train::MuonPrecision::BF16, train::MuonPrecision::F32});
  round_trips({dist::BackendKind::Auto, dist::BackendKind::Gloo, dist::BackendKind::Mpi, dist::BackendKind::Nccl});
  round_trips({data::RewardRule::Auto, data::RewardRule::Gsm8k, data::RewardRule::Contains, data::RewardRule::Exact});
  for (const ResumeSpec& r : {ResumeSpec{}, ResumeSpec{Mode::Latest}, ResumeSpec{Mode::Auto}, ResumeSpec{Mode::Step, 0},
                              ResumeSpec{Mode::Step, 123456789}})
    EXPECT_EQ(OptionText<ResumeSpec>::parse(option_text(r)), r) << option_text(r);
  // The accepted spellings of --dtype (nanochat's and PyTorch's names).
  EXPECT_EQ(OptionText<train::DtypeChoice>::parse("float32"), train::DtypeChoice::F32);
  EXPECT_EQ(OptionText<train::DtypeChoice>::parse("f32"), train::DtypeChoice::F32);
  EXPECT_EQ(OptionText<train::DtypeChoice>::parse("float16"), train::DtypeChoice::F16);
}

TEST(TrainOptions, AWordThatNamesNothingListsTheWordsThatDo) {
  train::TrainOptions o;
  NANODDP_EXPECT_ERROR(options_from_json(o, nlohmann::json::parse(R"({"optimizer": "adam"})"), "cfg.json"),
                       "cfg.json: option 'optimizer' must be muon, adamw or sgd (got 'adam')");
  // Aliases are accepted but not listed: the names are.
  NANODDP_EXPECT_ERROR(options_from_json(o, nlohmann::json::parse(R"({"dtype": "f16"})"), "cfg.json"),
                       "option 'dtype' must be auto, fp32, bf16 or fp16 (got 'f16')");
  NANODDP_EXPECT_ERROR(options_from_json(o, nlohmann::json::parse(R"({"stage": 2})"), "cfg.json"),
                       "option 'stage' must be base, sft or rl (got 2)");
  for (const char* junk : {"2abc", "2e2", "-2", "two", " 3"})
    NANODDP_EXPECT_ERROR(parse_option<ResumeSpec>(junk, "--resume"), "--resume must be latest, auto or a step number",
                         junk);
  // A failed read leaves the options as they were.
  EXPECT_EQ(o.optim.optimizer, ddp::OptimizerKind::Muon);
}

// Every flag belongs to one section; `nanoddp rl`'s own flags (the RL section, which train and sft
// remove) are exactly those whose help says "RL", the mark the report reads (report_pipeline.cpp).
TEST(TrainOptions, SectionsHoldEveryFlagOnceAndRlHoldsTheRlFlags) {
  train::TrainOptions o;
  std::multiset<std::string> names;
  std::set<std::string> marked_rl;
  o.visit([&](auto&, const char* name, const char* help) {
    names.insert(name);
    if (std::string(help).starts_with("RL")) marked_rl.insert(name);
  });
  for (const auto& n : names) EXPECT_EQ(names.count(n), 1u) << n;
  std::set<std::string> rl;
  train::RlOptions{}.visit([&](auto&, const char* name, const char*) { rl.insert(name); });
  EXPECT_EQ(rl, marked_rl);
  EXPECT_TRUE(rl.contains("task") && rl.contains("reward"));
  size_t in_sections = 0;
  o.visit_sections([&](const char*, auto& section) {
    section.visit([&](auto&, const char*, const char*) { in_sections++; });
  });
  EXPECT_EQ(in_sections, names.size());
}

}  // namespace
}  // namespace nanoddp
