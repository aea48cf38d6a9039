"""The DDP guide's Fashion-MNIST MLP under PyTorch DDP, the baseline of bench/fashion_mnist_bench.sh:
784 -> 256 -> ReLU -> 10, cross-entropy, Adam (lr 1e-3), DistributedSampler, batch per rank, the
same idx files. Run with torchrun; prints one JSON line with samples_per_s and test_accuracy."""
import argparse, gzip, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keep_freed_memory import reexec_keeping_freed_memory  # noqa: E402

reexec_keeping_freed_memory()  # before torch allocates: Note [PyTorch's CPU baseline and glibc's malloc]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402


def load(folder, prefix):
    with gzip.open(f"{folder}/{prefix}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(f"{folder}/{prefix}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train = load(a.data, "train")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=a.batch_size, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    seconds, samples = 0.0, 0
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        seconds += time.perf_counter() - t0
        samples += len(sampler) * world
    test = load(a.data, "t10k")
    with torch.no_grad():
        acc = (model.module(test.tensors[0]).argmax(1) == test.tensors[1]).float().mean().item()
    if rank == 0:
        print(json.dumps({"world": world, "samples_per_s": samples / seconds, "test_accuracy": acc,
                          "torch": torch.__version__}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
