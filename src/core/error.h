// Two kinds of failure (see docs/ARCHITECTURE.md, "Errors"):
//  - nanoddp::Error: the user's input or the environment is wrong (missing file, bad flag, peer
//    gone). Thrown with NANODDP_CHECK / NANODDP_FAIL; the message says what happened and what to do.
//    The CLI prints it as one line and exits non-zero.
//  - A broken invariant is a bug in nanoddp: NANODDP_ASSERT prints the expression, file and line
//    and aborts, so that a core dump or debugger lands on it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nanoddp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// NANODDP_ASSERT's slow path: prints "internal error (a bug, please report it)" with the expression,
// file, line and message to stderr, then aborts. Out of line so each assert site stays small.
[[noreturn]] void internal_failure(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace nanoddp

// The format string is checked against its arguments at compile time (fmt::format_string).
#define NANODDP_FAIL(...) throw ::nanoddp::Error(::fmt::format(__VA_ARGS__))

// A macro, so the message is formatted only when the check fails: a check costs one branch.
#define NANODDP_CHECK(cond, ...)  \
  do {                            \
    if (!(cond)) [[unlikely]] {   \
      NANODDP_FAIL(__VA_ARGS__);  \
    }                             \
  } while (0)

// `"" __VA_ARGS__` pastes the format literal onto "", so the message is optional:
// NANODDP_ASSERT(p != nullptr) works.
#define NANODDP_ASSERT(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::nanoddp::internal_failure(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                     \
  } while (0)
