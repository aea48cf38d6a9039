// Options whose value is one of a few words (an enum such as the optimizer) or a word-or-number
// (--resume latest|auto|STEP). They are typed in the options structs and parsed once, where text
// enters: a flag (cli/option_flags.h), a config file or a checkpoint's meta.json (core/options.h).
// They are written back with the same words, so files written while they were strings still read.
//
// A type opts in by specialising OptionText:
//
//   template <> struct OptionText<Stage> : EnumText<Stage, kStageNames> {};
//
// where kStageNames lists {value, word} pairs; the first word of a value is its name, later ones
// are accepted spellings (dtype's float32 for fp32).
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace nanoddp {

// Specialised by each word-valued option type: static std::optional<T> parse(std::string_view),
// static std::string format(const T&), static std::string expected() (for errors: "a, b or c").
template <typename T>
struct OptionText;

template <typename T>
concept TextOption = requires(std::string_view text, const T& value) {
  { OptionText<T>::parse(text) } -> std::same_as<std::optional<T>>;
  { OptionText<T>::format(value) } -> std::convertible_to<std::string>;
  { OptionText<T>::expected() } -> std::convertible_to<std::string>;
};

template <typename E>
struct EnumWord {
  E value;
  std::string_view word;
};

// OptionText for an enum, from its table of words (see the top of this file).
template <typename E, const auto& Words>
struct EnumText {
  static std::optional<E> parse(std::string_view text) {
    for (const EnumWord<E>& w : Words)
      if (w.word == text) return w.value;
    return std::nullopt;
  }
  static std::string format(E value) {
    for (const EnumWord<E>& w : Words)
      if (w.value == value) return std::string(w.word);
    NANODDP_ASSERT(false, "an enum value without a word ({})", static_cast<int>(value));
    return "";
  }
  // The names (first word of each value) in table order: "muon, adamw or sgd".
  static std::string expected() {
    std::string out;
    size_t named = 0, count = 0;
    for (size_t i = 0; i < Words.size(); i++) count += is_name(i);
    for (size_t i = 0; i < Words.size(); i++) {
      if (!is_name(i)) continue;
      named++;
      out += (named == 1 ? "" : named == count ? " or " : ", ") + std::string(Words[i].word);
    }
    return out;
  }

 private:
  static bool is_name(size_t i) {
    for (size_t k = 0; k < i; k++)
      if (Words[k].value == Words[i].value) return false;
    return true;
  }
};

// The word `value` is written as (in flags' help, JSON and messages).
template <TextOption T>
std::string option_text(const T& value) {
  return OptionText<T>::format(value);
}

// Reads `text` as a T, or throws nanoddp::Error "<what> must be <expected> (got '<text>')".
template <TextOption T>
T parse_option(std::string_view text, std::string_view what) {
  const std::optional<T> value = OptionText<T>::parse(text);
  NANODDP_CHECK(value.has_value(), "{} must be {} (got '{}')", what, OptionText<T>::expected(), text);
  return *value;
}

}  // namespace nanoddp
