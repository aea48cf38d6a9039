// Binds a typed options struct (see core/options.h) to command-line flags: one flag per field,
// spelled with underscores as in nanochat and torchrun (--device_batch_size) and also accepted with
// dashes (--device-batch-size). Defaults and help text come from the struct.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <type_traits>

#include "cli/number_flags.h"

namespace nanoddp::cli {

// "--a_b,--a-b": CLI11 takes a comma-separated list of names; a name without '_' gets one.
inline std::string flag_names(const std::string& name) {
  std::string dashed = name;
  for (char& c : dashed)
    if (c == '_') c = '-';
  std::string names = dashed == name ? "--" + name : "--" + name + ",--" + dashed;
  // nanochat's names for the same settings, so its command lines work unchanged: --device_type
  // (cuda|cpu, as ours) and --resume_from_step N (our --resume N).
  if (name == "device") names += ",--device_type,--device-type";
  if (name == "resume") names += ",--resume_from_step,--resume-from-step";
  if (name == "module") names += ",-m";  // torchrun -m (nanoddp run)
  if (name == "redirects") names += ",-r";  // torchrun -r
  if (name == "tee") names += ",-t";        // torchrun -t
  return names;
}

// Fields are bound by reference: `opts` must outlive parsing and the callbacks (see commands.h).
template <typename Options>
void add_option_flags(CLI::App& app, Options& opts) {
  opts.visit([&](auto& field, const char* name, const char* help) {
    using T = std::decay_t<decltype(field)>;
    // A bool is a flag: --shuffle sets it, --shuffle=false clears one that defaults to true.
    // capture_default_str: --help shows the struct's default.
    // TakeLast: a flag given twice takes its last value, as argparse does (scripts append overrides:
    // `train.sh --depth 12` on top of a line that already says --depth 20).
    if constexpr (std::is_same_v<T, bool>) {
      app.add_flag(flag_names(name), field, help)->capture_default_str()->multi_option_policy(
          CLI::MultiOptionPolicy::TakeLast);
    } else {
      auto* o = app.add_option(flag_names(name), field, help)->capture_default_str()->multi_option_policy(
          CLI::MultiOptionPolicy::TakeLast);
      // Numbers are read strictly: no empty value, no saturation, no nan or inf (number_flags.h).
      if constexpr (std::is_arithmetic_v<T>) o->transform(number_validator<T>());
    }
  });
}

}  // namespace nanoddp::cli
