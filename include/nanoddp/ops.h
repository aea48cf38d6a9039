// nanoddp's public API: the kernels a hand-written forward and backward call (nanoddp has no
// autograd). Free functions in nanoddp::ops that dispatch on their tensors' device: matmul, fill,
// scale, axpy, cast (f32 <-> bf16), sum_squares, and the GPT's own layers; their shapes are
// written beside each in the op list. ops::set_cpu_threads(n) sets the CPU kernels' threads.
#pragma once

#include "ops/backend.h"
#include "ops/ops.h"
