"""Sample naming inside Lightning's ``Trainer.fit``: the planted samples of the withheld steps are
named, land in the skip list of the loader's ResumableSampler, and a relaunched fit never gets them."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.slow  # Lightning import + two fits of 300 steps

from lossguard.data.sampler import ResumableSampler  # noqa: E402
from lossguard.data.skiplist import SkipList  # noqa: E402
from lossguard.guard import GuardConfig, SampleAttribution  # noqa: E402
from lossguard.integrations.lightning import StabilityCallback  # noqa: E402
from evals.planted import PlantedBags, bag_classifier, batch_loss, pad_collate, per_row_loss, score_naming  # noqa: E402
from evals.planted_loop import GLOBAL_BATCH, N_SAMPLES, SEED, planted_ids  # noqa: E402

STEPS = 300  # before the planted episode at 303-309, which would halt (no checkpoints here)


class Bags(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = bag_classifier(dropout=0.1)
        self.seen: list[list[int]] = []

    def training_step(self, batch, _):
        self.seen.append(batch[0].tolist())
        return batch_loss(self.net, batch)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def _fit(skiplist: SkipList):
    torch.set_num_threads(1)
    sampler = ResumableSampler(N_SAMPLES, batch_size=GLOBAL_BATCH, seed=SEED, skiplist=skiplist)
    loader = torch.utils.data.DataLoader(PlantedBags(N_SAMPLES, seed=0, planted=planted_ids()), batch_sampler=sampler,
                                         collate_fn=pad_collate)
    names = SampleAttribution(per_sample_loss=lambda m, b: per_row_loss(m.net, b), ids_of=lambda b: b[0].tolist())
    cb = StabilityCallback(GuardConfig(checkpoint_every=None, loss_rise=None), attribution=names,
                           restart_on_rollback=False)
    module = Bags()
    trainer = pl.Trainer(max_steps=STEPS, callbacks=[cb], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(module, loader)
    return cb, module


def test_lightning_names_planted_samples_and_a_relaunch_never_sees_them(tmp_path):
    planted = planted_ids()
    cb, module = _fit(SkipList(tmp_path / "skiplist.json"))
    skips = [e for e in cb.guard.events if e["event"] == "skip"]
    spikes = [(e["step"], e["step"], module.seen[e["step"]]) for e in skips]
    score = score_naming(spikes, cb.guard.namer.records, planted)
    print(f"lightning: {len(skips)} withheld steps, recall {score['recall']:.2f}, precision {score['precision']:.2f} "
          f"(in spikes with a planted sample {score['precision_planted']:.2f}); clean-data names {score['natural']}")
    assert len(score["caught"]) >= 3 and score["recall"] >= 0.9 and score["precision_planted"] >= 0.8
    # a name where nothing was planted is a clean sample that alone carried most of its spike
    assert all(share >= 0.5 for _, _, share in score["natural"])
    listed = {k.index for k in SkipList.load(tmp_path / "skiplist.json").keys()}
    assert listed == set(score["caught"]) | set(score["false"])
    _, again = _fit(SkipList.load(tmp_path / "skiplist.json"))
    assert len(again.seen) == STEPS and not any(set(ids) & listed for ids in again.seen)
