// Console output with DDP discipline: print0 writes on rank 0 only (progress, metrics), warn and
// error write on every rank with the rank named, so a message from rank 3 says it is from rank 3.
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace nanoddp::log {

void set_rank(int rank, int world_size);
int rank();
int world_size();
bool is_primary();

// rank 0 only, to stdout, flushed.
template <typename... Args>
void print0(fmt::format_string<Args...> format, Args&&... args) {
  if (!is_primary()) return;
  fmt::print(stdout, format, std::forward<Args>(args)...);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// every rank, to stderr: "[rank R] warning: ..."
void warn_line(const std::string& text);
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  warn_line(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace nanoddp::log
