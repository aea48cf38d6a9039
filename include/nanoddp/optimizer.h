// nanoddp's public API: the optimizers over the DDP engine's buckets, replicated or sharded (ZeRO).
//   ddp::OptimizerConfig    AdamW, Muon (nanochat) or SGD with momentum, and their settings
//   ddp::Optimizer          step(), state() for checkpoints as named tensors, load_state(...),
//                           unscale_and_check() for fp16 loss scaling
#pragma once

#include "ddp/optimizer.h"
