"""Attribution in isolation: the gradient bisection finds a sample whose loss is ordinary but whose
gradient is not, within its stated cost; naming leaves RNG, grads and buffers untouched; a batch
without sample ids is reported as such; bad settings are clear errors."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.errors import ConfigError  # noqa: E402
from lossguard.guard.attribution import gradient_findings, split  # noqa: E402
from lossguard.guard.events import EventLog  # noqa: E402
from lossguard.guard.sample_namer import NameMethod, SampleAttribution, SampleNamer  # noqa: E402
from lossguard.recovery.ledger import RunLedger  # noqa: E402


def _regression(n: int, loud: list[int], seed: int = 0):
    """``y = x @ w + noise``; the ``loud`` rows have x scaled 300x and y moved so that their residual
    under the reference weights stays ordinary: ordinary loss, enormous gradient (grad = 2 r x)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    w = torch.randn(6, 1, generator=g)
    model = torch.nn.Linear(6, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_((w + 0.05 * torch.randn(6, 1, generator=g)).T)
    for r in loud:
        x[r] *= 300.0
    with torch.no_grad():
        y = model(x) + 0.3 * torch.randn(n, 1, generator=g)  # residuals ~N(0, 0.3) for every row
        for k, r in enumerate(loud):
            y[r] = model(x[r:r + 1])[0] + (0.3 if k % 2 else -0.3)  # a typical residual, one sigma
    ids = torch.arange(1000, 1000 + n)
    return model, (ids, x, y)


def _row_loss(model, batch):
    return (model(batch[1]) - batch[2]).pow(2).reshape(-1)


def _namer(model, **kw):
    cfg = SampleAttribution(per_sample_loss=_row_loss, ids_of=lambda b: b[0].tolist(), **kw)
    return SampleNamer.build(cfg, model=model, sampler=None, store=None, log=EventLog(None),
                             ledger=lambda: RunLedger(), world=1)


def test_gradient_bisection_names_an_ordinary_loss_with_an_enormous_gradient():
    model, batch = _regression(64, [37])
    losses = _row_loss(model, batch).tolist()
    assert sorted(losses).index(losses[37]) < 60  # its loss is ordinary: not among the top 4 of 64
    rec = _namer(model).name(step=5, batch_index=5, batch=batch, loss_flagged=False)
    assert rec["method"] == "gradient" and [s["id"] for s in rec["suspects"]] == [1037]
    assert rec["suspects"][0]["share"] > 0.5 and rec["named"] and rec["skiplisted"]
    assert rec["passes"]["backward"] <= 1.5


def test_micro_batches_of_one_step_are_named_as_one_batch():
    from lossguard.guard.attribution import select_rows
    from lossguard.guard.micro_batches import MicroBatches

    model, batch = _regression(48, [29])
    parts = MicroBatches([select_rows(batch, list(range(k, k + 16))) for k in (0, 16, 32)])
    rec = _namer(model).name(step=3, batch_index=3, batch=parts, loss_flagged=False)
    assert rec["micro_batches"] == 3 and rec["batch_rows"] == 48 and rec["method"] == "gradient"
    assert [(s["id"], s["row"]) for s in rec["suspects"]] == [(1029, 29)]
    # level one: one gradient norm per micro-batch (a full pass), then only inside the loud one
    assert rec["passes"]["backward"] <= 1 + 16 / 48 + 2 / 48 + 1e-9


def test_under_fsdp_only_the_losses_are_used_and_the_record_says_why():
    model, batch = _regression(64, [37])
    namer = _namer(model)
    namer.loss_only = True
    rec = namer.name(step=5, batch_index=5, batch=batch, loss_flagged=False)
    assert rec["method"] == "loss" and not rec["suspects"] and rec["passes"]["backward"] == 0
    assert "gradient bisection is off under FSDP" in rec["why"]


@pytest.mark.parametrize("n,loud", [(1024, [3, 700]), (256, [128]), (9, [8])])
def test_bisection_cost_stays_within_two_passes_for_large_batches(n, loud):
    model, batch = _regression(n, loud, seed=n)
    found, cost, energy = gradient_findings(model, batch, n, _row_loss, groups=8)
    assert sorted(f.row for f in found) == loud
    assert cost <= 1 + len(loud) * (1 / 8 + 1 / 64 + 1 / 512 + 1 / 4096) + 1e-9 or n < 16
    assert math.isclose(sum(f.share for f in found), 1.0, rel_tol=0.05)
    assert sum(len(p) for p in split(range(n), 8)) == n


def test_naming_leaves_rng_grads_and_buffers_as_they_were():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.3),
                                torch.nn.Linear(8, 1))
    _, batch = _regression(32, [4])
    (_row_loss(model, batch).mean()).backward()
    grads = [p.grad for p in model.parameters()]
    copies = [g.clone() for g in grads]
    buffers = [b.clone() for b in model.buffers()]
    params = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    rec = _namer(model, method=NameMethod.GRADIENT).name(step=1, batch_index=1, batch=batch)
    assert rec["passes"]["backward"] > 0  # backward passes did run
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(p.grad is g for p, g in zip(model.parameters(), grads, strict=True))
    assert all(torch.equal(g, c) for g, c in zip(grads, copies, strict=True))
    assert all(torch.equal(b, c) for b, c in zip(model.buffers(), buffers, strict=True))
    assert all(torch.equal(p, c) for p, c in zip(model.parameters(), params, strict=True))


