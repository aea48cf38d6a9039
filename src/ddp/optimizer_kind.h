// Which optimizer updates the parameters (OptimizerConfig::optimizer, --optimizer). Spelled in
// flags, configs and checkpoints as muon, adamw or sgd (see core/option_value.h).
#pragma once

#include <array>

#include "core/option_value.h"

namespace nanoddp::ddp {

enum class OptimizerKind {
  Muon,   // nanochat: Muon for the block matrices, AdamW for the embedding and the head
  AdamW,  // AdamW for every parameter
  Sgd,    // SGD with momentum for every parameter (torch.optim.SGD's rule)
};

inline constexpr std::array<EnumWord<OptimizerKind>, 3> kOptimizerWords = {{
    {OptimizerKind::Muon, "muon"}, {OptimizerKind::AdamW, "adamw"}, {OptimizerKind::Sgd, "sgd"}}};

}  // namespace nanoddp::ddp

template <>
struct nanoddp::OptionText<nanoddp::ddp::OptimizerKind> : EnumText<ddp::OptimizerKind, ddp::kOptimizerWords> {};
