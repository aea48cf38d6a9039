// Wall-clock time for throughput figures.
// Used for step times (train), benchmark figures and data preparation rates. steady_clock is
// monotonic, so a clock adjustment mid-run cannot give a negative or huge interval.
#pragma once

#include <chrono>

namespace nanoddp {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since construction or the last reset().
class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  double seconds() const { return now_seconds() - start_; }
  void reset() { start_ = now_seconds(); }

 private:
  double start_;
};

}  // namespace nanoddp
