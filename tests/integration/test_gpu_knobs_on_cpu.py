"""Real tiny searches on this CPU over spaces that hold the GPU-only knob values and the padding
multiple (issue 32, items 3-4): what cannot run here is recorded with its reason, not trained, and the
search goes on; a padding multiple reaches the batches of one-text-per-sample data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

import autotune
from autotune.records import read_study
from tests.helpers import FAST_RUN, IN_PROCESS, write_space
from tests.local_models import write_model, write_text

pytestmark = pytest.mark.timeout(600)


def test_gpu_only_values_are_recorded_unavailable_with_their_reasons(tmp_path: Path) -> None:
    knobs = {
        "per_device_train_batch_size": [4],
        "precision": ["fp32", "fp8"],
        "base_weights": ["as_is", "4bit"],
        "use_liger_kernel": [False, True],
        "pad_to_multiple_of": [1, 8],  # synthetic blocks of seq_len: nothing padded
    }
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, knobs),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'cpu.db'}",
        seq_len=32,
        **FAST_RUN,
    )
    not_searched = read_study(result.study).not_searched
    reasons = {line.split(":", 1)[0]: line.split(": ", 1)[1] for line in not_searched}
    assert reasons["precision=fp8"].startswith("fp8 needs a CUDA GPU with fp8 tensor cores")
    assert "bitsandbytes" in reasons["base_weights=4bit"]
    assert "liger-kernel" in reasons["use_liger_kernel=True"] or "CUDA" in reasons["use_liger_kernel=True"]
    assert "packed into blocks of seq_len" in reasons["pad_to_multiple_of=8"]
    # the search itself went on with what runs here
    trials = [t for t in result.trials if t.state == "COMPLETE"]
    assert trials, [t.message for t in result.trials]
    assert all(t.params.get("precision", "fp32") == "fp32" for t in trials)


class Widths(TrainerCallback):
    """The padded length of every batch each trial's model got."""

    def __init__(self) -> None:
        self.trials: list[list[int]] = []
        self._hook: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        seen: list[int] = []
        self.trials.append(seen)
        if self._hook is not None:
            self._hook.remove()
        self._hook = kw["model"].register_forward_pre_hook(
            lambda module, args_, kwargs: seen.append(int(kwargs["input_ids"].shape[1])), with_kwargs=True
        )


def test_pad_to_multiple_of_is_searched_on_one_text_per_sample(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    data = write_text(tmp_path / "texts.txt", 200)
    trials = [{"pad_to_multiple_of": 1}, {"pad_to_multiple_of": 16}]
    widths = Widths()
    result = autotune.search(
        model=str(model),
        dataset=str(data),
        packing="examples",
        space=write_space(tmp_path, {"per_device_train_batch_size": [4], "pad_to_multiple_of": [1, 16]}),
        trials=len(trials),
        storage=f"sqlite:///{tmp_path / 'pad.db'}",
        seq_len=64,
        **IN_PROCESS,
        callbacks=[widths],
        enqueue=trials,
    )
    assert read_study(result.study).not_searched == []  # padded data: both values searched
    for trial in result.trials:
        assert trial.state == "COMPLETE", trial.message
    assert [t.params["pad_to_multiple_of"] for t in sorted(result.trials, key=lambda t: t.number)] == [1, 16]
    plain, rounded = widths.trials
    assert all(width % 16 == 0 for width in rounded)
    assert any(width % 16 != 0 for width in plain)  # the longest sample of a batch, unrounded
