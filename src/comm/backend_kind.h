// Which process group the ranks use (--backend). Spelled auto, gloo, mpi or nccl in flags, configs
// and checkpoints (see core/option_value.h); auto is resolved by dist::resolve_backend.
#pragma once

#include <array>

#include "core/option_value.h"

namespace nanoddp::dist {

enum class BackendKind { Auto, Gloo, Mpi, Nccl };

inline constexpr std::array<EnumWord<BackendKind>, 4> kBackendWords = {{
    {BackendKind::Auto, "auto"}, {BackendKind::Gloo, "gloo"}, {BackendKind::Mpi, "mpi"}, {BackendKind::Nccl, "nccl"}}};

}  // namespace nanoddp::dist

template <>
struct nanoddp::OptionText<nanoddp::dist::BackendKind> : EnumText<dist::BackendKind, dist::kBackendWords> {};
