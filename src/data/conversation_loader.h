// Micro-batches of conversations for SFT (nanochat's chat_sft), packed: each epoch, the rendered
// conversations (data/conversation.h), in an order seeded by (seed, epoch) when shuffling, are laid
// end to end into one stream of ids and masks, and cut into rows of T + 1 tokens like token
// shards; a row never holds padding. Targets whose mask is 0 are -1 (not trained on); with
// mask_all every target is trained on (mid-training style). Rows form units of B rows which the
// ranks take in turn from a global cursor (Note [data order] in data/loader.h), so N ranks read
// what one rank with N accumulation steps reads, epoch after epoch, and a position is {epoch, cursor}.
#pragma once

#include <string>
#include <vector>

#include "data/conversation.h"
#include "data/loader.h"
#include "data/tokenizer.h"

namespace nanoddp::data {

class ConversationLoader final : public BatchSource {
 public:
  ConversationLoader(const std::vector<std::string>& files, const Tokenizer& tok, const LoaderOptions& opts,
                     bool mask_all);

  void next(Tensor& inputs, Tensor& targets) override;
  LoaderState state() const override { return state_; }
  void set_state(const LoaderState& s) override { state_ = s; }
  int64_t units_per_epoch() const override { return epoch_units(units_, opts_.world, opts_.step_units); }
  int64_t tokens_per_epoch() const override { return units_per_epoch() * opts_.batch * opts_.seq; }
  int64_t conversations() const { return static_cast<int64_t>(rendered_.size()); }

 private:
  void build_stream();  // the stream of state_.epoch

  LoaderOptions opts_;
  bool mask_all_;
  std::vector<RenderedConversation> rendered_;
  std::vector<int32_t> ids_;   // the current epoch's stream
  std::vector<uint8_t> mask_;
  int64_t stream_epoch_ = -1;
  int64_t units_ = 0;          // all of the stream's, the dropped tail included
  LoaderState state_;
};

}  // namespace nanoddp::data
