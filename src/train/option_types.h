// The word-valued options of training (see core/option_value.h): what a run is (--stage), which
// tokens of a conversation it learns (--mask), its arithmetic (--dtype, --muon_precision), how it
// resumes (--resume) and how RL scores (--reward). The optimizer's and the backend's types belong to
// their layers (ddp/optimizer_kind.h, comm/backend_kind.h). The words are the ones checkpoints have
// always stored, so older checkpoints still load and resume.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/option_value.h"
#include "data/tasks.h"
#include "model/config.h"

namespace nanoddp::train {

// What a run is, recorded in its checkpoints: base training, supervised fine-tuning or RL.
enum class RunStage { Base, Sft, Rl };
inline constexpr std::array<EnumWord<RunStage>, 3> kStageWords = {
    {{RunStage::Base, "base"}, {RunStage::Sft, "sft"}, {RunStage::Rl, "rl"}}};

// Which tokens of a conversation are trained on: the assistant's, or all of them (mid-training).
enum class LossMask { Assistant, All };
inline constexpr std::array<EnumWord<LossMask>, 2> kLossMaskWords = {
    {{LossMask::Assistant, "assistant"}, {LossMask::All, "all"}}};

// Activations and matmul inputs; Auto is fp32 on the CPU, bf16 on CUDA (activation_dtype in
// validate.h). PyTorch's names are accepted too.
enum class DtypeChoice { Auto, F32, BF16, F16 };
inline constexpr std::array<EnumWord<DtypeChoice>, 8> kDtypeWords = {
    {{DtypeChoice::Auto, "auto"},
     {DtypeChoice::F32, "fp32"},
     {DtypeChoice::BF16, "bf16"},
     {DtypeChoice::F16, "fp16"},
     {DtypeChoice::F32, "float32"},
     {DtypeChoice::F32, "f32"},
     {DtypeChoice::BF16, "bfloat16"},
     {DtypeChoice::F16, "float16"}}};

// The arithmetic of Muon's Newton-Schulz iteration: bf16 (nanochat) or f32.
enum class MuonPrecision { BF16, F32 };
inline constexpr std::array<EnumWord<MuonPrecision>, 2> kMuonPrecisionWords = {
    {{MuonPrecision::BF16, "bf16"}, {MuonPrecision::F32, "f32"}}};

// The model's architecture (--recipe); the words are GPTConfig's JSON values (model::recipe_name).
inline constexpr std::array<EnumWord<model::Recipe>, 2> kRecipeWords = {
    {{model::Recipe::Classic, "classic"}, {model::Recipe::R2026, "2026"}}};

inline constexpr std::array<EnumWord<data::RewardRule>, 4> kRewardWords = {
    {{data::RewardRule::Auto, "auto"},
     {data::RewardRule::Gsm8k, "gsm8k"},
     {data::RewardRule::Contains, "contains"},
     {data::RewardRule::Exact, "exact"}}};

// --resume: nothing (a fresh run, "" in JSON), latest (the newest complete checkpoint; an error if
// none), auto (latest if any) or a step number.
struct ResumeSpec {
  enum class Mode { None, Latest, Auto, Step };
  Mode mode = Mode::None;
  int64_t step = -1;  // with Mode::Step

  bool operator==(const ResumeSpec&) const = default;
  bool empty() const { return mode == Mode::None; }
};

}  // namespace nanoddp::train

namespace nanoddp {

template <>
struct OptionText<train::RunStage> : EnumText<train::RunStage, train::kStageWords> {};
template <>
struct OptionText<train::LossMask> : EnumText<train::LossMask, train::kLossMaskWords> {};
template <>
struct OptionText<train::DtypeChoice> : EnumText<train::DtypeChoice, train::kDtypeWords> {};
template <>
struct OptionText<train::MuonPrecision> : EnumText<train::MuonPrecision, train::kMuonPrecisionWords> {};
template <>
struct OptionText<data::RewardRule> : EnumText<data::RewardRule, train::kRewardWords> {};
template <>
struct OptionText<model::Recipe> : EnumText<model::Recipe, train::kRecipeWords> {};

template <>
struct OptionText<train::ResumeSpec> {
  using Mode = train::ResumeSpec::Mode;
  static std::optional<train::ResumeSpec> parse(std::string_view text) {
    if (text.empty()) return train::ResumeSpec{};
    if (text == "latest") return train::ResumeSpec{Mode::Latest};
    if (text == "auto") return train::ResumeSpec{Mode::Auto};
    // The whole value, digits only: stoll would read "5abc" or "9e2" as an earlier step, and
    // resuming it would set the later checkpoints aside.
    int64_t step = -1;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, step);
    if (ec != std::errc() || ptr != end || step < 0) return std::nullopt;
    return train::ResumeSpec{Mode::Step, step};
  }
  static std::string format(const train::ResumeSpec& r) {
    switch (r.mode) {
      case Mode::None: return "";
      case Mode::Latest: return "latest";
      case Mode::Auto: return "auto";
      case Mode::Step: return std::to_string(r.step);
    }
    return "";
  }
  static std::string expected() { return "latest, auto or a step number"; }
};

}  // namespace nanoddp
