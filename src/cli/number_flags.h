// Strict reading of numeric flag values, before CLI11 converts them. CLI11 2.1 alone reads
// integers with strtoll (so 2^64 saturates to 2^63 - 1 and "010" is octal 8), accepts an empty
// value as 0, and reads floats with strtold (so "nan", "inf" and 1e400, which becomes inf, pass).
// Each of those ran with a value the user did not mean: a loop bound of 2^63 - 1, a learning rate
// of 0. Here every value must be the whole text of a decimal number that fits its field's type;
// floats must be finite. The text is then rewritten in canonical form, which CLI11 reads exactly.
// Ranges of meaning (at least 1, at most the context) are checked by each command afterwards.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

namespace nanoddp::cli {

// Reads `text` as a T (an integer or floating-point type). On success rewrites `text` in canonical
// form and returns ""; otherwise returns what is wrong with it (the caller adds the flag's name).
template <typename T>
std::string read_number(std::string& text) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  constexpr bool integer = std::is_integral_v<T>;
  const char* kind = integer ? (std::is_unsigned_v<T> ? "whole number >= 0" : "whole number") : "number";
  if (text.empty()) return fmt::format("the value is empty; give a {}", kind);
  // '+' is allowed as a sign (from_chars does not take it); a second sign is not.
  const size_t start = text[0] == '+' && text.size() > 1 && text[1] != '-' && text[1] != '+' ? 1 : 0;
  const char* first = text.data() + start;
  const char* last = text.data() + text.size();
  T value{};
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec == std::errc::result_out_of_range) {
    const bool negative = *first == '-';
    if constexpr (integer) {
      if (negative && std::is_unsigned_v<T>) return fmt::format("must be a whole number >= 0 (got {})", text);
      return negative ? fmt::format("{} is too small: the smallest is {}", text, std::numeric_limits<T>::min())
                      : fmt::format("{} is too large: the largest is {}", text, std::numeric_limits<T>::max());
    } else {
      // Past the largest double, or so close to 0 that it is not representable.
      if (std::abs(std::strtod(text.c_str(), nullptr)) < 1)
        return fmt::format("{} is too close to 0 to represent (the smallest is about {}): give 0 or a larger value",
                           text, std::numeric_limits<T>::min());
      return fmt::format("{} is too large: the largest is about {}", text, std::numeric_limits<T>::max());
    }
  }
  if (ec != std::errc() || end != last) {
    if constexpr (integer)
      if (text.find('-') != std::string::npos && std::is_unsigned_v<T>)
        return fmt::format("must be a whole number >= 0 (got {})", text);
    return fmt::format("'{}' is not a {}{}", text, kind,
                       integer && text.find_first_of(".eE") != std::string::npos ? " (write it out in digits)" : "");
  }
  if constexpr (!integer) {
    if (std::isnan(value)) return fmt::format("{} is not a number; give a finite number", text);
    if (std::isinf(value)) return fmt::format("{} is not finite; give a finite number", text);
    // Shortest text that reads back as the same double: CLI11's strtold gives `value` again.
    text = fmt::format("{}", value);
  } else {
    text = std::to_string(value);
  }
  return "";
}

// A CLI11 transform that applies read_number<T> to each value of an option. No description: the
// help keeps showing the plain type (INT, UINT, FLOAT).
template <typename T>
CLI::Validator number_validator() {
  return CLI::Validator([](std::string& text) { return read_number<T>(text); }, "");
}

// An option bound to a numeric field, read strictly (for flags added by hand, not from a struct).
template <typename T>
CLI::Option* add_number_option(CLI::App& app, const std::string& names, T& field, const std::string& help) {
  return app.add_option(names, field, help)->transform(number_validator<T>());
}

}  // namespace nanoddp::cli
