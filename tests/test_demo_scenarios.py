"""Demo data and scenario settings: corpus, deterministic batches, garbage pockets, schedule."""
import pytest

torch = pytest.importorskip("torch")

from lossguard.demo.corpus import CorpusBatches, load_corpus  # noqa: E402
from lossguard.demo.scenarios import SCENARIOS, Pocket, Scenario  # noqa: E402
from lossguard.errors import ConfigError  # noqa: E402


def test_corpus_is_shipped_public_domain_text_without_header():
    text = load_corpus()
    assert 250_000 < len(text) < 400_000
    assert not text.startswith(b"#")
    assert text.isascii()
    assert b"MACBETH" in text and b"Julius Caesar" in text.replace(b"JULIUS CAESAR", b"Julius Caesar")


def test_batches_depend_only_on_seed_and_step():
    data = load_corpus()
    a = CorpusBatches(data, batch_size=4, seq_len=32, seed=7)
    b = CorpusBatches(data, batch_size=4, seq_len=32, seed=7)
    x1, y1 = a.batch(10)
    a.batch(11)
    x2, y2 = b.batch(10)  # b never saw step 0..9 or 11: same batch anyway
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the next bytes
    assert not torch.equal(a.batch(12)[0], x1)
    v1, v2 = a.val_batches(2), b.val_batches(2)
    assert all(torch.equal(p[0], q[0]) for p, q in zip(v1, v2, strict=True))


@pytest.mark.parametrize("kind", ["random_bytes", "repeat", "foreign"])
def test_pocket_batches_are_garbage_only_inside_the_pocket(kind):
    data = load_corpus()
    clean = CorpusBatches(data, batch_size=4, seq_len=32, seed=1)
    bad = CorpusBatches(data, batch_size=4, seq_len=32, seed=1, pocket=Pocket(start=5, length=3,
                                                                              kind=kind))
    for step in (4, 8):
        assert torch.equal(clean.batch(step)[0], bad.batch(step)[0])
    for step in (5, 6, 7):
        x, _ = bad.batch(step)
        assert x.shape == (4, 32)
        if kind == "random_bytes":
            assert (x >= 128).any()  # bytes the ASCII corpus never has
        elif kind == "repeat":
            assert all(len(set(row.tolist())) == 1 for row in x)
        else:
            assert ((x == 0xD0) | (x == 0xD1) | (x == 0xCE) | (x == 0xCF)).any()


def test_validation_and_schedule():
    with pytest.raises(ConfigError, match="kind"):
        Pocket(start=1, length=2, kind="zeros")
    with pytest.raises(ConfigError, match="optimizer"):
        Scenario(name="x", optimizer="sgd")
    sc = Scenario(name="x", steps=100, lr=1.0, warmup=10, min_lr_frac=0.1)
    assert sc.lr_at(0) == pytest.approx(0.1)
    assert sc.lr_at(9) == pytest.approx(1.0)
    assert sc.lr_at(99) == pytest.approx(0.1, abs=1e-3)
    assert sc.with_(model=dict(n_layer=3)).model["n_layer"] == 3


def test_named_scenarios_are_valid_and_fast_enough_on_paper():
    assert {"clean", "bad_pocket", "high_lr"} <= set(SCENARIOS)
    for sc in SCENARIOS.values():
        assert sc.steps <= 1000
        if sc.pocket is not None:
            assert sc.pocket.start + sc.pocket.length < sc.steps


def test_run_shows_the_pocket_spike_and_is_deterministic():
    from lossguard.demo.scenarios import run, spike_steps

    torch.set_num_threads(1)
    sc = Scenario(name="t", model=dict(n_layer=1, n_embd=32, n_head=2), steps=60, batch_size=8,
                  seq_len=32, lr=1e-2, warmup=5, eval_every=30, eval_batches=2,
                  pocket=Pocket(start=50, length=3, kind="random_bytes"))
    a, b = run(sc), run(sc)
    assert a.losses == b.losses and a.final_val == b.final_val
    assert len(a.losses) == 60 and not a.diverged
    # random bytes cost about ln(256) = 5.5 nats or more; the text before it far less
    assert a.losses[50] > 5.0 > a.losses[49] + 1.5
    assert 50 in spike_steps(a.losses)
    assert set(a.val) == {30, 60} and a.val[60] == a.final_val
    assert len(a.attn_logit_max) == 60 and a.wall_time > 0
