// The random stream of each sampled answer (eval's answers, RL's samples).
//
// Note [sample streams]: answer `sample` of problem (or question draw) `problem` samples from its
// own stream, core/rng's stream_seed(seed, problem * samples_per_problem + sample) under the run's
// seed. The answer then depends on the seed and on its place in the run only, not on which rank
// samples it nor on what was sampled before it, so any world size gives the same answers.
#pragma once

#include <cstdint>

namespace nanoddp::chat {

// The seed generate() takes for that answer.
uint64_t sample_seed(uint64_t seed, uint64_t problem, uint64_t sample, uint64_t samples_per_problem);

}  // namespace nanoddp::chat
