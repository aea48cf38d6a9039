#include "data/loader.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace nanoddp::data {

std::vector<std::string> list_shards(const std::string& dir, const std::string& split) {
  NANODDP_CHECK(std::filesystem::is_directory(dir), "data directory {} does not exist; create it with `nanoddp data "
                "prepare --out {}`", dir, dir);
  std::vector<std::string> paths;
  for (int i = 0;; i++) {
    auto p = std::filesystem::path(dir) / fmt::format("{}_{:06d}.bin", split, i);
    if (!std::filesystem::exists(p)) break;
    paths.push_back(p.string());
  }
  NANODDP_CHECK(!paths.empty(), "no {} shards in {} (expected {}_000000.bin, ...); run `nanoddp data prepare`", split,
                dir, split);
  return paths;
}

int64_t epoch_units(int64_t units, int world, int64_t step_units) {
  const int64_t step = step_units > 0 ? step_units : world;
  NANODDP_ASSERT(world >= 1 && step % world == 0, "step_units {} is not a multiple of the world size {}", step_units,
                 world);
  // Less than one step: the trainer warns that each step reads the split more than once.
  return units >= step ? units / step * step : units / world * world;
}

int64_t take_unit(LoaderState& state, int64_t units, int rank, int world, int64_t step_units) {
  if (state.cursor >= epoch_units(units, world, step_units)) {
    state.epoch++;
    state.cursor = 0;
  }
  const int64_t unit = state.cursor + rank;
  state.cursor += world;
  return unit;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, const char* what, int64_t epoch) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  // Fisher-Yates from the back.
  Rng rng(seed, stream_id(what) + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; i--) std::swap(order[i], order[rng.next_u64() % uint64_t(i + 1)]);
  return order;
}

TokenLoader::TokenLoader(const std::string& dir, const std::string& split, const LoaderOptions& opts)
    : opts_(opts) {
  NANODDP_ASSERT(opts.batch >= 1 && opts.seq >= 1 && opts.world >= 1 && opts.rank >= 0 && opts.rank < opts.world);
  for (const auto& path : list_shards(dir, split)) {
    shards_.emplace_back(path);
    window_start_.push_back(windows_);
    windows_ += std::max<int64_t>(0, (shards_.back().size() - 1) / opts.seq);
  }
  units_ = windows_ / opts.batch;
  // A window never crosses a shard (llm.c's layout), so shards shorter than a window hold none.
  int64_t short_shards = 0;
  for (const auto& s : shards_) short_shards += s.size() < opts.seq + 1;
  NANODDP_CHECK(units_ >= opts.world, "the {} split of {} holds {} windows of {}+1 tokens: too few for {} rank(s) "
                "with device_batch_size {}; use more data, a smaller --max_seq_len or --device_batch_size{}", split,
                dir, windows_, opts.seq, opts.world, opts.batch,
                short_shards > 0 ? fmt::format(" ({} of its {} shards are shorter than one window, which never crosses "
                                               "a shard: prepare it again with a larger --shard_tokens)",
                                               short_shards, shards_.size())
                                 : std::string());
}

void TokenLoader::prepare_order() {
  if (!opts_.shuffle || order_epoch_ == state_.epoch) return;
  order_ = epoch_order(units_, true, opts_.seed, "loader", state_.epoch);
  order_epoch_ = state_.epoch;
}

void TokenLoader::next(Tensor& inputs, Tensor& targets) {
  const int64_t b = opts_.batch, t = opts_.seq;
  NANODDP_ASSERT(inputs.numel() == b * t && targets.numel() == b * t && inputs.dtype() == DType::I32);
  const int64_t unit = take_unit(state_, units_, opts_.rank, opts_.world, opts_.step_units);
  prepare_order();
  const int64_t first_window = (opts_.shuffle ? order_[unit] : unit) * b;
  std::vector<int32_t> buf(t + 1);
  for (int64_t i = 0; i < b; i++) {
    const int64_t w = first_window + i;
    const size_t s = std::upper_bound(window_start_.begin(), window_start_.end(), w) - window_start_.begin() - 1;
    const int64_t at = (w - window_start_[s]) * t;
    shards_[s].read(at, t + 1, buf.data());
    if (opts_.vocab_size > 0)
      for (int64_t j = 0; j <= t; j++)
        NANODDP_CHECK(buf[j] >= 0 && buf[j] < opts_.vocab_size, "{}: token {} at position {} is outside the "
                      "dataset's vocabulary of {} tokens: the shard is corrupt or was written with another "
                      "tokenizer; prepare the data again", shards_[s].path(), buf[j], at + j, opts_.vocab_size);
    std::copy(buf.begin(), buf.end() - 1, inputs.data<int32_t>() + i * t);
    std::copy(buf.begin() + 1, buf.end(), targets.data<int32_t>() + i * t);
  }
}

}  // namespace nanoddp::data
