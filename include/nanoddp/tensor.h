// nanoddp's public API: tensors and devices.
//   nanoddp::Tensor (contiguous, row-major, shared storage; Tensor::empty / zeros, data<T>(), dim(i)),
//   Shape, DType (F32, BF16, ...), Device (Device::cpu(), Device::cuda(i)),
//   nanoddp::Error and NANODDP_CHECK (a user error with its message), Rng (seeded streams).
// The headers under nanoddp/detail/ are the library's own and may change between versions; include
// only the nanoddp/*.h files (docs/library.md).
#pragma once

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
