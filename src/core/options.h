// Typed option structs with defaults and help text in one place. A struct names its fields once:
//
//   struct FooOptions {
//     int depth = 4;
//     template <typename V> void visit(V&& v) { v(depth, "depth", "number of transformer blocks"); }
//   };
//
// and everything that reads options walks that list: the CLI binds one flag per field
// (cli/option_flags.h), config files and checkpoint metadata go through options_to_json /
// options_from_json, and options_diff names the fields two copies disagree on (used to compare
// ranks and to check a resume). Word-valued fields (enums, core/option_value.h) are JSON strings.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/option_value.h"

namespace nanoddp {

// By value: visit() hands out mutable references (that is how cli/option_flags.h binds fields),
// so it needs a non-const struct; the copy lets callers pass a const one.
template <typename Options>
nlohmann::json options_to_json(Options opts) {
  nlohmann::json j = nlohmann::json::object();
  opts.visit([&](auto& field, const char* name, const char*) {
    if constexpr (TextOption<std::decay_t<decltype(field)>>)
      j[name] = option_text(field);
    else
      j[name] = field;
  });
  return j;
}

// Fields missing from `j` keep their current value; a key that names no field is an error.
// Throws nanoddp::Error naming `source` (a file, a checkpoint) and the option at fault.
template <typename Options>
void options_from_json(Options& opts, const nlohmann::json& j, std::string_view source) {
  NANODDP_CHECK(j.is_object(), "{}: expected a JSON object of options", source);
  size_t matched = 0;
  opts.visit([&](auto& field, const char* name, const char*) {
    auto it = j.find(name);
    if (it == j.end()) return;
    matched++;
    using T = std::decay_t<decltype(field)>;
    if constexpr (TextOption<T>) {
      NANODDP_CHECK(it->is_string(), "{}: option '{}' must be {} (got {})", source, name, OptionText<T>::expected(),
                    it->dump());
      field = parse_option<T>(it->template get<std::string>(), fmt::format("{}: option '{}'", source, name));
    } else {
      try {
        it->get_to(field);
      } catch (const nlohmann::json::exception& e) {
        NANODDP_FAIL("{}: option '{}' has the wrong type ({})", source, name, e.what());
      }
    }
  });
  // Some key matched no field: find it to name it (this quadratic scan runs only on the error path).
  if (matched != j.size()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      opts.visit([&](auto&, const char* name, const char*) { known = known || it.key() == name; });
      NANODDP_CHECK(known, "{}: unknown option '{}'", source, it.key());
    }
  }
}

struct OptionDifference {
  std::string name, left, right;
};

// The fields whose values differ, with both values as JSON text.
template <typename Options>
std::vector<OptionDifference> options_diff(const Options& a, const Options& b) {
  nlohmann::json ja = options_to_json(a), jb = options_to_json(b);
  std::vector<OptionDifference> out;
  // Both sides come from the same struct, so they have the same keys.
  for (auto it = ja.begin(); it != ja.end(); ++it)
    if (jb[it.key()] != it.value()) out.push_back({it.key(), it.value().dump(), jb[it.key()].dump()});
  return out;
}

}  // namespace nanoddp
