"""Gives a PyTorch CPU baseline the memory reuse nanoddp has, before torch is imported.

Note [PyTorch's CPU baseline and glibc's malloc]: PyTorch on the CPU takes every tensor from malloc
and frees it when the last reference goes. glibc serves blocks above its mmap threshold with a
fresh mmap and returns them on free, and it trims the heap's top on free, so a training step
faults its activations' pages in again every step. On this project's VMs those faults are
expensive and vary from day to day: on 2026-11-26 (Zen 5 kind, 1 thread, depth-4 AdamW f32)
tools/torch_train_bench.py ran at 605 tok/s with glibc's defaults and 2,730 tok/s with both
thresholds at 4 GiB, twice each; with both at 256 MiB it ran at 1,656, with either one alone at
257-698. nanoddp allocates its large buffers once and reuses them (core/allocator.h), so its
baselines run with both thresholds raised: freed memory stays in the process and is reused, as a
caching allocator (or jemalloc/tcmalloc, what a tuned PyTorch install uses) would give it.
NANODDP_TORCH_MALLOC=default measures PyTorch with glibc's defaults instead.
"""
import os
import sys

TUNABLES = "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"


def reexec_keeping_freed_memory():
    """Restarts this script with TUNABLES in GLIBC_TUNABLES (read by glibc only at process start),
    unless it is already set or NANODDP_TORCH_MALLOC=default. The process keeps its PID, so a
    launcher (torchrun) that watches it is not disturbed."""
    if "GLIBC_TUNABLES" in os.environ or os.environ.get("NANODDP_TORCH_MALLOC") == "default":
        return
    os.environ["GLIBC_TUNABLES"] = TUNABLES
    os.execv(sys.executable, [sys.executable] + sys.argv)
