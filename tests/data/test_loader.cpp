// The distributed token loader: in one epoch the ranks together read every row once and none
// twice, W ranks read what one rank with W accumulation steps reads (epoch after epoch), an epoch
// holds whole optimizer steps, the shuffle is seeded by (seed, epoch), and the state restores the
// position exactly. Plus the shard format's errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "data/loader.h"
#include "data/shard.h"
#include "test_util.h"

namespace nanoddp::data {
namespace {

// Shards whose tokens are their global positions: 0, 1, 2, ... (u32, so every id is distinct).
void write_counting_shards(const std::string& dir, const std::vector<int64_t>& sizes) {
  std::filesystem::create_directories(dir);
  int64_t next = 0;
  for (size_t s = 0; s < sizes.size(); s++) {
    ShardWriter w(fmt::format("{}/train_{:06d}.bin", dir, s), int64_t{1} << 20);
    std::vector<int32_t> tokens(sizes[s]);
    for (auto& t : tokens) t = static_cast<int32_t>(next++);
    w.append(tokens.data(), sizes[s]);
    w.finish();
  }
}

struct Row {
  int32_t first_input;
  bool operator<(const Row& o) const { return first_input < o.first_input; }
};

// Every rank's rows of one epoch, in call order.
std::vector<std::vector<int32_t>> read_epoch(const std::string& dir, int world, bool shuffle, int64_t b, int64_t t) {
  std::vector<std::vector<int32_t>> per_rank(world);
  for (int r = 0; r < world; r++) {
    TokenLoader loader(dir, "train", {b, t, r, world, shuffle, 99});
    const int64_t calls = loader.units_per_epoch() / world;
    Tensor in = Tensor::empty({b, t}, DType::I32), tg = Tensor::empty({b, t}, DType::I32);
    for (int64_t c = 0; c < calls; c++) {
      loader.next(in, tg);
      for (int64_t i = 0; i < b * t; i++) {
        per_rank[r].push_back(in.data<int32_t>()[i]);
        EXPECT_EQ(tg.data<int32_t>()[i], in.data<int32_t>()[i] + 1);  // targets are the next tokens
      }
    }
    EXPECT_EQ(loader.state().epoch, 0);
  }
  return per_rank;
}

class EpochCoverage : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(EpochCoverage, EveryRowOnceAndNoTokenTwice) {
  auto [world, shuffle] = GetParam();
  testing::ScratchDir dir(fmt::format("loader_cover_{}_{}", world, shuffle));
  write_counting_shards(dir.str(), {1000, 777});  // windows: 124 + 97 = 221; units of 3 windows: 73
  const int64_t b = 3, t = 8;
  auto per_rank = read_epoch(dir.str(), world, shuffle, b, t);
  std::set<int32_t> seen;
  int64_t total = 0;
  for (auto& tokens : per_rank) {
    for (int32_t tok : tokens) EXPECT_TRUE(seen.insert(tok).second) << "token " << tok << " read twice";
    total += static_cast<int64_t>(tokens.size());
  }
  const int64_t usable_units = 73 / world * world;
  EXPECT_EQ(total, usable_units * b * t);
  // What --num_epochs counts: the epoch's tokens the ranks take in lockstep, not the dropped tail.
  EXPECT_EQ(TokenLoader(dir.str(), "train", LoaderOptions{b, t, 0, world, shuffle, 5}).tokens_per_epoch(), total);
  if (!shuffle) {
    // In order, only the dropped tail of the epoch is missing: the inputs of every window.
    for (int64_t w = 0; w < usable_units * b; w++) {
      const int64_t first = w < 124 ? w * t : 1000 + (w - 124) * t;
      for (int64_t i = 0; i < t; i++) EXPECT_TRUE(seen.count(static_cast<int32_t>(first + i))) << first + i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, EpochCoverage,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(false, true)));

// Note [data order] across epochs: world W with A accumulation steps reads, call for call, what
// world 1 with W * A steps reads. 73 units (a prime: no world or step divides it), read for two
// epochs and a step: both cut each epoch after its last whole step. Cutting it by ranks (the old
// drop_last) had one rank read unit 72 where two ranks dropped it, and the orders parted there.
TEST(Loader, WorldWReadsWhatOneRankWithWAccumulationStepsReads) {
  testing::ScratchDir dir("loader_equivalence");
  write_counting_shards(dir.str(), {2340});  // (2340 - 1) / 16 = 146 windows, 73 units of 2
  const int64_t b = 2, t = 16, units = 73;
  for (bool shuffle : {false, true})
    for (int world : {2, 3})
      for (int accum : {1, 2}) {
        const int64_t step_units = int64_t{world} * accum;
        LoaderOptions one{b, t, 0, 1, shuffle, 5};
        one.step_units = step_units;
        TokenLoader single(dir.str(), "train", one);
        std::vector<TokenLoader> ranks;
        for (int r = 0; r < world; r++) {
          LoaderOptions lo{b, t, r, world, shuffle, 5};
          lo.step_units = step_units;
          ranks.emplace_back(dir.str(), "train", lo);
        }
        EXPECT_EQ(single.units_per_epoch(), units / step_units * step_units);
        EXPECT_EQ(ranks[0].tokens_per_epoch(), single.tokens_per_epoch());
        Tensor in = Tensor::empty({b, t}, DType::I32), tg = Tensor::empty({b, t}, DType::I32);
        auto ids = [&] { return std::vector<int32_t>(in.data<int32_t>(), in.data<int32_t>() + in.numel()); };
        const int64_t steps = 2 * (units / step_units) + 1;  // two epochs and a step into the third
        for (int64_t step = 0; step < steps; step++)
          for (int a = 0; a < accum; a++)
            for (int r = 0; r < world; r++) {  // the single rank's micro-step a * world + r of the step
              single.next(in, tg);
              auto want = ids();
              ranks[r].next(in, tg);
              ASSERT_EQ(ids(), want) << "shuffle " << shuffle << " world " << world << " accum " << accum
                                     << " step " << step << " micro-step " << a << " rank " << r;
            }
        EXPECT_EQ(single.state().epoch, 2) << "the test must cross epoch boundaries";
        for (const auto& rank : ranks) EXPECT_EQ(rank.state(), single.state());
      }
}

// An epoch is a whole number of steps: epoch_units rounds down to step_units, and to the world size
// only when the split is smaller than one step (the trainer warns then); the epoch turns over after
// exactly epoch_units / world calls on every rank.
TEST(Loader, AnEpochHoldsWholeSteps) {
  EXPECT_EQ(epoch_units(73, 1, 0), 73);
  EXPECT_EQ(epoch_units(73, 2, 0), 72);   // the default: one unit per rank
  EXPECT_EQ(epoch_units(73, 2, 8), 72);
  EXPECT_EQ(epoch_units(73, 2, 6), 72);
  EXPECT_EQ(epoch_units(73, 1, 5), 70);
  EXPECT_EQ(epoch_units(73, 3, 12), 72);
  EXPECT_EQ(epoch_units(73, 2, 10), 70);
  EXPECT_EQ(epoch_units(7, 2, 8), 6);     // less than one step
  EXPECT_EQ(epoch_units(7, 1, 8), 7);
  for (int64_t step_units : {1, 3, 5, 10, 80}) {
    LoaderState s;
    const int64_t usable = epoch_units(73, 1, step_units);
    for (int64_t i = 0; i < usable; i++) EXPECT_EQ(take_unit(s, 73, 0, 1, step_units), i);
    EXPECT_EQ(s.epoch, 0);
    EXPECT_EQ(take_unit(s, 73, 0, 1, step_units), 0);
    EXPECT_EQ(s, (LoaderState{1, 1})) << step_units;
  }
}

TEST(Loader, ShuffleIsSeededByEpochAndStateRestoresPosition) {
  testing::ScratchDir dir("loader_shuffle");
  write_counting_shards(dir.str(), {3000});
  const int64_t b = 1, t = 10;
  TokenLoader a(dir.str(), "train", {b, t, 0, 1, true, 1});
  Tensor in = Tensor::empty({b, t}, DType::I32), tg = Tensor::empty({b, t}, DType::I32);
  std::vector<int32_t> epoch0, epoch1;
  for (int64_t i = 0; i < a.units_per_epoch(); i++) {
    a.next(in, tg);
    epoch0.push_back(in.data<int32_t>()[0]);
  }
  LoaderState mid;
  for (int64_t i = 0; i < a.units_per_epoch(); i++) {
    if (i == 100) mid = a.state();
    a.next(in, tg);
    epoch1.push_back(in.data<int32_t>()[0]);
  }
  EXPECT_NE(epoch0, epoch1);  // a new order every epoch
  EXPECT_EQ(std::set<int32_t>(epoch0.begin(), epoch0.end()), std::set<int32_t>(epoch1.begin(), epoch1.end()));
  TokenLoader b2(dir.str(), "train", {b, t, 0, 1, true, 1});
  b2.set_state(mid);
  for (int64_t i = 100; i < static_cast<int64_t>(epoch1.size()); i++) {
    b2.next(in, tg);
    EXPECT_EQ(in.data<int32_t>()[0], epoch1[i]);
  }
}

TEST(Shards, BadFilesAreErrorsNamingTheFile) {
  testing::ScratchDir dir("shard_errors");
  write_counting_shards(dir.str(), {100});
  const std::string good = dir.str("train_000000.bin");
  EXPECT_EQ(ShardReader(good).size(), 100);
  // Each error names the file and what is wrong with it.
  const std::string cut = dir.str("cut.bin"), magic = dir.str("magic.bin"), missing = dir.str("missing.bin");
  std::filesystem::copy_file(good, cut);
  std::filesystem::resize_file(cut, 1024 + 50 * 4);
  NANODDP_EXPECT_ERROR(ShardReader r(cut), cut, "truncated");
  std::filesystem::copy_file(good, magic);
  {
    std::fstream f(magic, std::ios::in | std::ios::out | std::ios::binary);
    int32_t bad = 12345;
    f.write(reinterpret_cast<char*>(&bad), 4);
  }
  NANODDP_EXPECT_ERROR(ShardReader r(magic), magic, "not a token shard");
  NANODDP_EXPECT_ERROR(ShardReader r(missing), missing, "cannot open");
  EXPECT_THROW(TokenLoader(dir.str("empty"), "train", {1, 8, 0, 1, false, 0}), Error);
  EXPECT_THROW(TokenLoader(dir.str(), "val", {1, 8, 0, 1, false, 0}), Error);
  EXPECT_THROW(TokenLoader(dir.str(), "train", {20, 8, 0, 1, false, 0}), Error);  // too few windows
  // Shards shorter than a window hold none (a window never crosses a shard): the error says so.
  testing::ScratchDir small("shard_small");
  write_counting_shards(small.str(), {50, 50, 50});
  NANODDP_EXPECT_ERROR(TokenLoader(small.str(), "train", {1, 64, 0, 1, false, 0}), "3 of its 3 shards are shorter",
                       "--shard_tokens");
}

TEST(Shards, ATokenOutsideTheVocabularyNamesTheShardAndTheRealVocabulary) {
  testing::ScratchDir dir("shard_vocab");
  write_counting_shards(dir.str(), {100});  // tokens 0..99
  // Was: "target id 70 is outside [0, 64)" from a kernel, with the padded vocabulary, no file.
  TokenLoader loader(dir.str(), "train", {2, 8, 0, 1, false, 0, /*vocab_size=*/60});
  Tensor x = Tensor::empty({2, 8}, DType::I32), y = Tensor::empty({2, 8}, DType::I32);
  for (int i = 0; i < 3; i++) loader.next(x, y);  // rows up to token 48: inside
  NANODDP_EXPECT_ERROR(loader.next(x, y), dir.str("train_000000.bin"), "token 60 at position 60",
                       "vocabulary of 60 tokens");
}

}  // namespace
}  // namespace nanoddp::data
