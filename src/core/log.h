// Console output with DDP discipline: print0 writes on rank 0 only (progress, metrics), warn and
// error write on every rank with the rank named, so a message from rank 3 says it is from rank 3;
// warn0 is a warning that every rank computes alike, written once by rank 0.
// Used by train (progress and metrics lines), comm/init (sets the rank) and cli/main.cpp (names the
// rank in error lines).
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>

namespace nanoddp::log {

// Set by comm/init once the process group exists (and again by run_training). Until then the
// process counts as rank 0 of 1, so single-process tools print normally.
void set_rank(int rank, int world_size);
int rank();
int world_size();
bool is_primary();

// rank 0 only, to stdout, flushed: one line.
void print0_line(const std::string& text);
template <typename... Args>
void print0(fmt::format_string<Args...> format, Args&&... args) {
  if (!is_primary()) return;
  print0_line(fmt::format(format, std::forward<Args>(args)...));
}

// Rank 0's live status line (training progress). On a terminal it is rewritten in place, and
// print0's lines scroll above it; anywhere else (a file, a pipe to the launcher) it is an ordinary
// print0 line, so logs keep every step.
void status0(const std::string& text);
// Ends the live line (a newline after it on a terminal), so that later output starts below it.
void end_status0();

// every rank, to stderr, flushed: "[rank R] warning: ...", or "warning: ..." where nothing else names the
// rank: one process, or under `nanoddp run`, whose console puts "[rank R]: " before every line.
void warn_line(const std::string& text);
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  warn_line(fmt::format(format, std::forward<Args>(args)...));
}
// rank 0 only: a warning about what every rank computes alike (the run's sizes), said once.
template <typename... Args>
void warn0(fmt::format_string<Args...> format, Args&&... args) {
  if (!is_primary()) return;
  warn_line(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace nanoddp::log
