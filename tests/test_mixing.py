"""Weighted data mixtures (`--data NAME=WEIGHT:DIR ...`): shares, determinism, exact mid-epoch resume,
per-source metrics through the real CLI, and the refusals."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from tests.conftest import run_aura, run_aura_here
from tests.test_loop import read_log
from tests.tiny_models import CORPUS_DIR, train_tokenizer

FLAGS = [
    "--model-preset",
    "manual",
    "--embed-size",
    "32",
    "--num-layers",
    "1",
    "--num-heads",
    "2",
    "--seq-length",
    "32",
    "--intermediate-size",
    "64",
    "--batch-size",
    "2",
    "--log-interval",
    "1",
    "--sample-tokens",
    "0",
    "--precision",
    "fp32",
]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Two prepared dirs with one tokenizer (narrative + dialogues, encyclopedia + instructions) and a third
    with another tokenizer."""
    from aura.data.prepare import PrepareConfig, prepare

    root = tmp_path_factory.mktemp("mix")
    tok = train_tokenizer(root / "tok", vocab_size=600)
    other = train_tokenizer(root / "other", vocab_size=500)
    out = {}
    for name, files, t in (
        ("a", ["narrativa", "dialogos"], tok),
        ("b", ["enciclopedia", "instrucciones"], tok),
        ("c", ["narrativa"], other),
    ):
        prepare(
            PrepareConfig(
                inputs=[str(CORPUS_DIR / f"{f}.txt") for f in files],
                tokenizer=str(t),
                output_dir=str(root / name),
                workers=1,
                val_fraction=0.05,
            )
        )
        out[name] = root / name
    return out


def mixture(sources, weights: dict[str, float], *, batch: int = 2, seq: int = 16):
    from aura.data.mixture import MixtureBatches, parse_sources
    from aura.data.pretrain_data import PretrainBatches
    from aura.data.tokens import TokenShards

    specs = parse_sources([f"{n}={w}:{sources[n]}" for n, w in weights.items()])
    return MixtureBatches(
        [(s, PretrainBatches(TokenShards(s.path), seq_len=seq, batch_size=batch, seed=i)) for i, s in enumerate(specs)]
    )


def origin(sources, batch) -> str:
    """Which source a batch came from: the only one whose train split holds its first window."""
    from aura.data.tokens import TokenShards

    row = batch["input_ids"][0].numpy()
    for name in ("a", "b"):
        stream = torch.from_numpy(TokenShards(sources[name]).read(0, len(TokenShards(sources[name]))))
        windows = stream.unfold(0, len(row), 1)
        if bool((windows == torch.from_numpy(row)).all(dim=1).any()):
            return name
    raise AssertionError("batch from no source")


def test_each_source_is_drawn_at_its_weight(sources):
    mix = mixture(sources, {"a": 0.7, "b": 0.3})
    draws = []
    for _ in range(3):  # several epochs: sources wrap around on their own
        while (batch := mix.next_batch()) is not None:
            draws.append(batch)
        mix.start_epoch(mix.epoch + 1)
    assert len(draws) > 500
    share = mix.drawn[0] / len(draws)
    assert abs(share - 0.7) <= 0.02 and sum(mix.drawn) == len(draws)
    # over any window of 100 draws the shares hold too (interleaved, not blocks)
    picks = []
    mix2 = mixture(sources, {"a": 0.7, "b": 0.3})
    for _ in range(300):
        picks.append(mix2.pick())
        mix2.next_batch()
    for start in range(0, 200, 50):
        assert abs(picks[start : start + 100].count(0) / 100 - 0.7) <= 0.02
    # the batches really come from the source that was drawn; tokens are counted per source
    mix3 = mixture(sources, {"a": 0.5, "b": 0.5})
    for _ in range(6):
        i = mix3.pick()
        assert origin(sources, mix3.next_batch()) == "ab"[i]
    assert mix3.tokens_seen() == {"a": 3 * 2 * 16, "b": 3 * 2 * 16}


def test_resume_mid_epoch_is_exact(sources):
    ref = mixture(sources, {"a": 0.8, "b": 0.2})
    expected = [ref.next_batch() for _ in range(40)]
    run = mixture(sources, {"a": 0.8, "b": 0.2})
    for _ in range(17):
        run.next_batch()
    state = run.state_dict()
    resumed = mixture(sources, {"a": 0.8, "b": 0.2})
    resumed.load_state_dict(state)
    for want in expected[17:]:
        got = resumed.next_batch()
        assert torch.equal(got["input_ids"], want["input_ids"]) and torch.equal(
            got["shift_labels"], want["shift_labels"]
        )
    assert resumed.tokens_seen() == ref.tokens_seen()
    other = mixture(sources, {"a": 0.5, "b": 0.5})
    from aura.core.errors import AuraError

    with pytest.raises(AuraError, match="another mixture"):
        other.load_state_dict(state)


def test_pretrain_on_a_mixture_logs_each_source_and_resumes(sources, tmp_path):
    run = tmp_path / "run"
    data = ["--data", f"es={0.75}:{sources['a']}", f"otro=0.25:{sources['b']}"]
    common = [
        *data,
        "-o",
        run,
        *FLAGS,
        "--max-steps",
        "8",
        "--save-steps",
        "4",
        "--keep-last",
        "0",
        "--eval-interval",
        "4",
    ]
    r = run_aura("pretrain", *common)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "tokens_es=" in r.stdout and "val_loss_otro=" in r.stdout
    with open(run / "training_log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = [r for r in rows if r.get("tokens_es")][-1]
    assert int(float(last["tokens_es"])) == 6 * 2 * 32 and int(float(last["tokens_otro"])) == 2 * 2 * 32
    assert [r for r in rows if r.get("val_loss_es")] and [r for r in rows if r.get("val_loss_otro")]
    ref = read_log(run)
    again = run_aura("pretrain", *common, "--resume-from", run / "checkpoint-step-4", "--fork")
    assert again.returncode == 0, again.stderr + again.stdout
    resumed = read_log(run)
    assert [resumed[s] for s in range(5, 9)] == [ref[s] for s in range(5, 9)]
    # the same mixture in a YAML config
    cfg = tmp_path / "mix.yaml"
    cfg.write_text(f"data:\n  - es=3:{sources['a']}\n  - otro=1:{sources['b']}\n", encoding="utf-8")
    y = run_aura("pretrain", "--config", cfg, "-o", tmp_path / "yaml", *FLAGS, "--max-steps", "2")
    assert y.returncode == 0, y.stderr + y.stdout


def test_refusals(sources, tmp_path):
    a, b, c = sources["a"], sources["b"], sources["c"]
    cases = [
        ([f"es=0:{a}", f"en=0:{b}"], "the weights add up to 0"),
        ([f"es=-1:{a}", f"en=2:{b}"], "is not a finite number"),
        ([f"es=x:{a}", f"en=2:{b}"], "the weight 'x'"),
        ([f"es=1:{a}", str(b)], "every source is written NAME=WEIGHT:DIRECTORY"),
        ([f"es=1:{a}", f"es=1:{b}"], "appears twice"),
        ([f"es=1:{a}", f"en=1:{tmp_path}"], "not a prepared directory"),
        ([f"es=1:{a}", f"en=1:{c}"], "Every source must use the same tokenizer"),
    ]
    for i, (data, message) in enumerate(cases):
        out = tmp_path / f"r{i}"
        r = run_aura_here("pretrain", "--data", *data, "-o", out, *FLAGS, "--max-steps", "1")
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (data, r.stderr)
        assert not out.exists()
