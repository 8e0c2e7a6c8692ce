"""Where a sharded save's and load's time goes: wall time per phase on each of 2 FSDP2 ranks (issue 23).

Wraps (monkeypatches) the calls of a save and a load -- ``dcp.save`` / ``dcp.load`` of the store
and of plain DCP, ``os.fsync`` on the calling thread, the object collectives, and the store's own
steps (whichever exist in the lossguard on ``PYTHONPATH``: this branch's ``publish_files`` /
``fsync_together`` / ``PublishingWriter``, or the older ``finish_save`` / ``publish_gathered``) --
and prints, per rank, the milliseconds each took per repeat, beside the paired plain/store totals
(alternating order). Run (``--`` widths comma-separated, then the number of repeats)::

    PYTHONPATH=src:. python benchmarks/checkpoint_phases.py 1024,2048 6
"""
import os, sys, time, statistics, tempfile, functools, json
from pathlib import Path

def _wrap(mod, name, label, acc):
    fn = getattr(mod, name)
    @functools.wraps(fn)
    def w(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc.setdefault(label, []).append(time.perf_counter() - t0)
    setattr(mod, name, w)

def worker(rank, world, widths, repeat, root):
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    import lossguard.checkpoint.sharded as S, lossguard.checkpoint.sharded_publish as SP
    import lossguard.checkpoint.sharded_load as SL, lossguard.checkpoint.manifest as M
    import lossguard.checkpoint.store as ST, lossguard.checkpoint.files as F
    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState
    acc = {}
    targets = [(os, "fsync", "os.fsync (calling thread)"), (dist, "gather_object", "gather_object"),
               (dist, "broadcast_object_list", "broadcast_object_list"), (dist, "all_gather_object", "all_gather_object"),
               (S.ShardedCheckpointStore, "_recover", "_recover"), (S.ShardedCheckpointStore, "prune", "prune"),
               (S.ShardedCheckpointStore, "save", "store.save"), (S.ShardedCheckpointStore, "load", "store.load"),
               (ShardedTrainState, "state_dict", "TrainState.state_dict"),
               (ShardedTrainState, "load_state_dict", "TrainState.load_state_dict")]
    if hasattr(SP, "publish_files"):
        import lossguard.checkpoint.sharded_writer as SW
        targets += [(SP, "publish_files", "publish_files (rank 0, in finish)"), (SP, "fsync_together", "fsync_together"),
                    (SW.PublishingWriter, "finish", "PublishingWriter.finish"), (SW.PublishingWriter, "write_data", "PublishingWriter.write_data"),
                    (SL, "verify_share", "verify_share")]
    else:
        targets += [(SP, "write_manifest", "write_manifest"), (SP, "publish_gathered", "publish_gathered"),
                    (S, "finish_save", "finish_save"), (SL, "verify_share", "verify_share"), (ST.CheckpointStore, "_publish", "_publish")]
    for mod, name, label in targets:
        _wrap(mod, name, label, acc)
    realsave, realload = dcp.save, dcp.load
    def tsave(*a, **k):
        t0 = time.perf_counter(); r = realsave(*a, **k)
        acc.setdefault("dcp.save(plain)" if "checkpoint_id" in k else "dcp.save(store)", []).append(time.perf_counter() - t0); return r
    def tload(*a, **k):
        t0 = time.perf_counter(); r = realload(*a, **k)
        acc.setdefault("dcp.load(plain)" if "checkpoint_id" in k and "storage_reader" not in k else "dcp.load(store)", []).append(time.perf_counter() - t0); return r
    dcp.save, dcp.load = tsave, tload
    mesh = init_device_mesh("cpu", (world,))
    out = {}
    for width in widths:
        acc.clear()
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
        for l in model: fully_shard(l, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(8, width)).sum().backward(); opt.step()
        state = ShardedTrainState(model, opt, step=1)
        base = Path(root) / f"w{width}"
        store = ShardedCheckpointStore(base / "store", keep_last=3)
        tot = {}
        for k in range(repeat):
            state.step = 100 + k
            for name, fn in ([("plain save", lambda: dcp.save(dict(zip(("model", "optim"), get_state_dict(model, opt))), checkpoint_id=base / f"p{k}")),
                              ("store save", lambda: state.save(store))][:: 1 if k % 2 == 0 else -1]):
                dist.barrier(); t0 = time.perf_counter(); fn(); tot.setdefault(name, []).append(time.perf_counter() - t0)
            def pl():
                msd, osd = get_state_dict(model, opt); sd = {"model": msd, "optim": osd}
                dcp.load(sd, checkpoint_id=base / f"p{k}"); set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
            for name, fn in ([("plain load", pl), ("store load", lambda: state.restore(store, 100 + k))][:: 1 if k % 2 == 0 else -1]):
                dist.barrier(); t0 = time.perf_counter(); fn(); tot.setdefault(name, []).append(time.perf_counter() - t0)
        out[width] = {"tot": {k: statistics.median(v) * 1e3 for k, v in tot.items()},
                      "acc": {k: (len(v), sum(v) * 1e3 / repeat) for k, v in acc.items()}}
    return out

def main():
    from lossguard.testing.distributed import run_distributed
    widths = [int(w) for w in sys.argv[1].split(",")]; repeat = int(sys.argv[2])
    with tempfile.TemporaryDirectory() as root:
        res = run_distributed(worker, world_size=2, timeout=900, args=(widths, repeat, root))
    for w in widths:
        print(f"== width {w}")
        for r, rr in enumerate(res):
            print(f" rank {r} totals (median ms):", {k: round(v, 1) for k, v in rr[w]["tot"].items()})
            for k, (n, ms) in sorted(rr[w]["acc"].items(), key=lambda x: -x[1][1]):
                print(f"   {k:28s} calls/rep {n/repeat:5.1f}  ms/rep {ms:7.2f}")


if __name__ == "__main__":
    main()
