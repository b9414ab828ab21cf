"""Loss parity on a masked-LM search: every run trains on the same inputs and the same masks at equal
tokens, whatever its batch size, so a configuration that keeps the math (activation checkpointing)
is not `loss_diverged`, whatever its speed, and one that changes the effective batch is not judged
at equal tokens at all."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

import autotune
from autotune.options import MeasureSettings
from tests.helpers import TrainedOn, write_space
from tests.local_models import write_model, write_text

pytestmark = pytest.mark.timeout(300)

# Windows long enough for several paired steps in the second half of the compared tokens.
MEASURE = MeasureSettings(
    settle_steps=1,
    max_settle_steps=2,
    min_measure_steps=6,
    measure_steps=8,
    max_seconds=10.0,
    screen_ratio=0.0,
)
CHECKPOINTED = {"activation_checkpointing": True, "per_device_train_batch_size": 8}
SMALLER = {"activation_checkpointing": False, "per_device_train_batch_size": 4}


def _runs(folder: Path) -> dict[tuple[int, int, bool], dict[str, Any]]:
    """The first run of each (batch, accumulation, checkpointing) that `TrainedOn` wrote."""
    runs: dict[tuple[int, int, bool], dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text())
        runs.setdefault((run["batch"], run["accumulation"], run["checkpointing"]), run)
    return runs


def test_a_checkpointed_masked_lm_trial_trains_on_the_same_masks_and_is_not_diverged(
    tmp_path: Path,
) -> None:
    model = write_model(tmp_path / "model", model_type="bert")
    text = write_text(tmp_path / "corpus.txt", 300)
    seen = tmp_path / "seen"
    seen.mkdir()
    hook = TrainedOn(str(seen), slow_s=0.05)
    pickle.loads(pickle.dumps(hook))  # it reaches worker processes pickled, like `Fault`
    space = {"activation_checkpointing": [False, True], "per_device_train_batch_size": [4, 8]}
    result = autotune.search(
        model=str(model),
        dataset=str(text),
        task="masked-lm",
        space=write_space(tmp_path, space),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'mlm.db'}",
        seq_len=16,
        measure=MEASURE,
        finalists=0,
        isolation="none",
        callbacks=[hook],
        enqueue=[CHECKPOINTED, SMALLER],
    )
    baseline = result.study.user_attrs["baseline"]
    assert baseline["loss_curve"] and baseline["params"]["per_device_train_batch_size"] == 8

    # Checkpointing recomputes the same activations: the same loss, only slower. Batch 4 took twice
    # the baseline's optimizer steps at equal tokens: compared on nothing, its delta kept.
    by_checkpointing = {t.params["activation_checkpointing"]: t for t in result.trials}
    checkpointed, smaller = by_checkpointing[True], by_checkpointing[False]
    for trial in (checkpointed, smaller):
        assert trial.state == "COMPLETE" and trial.reason is None, trial.message
        assert trial.attrs["loss_delta"] is not None
    assert abs(checkpointed.attrs["loss_delta"]) < 0.01

    # The baseline, the checkpointed trial and batch 4 trained on the same inputs and labels,
    # masks included: row for row, in the same order, up to the tokens they all reached.
    runs = _runs(seen)
    trained = [runs[(8, 1, False)], runs[(8, 1, True)], runs[(4, 1, False)]]
    common = min(len(run["input_ids"]) for run in trained)
    assert common >= 6 * 4  # several optimizer steps
    first = trained[0]
    for run in trained[1:]:
        assert run["input_ids"][:common] == first["input_ids"][:common]
        assert run["labels"][:common] == first["labels"][:common]
    # and they are masked-LM batches: some tokens predicted, most not
    labels = [label for row in first["labels"][:common] for label in row]
    predicted = sum(label != -100 for label in labels) / len(labels)
    assert 0.05 < predicted < 0.3
