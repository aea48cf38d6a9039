// nanoddp's whole public API in one include (as <torch/torch.h> is PyTorch's): tensors, kernels,
// the process group, the DDP engine, the optimizers, the sampler and checkpoint files.
#pragma once

#include "nanoddp/build_config.h"
#include "nanoddp/checkpoint.h"
#include "nanoddp/ddp.h"
#include "nanoddp/distributed.h"
#include "nanoddp/distributed_sampler.h"
#include "nanoddp/ops.h"
#include "nanoddp/optimizer.h"
#include "nanoddp/tensor.h"
