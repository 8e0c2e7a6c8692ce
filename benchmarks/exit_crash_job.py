"""The smallest distributed job that aborted at exit (issue 23): ``init_distributed``, a
``ResumableSampler`` and a few all-reduces, then return -- no ``destroy_process_group()`` of its
own. Run by ``benchmarks/exit_crash.py`` under ``torchrun --nproc-per-node 2``."""
import torch
import torch.distributed as dist

from lossguard.data.sampler import ResumableSampler
from lossguard.distributed.restart import init_distributed

ctx = init_distributed("gloo", timeout_s=60)
sampler = ResumableSampler(64, batch_size=4, seed=0, num_replicas=ctx.world_size, rank=ctx.rank)
for _ in range(5):
    t = torch.tensor([float(sum(next(iter(sampler))))])
    dist.all_reduce(t)
