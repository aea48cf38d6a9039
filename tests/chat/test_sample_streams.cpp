// Per-sample streams (chat/sample_streams.h, Note [sample streams]).
#include <gtest/gtest.h>

#include <set>

#include "chat/sample_streams.h"

namespace nanoddp {
namespace {

TEST(SampleStreams, DifferPerSampleAndRepeatPerSeed) {
  std::set<uint64_t> seen;
  for (uint64_t problem = 0; problem < 64; problem++) {
    for (uint64_t sample = 0; sample < 8; sample++) {
      const uint64_t s = chat::sample_seed(42, problem, sample, 8);
      EXPECT_EQ(s, chat::sample_seed(42, problem, sample, 8)) << "the same seed and place must repeat";
      EXPECT_TRUE(seen.insert(s).second) << "problem " << problem << " sample " << sample << " repeats another";
    }
  }
  // Another run seed gives other streams for the same places.
  for (uint64_t problem = 0; problem < 64; problem++)
    for (uint64_t sample = 0; sample < 8; sample++)
      EXPECT_FALSE(seen.count(chat::sample_seed(43, problem, sample, 8))) << problem << "/" << sample;
}

// Seeds 0 and 1 with small places must not alias the way seed ^ place would (seed 1 at place 0 =
// seed 0 at place 1), nor give the run's seed itself to an answer.
TEST(SampleStreams, NeighbouringSeedsAndPlacesDoNotAlias) {
  EXPECT_NE(chat::sample_seed(1, 0, 0, 1), chat::sample_seed(0, 1, 0, 1));
  EXPECT_NE(chat::sample_seed(0, 0, 1, 2), chat::sample_seed(1, 0, 0, 2));
  for (uint64_t seed : {0, 1, 42}) EXPECT_NE(chat::sample_seed(seed, 0, 0, 1), seed);
}

}  // namespace
}  // namespace nanoddp
