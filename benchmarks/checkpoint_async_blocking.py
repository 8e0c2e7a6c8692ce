"""Blocking time of ShardedCheckpointStore.async_save in one process (no process group): the call's
wall time (state dict, rank state, DCP's staging copy), and the time until published, median of N.
Run ``PYTHONPATH=src python benchmarks/checkpoint_async_blocking.py WIDTH N [LABEL]`` (issue 23;
WIDTH 2048 = a 192 MiB checkpoint)."""
import sys, time, statistics, tempfile, warnings, os
warnings.filterwarnings("ignore")
import torch
from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState
width = int(sys.argv[1]); n = int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model(torch.randn(8, width)).sum().backward(); opt.step()
root = tempfile.mkdtemp()
state = ShardedTrainState(model, opt, step=1); store = ShardedCheckpointStore(root + "/s", keep_last=10000, async_saves=True)
b, sd, pub = [], [], []
for i in range(n):
    state.step += 1
    t0 = time.perf_counter(); state.state_dict(); sd.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); p = state.async_save(store); b.append(time.perf_counter() - t0); p.wait(); pub.append(time.perf_counter() - t0)
print((sys.argv[3] if len(sys.argv) > 3 else ""), "blocking", round(statistics.median(b) * 1e3, 1), "state_dict", round(statistics.median(sd) * 1e3, 1), "published", round(statistics.median(pub) * 1e3, 1))
