#!/usr/bin/python3
"""PyTorch 1.13 DDP baseline of bench/train_ddp_bench.cpp (build/bench/bench_train_ddp) (bench/ddp_cpu_bench.sh): the same model
(tools/torch_golden.py's forward as an nn.Module), the same global batch split over the ranks,
torch.nn.parallel.DistributedDataParallel over Gloo (default 25 MiB buckets), AdamW. Run under
torchrun; rank 0 prints one JSON line."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keep_freed_memory import reexec_keeping_freed_memory  # noqa: E402

reexec_keeping_freed_memory()  # before torch allocates: Note [PyTorch's CPU baseline and glibc's malloc]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_golden as golden  # noqa: E402
import torch_train_bench as single  # noqa: E402


class GPT(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.names = list(weights)
        self.weights = torch.nn.ParameterList([weights[n] for n in self.names])

    def forward(self, idx):
        return golden.forward(dict(zip(self.names, self.weights)), self.cfg, idx)


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("depth", 4), ("vocab", 4096), ("seq", 128), ("global_batch", 16), ("steps", 20),
                          ("warmup", 3)]:
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg, weights = single.build(a.depth, a.vocab, a.seq)
    model = torch.nn.parallel.DistributedDataParallel(GPT(cfg, weights))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0)
    g = torch.Generator().manual_seed(7 + rank)
    batch = a.global_batch // world
    x = torch.randint(0, a.vocab, (batch, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (batch, a.seq), generator=g)

    def step():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = torch.tensor([(time.perf_counter() - t0) / a.steps])
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"world": world, "tokens_per_s": a.global_batch * a.seq / dt.item(), "torch": torch.__version__}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
