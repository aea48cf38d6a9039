// Binds a typed options struct (see core/options.h) to command-line flags: one flag per field,
// spelled with underscores as in nanochat and torchrun (--device_batch_size) and also accepted with
// dashes (--device-batch-size). Defaults and help text come from the struct.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>
#include <type_traits>

#include "cli/number_flags.h"
#include "core/option_value.h"

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

// A CLI11 check of a word-valued option (core/option_value.h): a word it does not know is a usage
// error that lists the ones it does.
template <TextOption T>
CLI::Validator word_validator() {
  return CLI::Validator(
      [](std::string& text) {
        return OptionText<T>::parse(text) ? std::string()
                                          : fmt::format("must be {} (got '{}')", OptionText<T>::expected(), text);
      },
      "");
}

// Binds the fields one options struct (or section) visits, listed in --help under `group` (empty:
// CLI11's default group).
template <typename Options>
void add_field_flags(CLI::App& app, Options& opts, const std::string& group) {
  opts.visit([&](auto& field, const char* name, const char* help) {
    using T = std::decay_t<decltype(field)>;
    CLI::Option* o = nullptr;
    // A bool is a flag: --shuffle sets it, --shuffle=false clears one that defaults to true.
    // capture_default_str: --help shows the struct's default.
    if constexpr (std::is_same_v<T, bool>) {
      o = app.add_flag(flag_names(name), field, help)->capture_default_str();
    } else if constexpr (TextOption<T>) {
      // Parsed here, once: the code past the command line sees the type, never the text.
      o = app.add_option_function<std::string>(
                 flag_names(name), [&field](const std::string& text) { field = *OptionText<T>::parse(text); }, help)
              ->default_str(option_text(field))
              ->check(word_validator<T>());
    } else {
      o = app.add_option(flag_names(name), field, help)->capture_default_str();
      // Numbers are read strictly: no empty value, no saturation, no nan or inf (number_flags.h).
      if constexpr (std::is_arithmetic_v<T>) o->transform(number_validator<T>());
    }
    // TakeLast: a flag given twice takes its last value, as argparse does (scripts append overrides:
    // `train.sh --depth 12` on top of a line that already says --depth 20).
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (!group.empty()) o->group(group);
  });
}

template <typename Options>
concept HasSections = requires(Options& opts) { opts.visit_sections([](const char*, auto&) {}); };

// Fields are bound by reference: `opts` must outlive parsing and the callbacks (see commands.h).
// A struct with sections (train/options.h) lists each under its title in --help.
template <typename Options>
void add_option_flags(CLI::App& app, Options& opts) {
  if constexpr (HasSections<Options>)
    opts.visit_sections([&](const char* title, auto& section) { add_field_flags(app, section, title); });
  else
    add_field_flags(app, opts, "");
}

}  // namespace nanoddp::cli
