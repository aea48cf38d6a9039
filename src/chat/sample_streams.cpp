#include "chat/sample_streams.h"

#include "core/error.h"
#include "core/rng.h"

namespace nanoddp::chat {

uint64_t sample_seed(uint64_t seed, uint64_t problem, uint64_t sample, uint64_t samples_per_problem) {
  NANODDP_ASSERT(sample < samples_per_problem);
  return stream_seed(seed, problem * samples_per_problem + sample);
}

}  // namespace nanoddp::chat
