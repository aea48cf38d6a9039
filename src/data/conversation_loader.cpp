#include "data/conversation_loader.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"

namespace nanoddp::data {

ConversationLoader::ConversationLoader(const std::vector<std::string>& files, const Tokenizer& tok,
                                       const LoaderOptions& opts, bool mask_all)
    : opts_(opts), mask_all_(mask_all) {
  NANODDP_CHECK(!files.empty(), "no conversation files given");
  int64_t tokens = 0;
  for (const auto& f : files)
    for (const auto& c : read_conversations(f)) {
      rendered_.push_back(render_conversation(tok, c));
      tokens += static_cast<int64_t>(rendered_.back().ids.size());
    }
  // Only the assistant's tokens are trained on (unless mask_all): conversations without any would
  // train on nothing and report a loss of 0.
  if (!mask_all) {
    int64_t trained = 0;
    for (const auto& r : rendered_) trained += std::count(r.mask.begin(), r.mask.end(), 1);
    NANODDP_CHECK(trained > 0, "the {} conversation(s) of {} have no assistant tokens to train or evaluate on (only the "
                  "assistant's turns are): give conversations with assistant turns, or --mask all", rendered_.size(),
                  files.front() + (files.size() > 1 ? fmt::format(" and {} more file(s)", files.size() - 1) : ""));
  }
  // The stream's length is the same every epoch (only the order changes), so the units are too.
  units_ = (tokens - 1) / opts.seq / opts.batch;
  NANODDP_CHECK(units_ >= opts.world, "{} conversations hold {} tokens: too few for {} rank(s) x {} rows of {} "
                "tokens; give more conversations, or a smaller --device_batch_size", rendered_.size(), tokens,
                opts.world, opts.batch, opts.seq);
}

void ConversationLoader::build_stream() {
  if (stream_epoch_ == state_.epoch) return;
  const std::vector<int64_t> order =
      epoch_order(static_cast<int64_t>(rendered_.size()), opts_.shuffle, opts_.seed, "conversations", state_.epoch);
  ids_.clear();
  mask_.clear();
  for (int64_t i : order) {
    ids_.insert(ids_.end(), rendered_[i].ids.begin(), rendered_[i].ids.end());
    mask_.insert(mask_.end(), rendered_[i].mask.begin(), rendered_[i].mask.end());
  }
  stream_epoch_ = state_.epoch;
}

void ConversationLoader::next(Tensor& inputs, Tensor& targets) {
  const int64_t b = opts_.batch, t = opts_.seq;
  NANODDP_ASSERT(inputs.numel() == b * t && targets.numel() == b * t && inputs.dtype() == DType::I32);
  const int64_t unit = take_unit(state_, units_, opts_.rank, opts_.world, opts_.step_units);
  build_stream();
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t r = 0; r < b; r++) {
    const int64_t start = (unit * b + r) * t;
    for (int64_t j = 0; j < t; j++) {
      in[r * t + j] = ids_[start + j];
      const bool trained = mask_all_ || mask_[start + j + 1] != 0;
      tg[r * t + j] = trained ? ids_[start + j + 1] : -1;
    }
  }
}

}  // namespace nanoddp::data
