// The CPU backend's instance and its thread count (the kernels live in the other files here).
#include <omp.h>

#include "ops/backend.h"
#include "ops/cpu/kernels.h"

namespace nanoddp::ops {

Backend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

void set_cpu_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int cpu_threads() { return omp_get_max_threads(); }

// A parallel region of the kernels' team size (the caller is its thread 0): each of its threads runs
// fn once, and libgomp keeps those threads for the later regions.
void on_every_cpu_thread(const std::function<void()>& fn) {
#pragma omp parallel
  fn();
}

}  // namespace nanoddp::ops
