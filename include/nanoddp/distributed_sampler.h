// nanoddp's public API: data::DistributedSampler, torch.utils.data.DistributedSampler's indices
// (shuffle, seed + epoch, padding or drop_last) for this rank's share of a dataset.
#pragma once

#include "data/distributed_sampler.h"
