"""Where the garbage collector runs during ``checkpoint_dcp.py --sync-only --no-rss --repeat 8`` (issue 23).

Runs that benchmark's worker with a ``gc.callbacks`` hook that books every collection (count and CPU
time, by generation) to the operation it landed in: plain DCP's save, the store's save (by its
``keep_last``: the timed pair's store and the untimed save share 10000), the store's load, other.
Prints the totals per rank. Run::

    PYTHONPATH=src:. .venv/bin/python benchmarks/checkpoint_dcp_gc.py 1024,2048
"""
import gc
import sys
import tempfile
import time

def worker(rank, world, widths, repeat, root, sync_only, rss):
    import torch.distributed.checkpoint as dcp
    from lossguard.checkpoint import ShardedCheckpointStore
    import benchmarks.checkpoint_dcp as B
    label = ["other"]
    book = {}
    t = [0.0, 0]
    def cb(phase, info):
        if phase == "start":
            t[0], t[1] = time.process_time(), info["generation"]
        else:
            d = book.setdefault((label[0], t[1]), [0, 0.0])
            d[0] += 1
            d[1] += time.process_time() - t[0]
    gc.callbacks.append(cb)
    def wrap(obj, attr, name_fn):
        fn = getattr(obj, attr)
        def w(*a, **k):
            prev, label[0] = label[0], name_fn(a, k)
            try:
                return fn(*a, **k)
            finally:
                label[0] = prev
        setattr(obj, attr, w)
    wrap(ShardedCheckpointStore, "save", lambda a, k: f"store save keep_last={a[0].keep_last}")
    wrap(ShardedCheckpointStore, "load", lambda a, k: "store load")
    real_save = dcp.save
    def psave(*a, **k):
        if label[0] != "other":
            return real_save(*a, **k)
        label[0] = "plain save"
        try:
            return real_save(*a, **k)
        finally:
            label[0] = "other"
    dcp.save = psave
    out = B._worker(rank, world, widths, repeat, root, sync_only, rss)
    gc.callbacks.remove(cb)
    return out, {f"{k[0]} gen{k[1]}": v for k, v in book.items()}

if __name__ == "__main__":
    from lossguard.testing.distributed import run_distributed
    widths = [int(w) for w in sys.argv[1].split(",")]
    with tempfile.TemporaryDirectory() as root:
        res = run_distributed(worker, world_size=2, timeout=1800, args=(widths, 8, root, True, False))
    for r, (_, book) in enumerate(res):
        print("rank", r)
        for k in sorted(book):
            n, s = book[k]
            print(f"  {k:40s} {n:4d} collections {s*1e3:8.1f} ms total")
