// nanoddp's public API: joining the job and talking to the other ranks (torch.distributed's part).
//   dist::discover_environment()     what the launcher set (nanoddp run, torchrun, mpirun, srun)
//   dist::init_distributed(...)      init_process_group: a DistContext that owns the store and the
//                                    group; destroying it is destroy_process_group
//   dist::ProcessGroup               allreduce, broadcast, all_gather, reduce_scatter, barrier, ...
//                                    each returning a Work to wait() on; dist::ReduceOp
//   dist::allreduce_scalars(...)     a few doubles reduced across the ranks (metrics)
//   log::print0(...), log::warn(...) printing on rank 0 only
#pragma once

#include "comm/consistency.h"
#include "comm/init.h"
#include "comm/process_group.h"
#include "core/log.h"