def test_a_batch_without_sample_ids_is_reported_and_nothing_is_listed():
    model, batch = _regression(16, [])
    with torch.no_grad():
        batch[2][5] += 40.0  # an ordinary x with a wild label: the loss separates it
    cfg = SampleAttribution(per_sample_loss=_row_loss)
    namer = SampleNamer.build(cfg, model=model, sampler=None, store=None, log=EventLog(None),
                              ledger=lambda: RunLedger(), world=1)
    rec = namer.name(step=2, batch_index=2, batch=batch)
    assert rec["named"] is False and "no sample ids" in rec["why"]
    assert [s["row"] for s in rec["suspects"]] == [5] and "id" not in rec["suspects"][0]
    assert len(namer.skiplist) == 0
    gone = namer.name(step=3, batch_index=3, batch=None)
    assert gone["named"] is False and "cannot be replayed" in gone["why"]


def test_guard_on_an_iterable_loader_without_positions_says_it_cannot_name(tmp_path):
    from lossguard.guard.config import GuardConfig
    from lossguard.guard.guard import StabilityGuard

    model, batch = _regression(16, [])
    stream = [(batch[0], batch[1], batch[2].clone()) for _ in range(40)]
    with torch.no_grad():
        stream[30][2][7] += 500.0
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    guard = StabilityGuard(model, opt, config=GuardConfig(checkpoint_every=None),
                           attribution=SampleAttribution(per_sample_loss=_row_loss), log_path=tmp_path / "g.jsonl")
    for _, b in guard.batches(stream):
        loss = _row_loss(model, b).mean()
        loss.backward()
        guard.step(loss)
    recs = [r for r in guard.events if r["event"] == "suspects"]
    assert [r["step"] for r in recs] == [30] and not recs[0]["named"] and "no sample ids" in recs[0]["why"]
    assert recs[0]["suspects"][0]["row"] == 7


def test_a_failing_per_sample_loss_is_recorded_and_training_goes_on():
    model, batch = _regression(16, [])

    def broken(model, batch):
        raise KeyError("labels")

    namer = SampleNamer.build(SampleAttribution(per_sample_loss=broken), model=model, sampler=None, store=None,
                              log=EventLog(None), ledger=lambda: RunLedger(), world=1)
    rng = torch.get_rng_state()
    rec = namer.name(step=7, batch_index=7, batch=batch)
    assert rec["named"] is False and rec["why"].startswith("naming failed: KeyError")
    assert torch.equal(torch.get_rng_state(), rng) and all(p.grad is None for p in model.parameters())


def test_bad_settings_are_clear_errors():
    with pytest.raises(ConfigError) as e:
        SampleAttribution(per_sample_loss=None, groups=1, z_threshold=0, min_share=2.0)
    msg = str(e.value)
    assert "per_sample_loss" in msg and "groups" in msg and "z_threshold" in msg and "min_share" in msg


def _pair_row_loss(model, batch):
    return (model(batch[0]) - batch[1]).pow(2).reshape(-1)


def test_a_mix_names_dataset_and_index_and_keeps_the_sample_out_of_later_epochs(tmp_path):
    from lossguard.checkpoint.store import CheckpointStore
    from lossguard.data import DatasetMix, ResumableSampler
    from lossguard.guard.config import GuardConfig
    from lossguard.guard.guard import StabilityGuard

    torch.manual_seed(0)
    x = torch.randn(512, 6)
    y = x @ torch.randn(6, 1) + 0.05 * torch.randn(512, 1)
    web, code = torch.utils.data.TensorDataset(x[:384], y[:384]), torch.utils.data.TensorDataset(x[384:], y[384:])
    mix = DatasetMix({"web": 384, "code": 128})
    sampler = ResumableSampler(512, batch_size=16, seed=0)
    at = next(p for p in range(20, 32) if any(i >= 384 for i in sampler.global_batch_ids(p)))  # after the warm-up
    bad = next(i for i in sampler.global_batch_ids(at) if i >= 384)  # first met at `at` (epoch 0)
    with torch.no_grad():
        y[bad] += 200.0  # a wild label in the "code" part (the TensorDatasets share y's storage)
    loader = torch.utils.data.DataLoader(torch.utils.data.ConcatDataset([web, code]), batch_sampler=sampler)
    model = torch.nn.Linear(6, 1)
    guard = StabilityGuard(model, torch.optim.Adam(model.parameters(), lr=0.05), sampler=sampler,
                           store=CheckpointStore(tmp_path / "ck"), config=GuardConfig(checkpoint_every=None),
                           attribution=SampleAttribution(mix=mix, per_sample_loss=_pair_row_loss))
    delivered = []
    for _, batch in guard.batches(loader, steps=100):  # three epochs
        delivered.append(sampler.last_batch_ids())
        loss = (model(batch[0]) - batch[1]).pow(2).mean()
        loss.backward()
        guard.step(loss)
    recs = [r for r in guard.namer.records if r["batch_index"] == at]
    assert recs and recs[0]["suspects"][0]["id"] == {"dataset": "code", "index": bad - 384}
    assert [sum(bad in ids for ids in delivered)] == [1]  # met once, never again in the next epochs
    from lossguard.data.sample_ids import SampleKey
    from lossguard.data.skiplist import SkipList
    assert SampleKey("code", bad - 384) in SkipList.load(tmp_path / "ck" / "skiplist.json").keys()
