// nanoddp's public API: the data-parallel engine (torch.nn.parallel.DistributedDataParallel's part).
//   model::ParameterSet     what a model of one's own implements: its parameters in a fixed order
//   model::Parameter        name, kind, f32 data and grad, compute copy (ParamKind: Matrix, ...)
//   model::GradReadyFn      the hook a hand-written backward calls with i once parameter i's
//                           gradient is complete
//   ddp::Reducer            gradient buckets all-reduced while the backward runs; ReducerOptions
#pragma once

#include "ddp/reducer.h"
#include "model/parameter.h"
