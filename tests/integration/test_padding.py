"""Variable-length data: padding-free batches, length grouping and graded checkpointing.

A causal LM trained on one text per sample (``packing="examples"``), with a probe inside training
that sees every batch the model gets: its shape, its position ids, its real and padded tokens, and
which layers recompute their activations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

import autotune
from tests.helpers import IN_PROCESS, write_space
from tests.local_models import write_model, write_text

pytestmark = pytest.mark.timeout(600)

BATCH = 8
BASE = {
    "per_device_train_batch_size": BATCH,
    "precision": "fp32",
    "attn_implementation": "sdpa",
    "padding_free": False,
    "group_by_length": False,
    "activation_checkpointing": False,
}
TRIALS: list[dict[str, Any]] = [
    BASE,
    {**BASE, "padding_free": True},
    {**BASE, "group_by_length": True},
    {**BASE, "activation_checkpointing": True, "checkpoint_every_n_layers": 1},
    {**BASE, "activation_checkpointing": True, "checkpoint_every_n_layers": 2},
]


class BatchProbe(TrainerCallback):
    """Per trial: each forward's batch shape, whether position ids came with it, its real tokens
    (attention mask, or every token of a flattened row) and the layers set to recompute."""

    def __init__(self) -> None:
        self.trials: list[dict[str, Any]] = []
        self._hook: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        from transformers.modeling_layers import GradientCheckpointingLayer

        model = kw["model"]
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        seen: dict[str, Any] = {
            "checkpointed": [bool(m.gradient_checkpointing) for m in layers]
            if model.is_gradient_checkpointing
            else [],
            "shapes": [],
            "position_ids": [],
            "real": [],
        }
        self.trials.append(seen)
        if self._hook is not None:
            self._hook.remove()

        def hook(module: Any, args_: Any, kwargs: Any) -> None:
            ids = kwargs["input_ids"]
            mask = kwargs.get("attention_mask")
            seen["shapes"].append(tuple(ids.shape))
            seen["position_ids"].append(kwargs.get("position_ids") is not None)
            seen["real"].append(int(mask.sum()) if mask is not None else ids.numel())

        self._hook = model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Any]:
    folder = tmp_path_factory.mktemp("padding")
    model = write_model(folder / "model", layers=4)
    data = write_text(folder / "texts.txt", 400)
    knobs = {
        name: list(dict.fromkeys(t[name] for t in TRIALS if name in t))
        for name in dict.fromkeys(k for t in TRIALS for k in t)
    }
    probe = BatchProbe()
    result = autotune.search(
        model=str(model),
        dataset=str(data),
        packing="examples",
        space=write_space(folder, knobs),
        trials=len(TRIALS),
        storage=f"sqlite:///{folder / 'p.db'}",
        seq_len=64,
        **IN_PROCESS,
        callbacks=[probe],
        enqueue=TRIALS,
    )
    return probe.trials, result


def _trial(result: Any, number: int) -> Any:
    trial = next(t for t in result.trials if t.number == number)
    assert trial.state == "COMPLETE", trial.message
    return trial


def test_each_trial_ran_with_its_own_values(searched: Any) -> None:
    _, result = searched
    for number, wanted in enumerate(TRIALS):
        assert _trial(result, number).params == wanted


def test_padding_free_batches_are_one_flat_row_with_position_ids(searched: Any) -> None:
    seen, _ = searched
    padded, flat = seen[0], seen[1]
    assert all(shape[0] == BATCH for shape in padded["shapes"]) and not any(padded["position_ids"])
    assert all(shape[0] == 1 for shape in flat["shapes"]) and all(flat["position_ids"])
    # Nothing but real tokens in a flattened row.
    assert [shape[1] for shape in flat["shapes"]] == flat["real"]


def test_padding_free_trains_the_same_real_tokens_as_the_padded_run(searched: Any) -> None:
    seen, result = searched
    padded, flat = seen[0], seen[1]
    steps = min(len(padded["real"]), len(flat["real"]))
    # The same samples in the same order: the same real tokens, step by step.
    assert flat["real"][:steps] == padded["real"][:steps]
    assert sum(s[0] * s[1] for s in padded["shapes"][:steps]) > sum(padded["real"][:steps])  # it padded
    # The stored measurements count real tokens only: equal per step, whichever the collator.
    curves = [_trial(result, n).attrs["loss_curve"] for n in (0, 1)]
    common = min(len(c) for c in curves)
    assert [p[0] for p in curves[0][:common]] == [p[0] for p in curves[1][:common]]
    assert _trial(result, 1).attrs["padding_fraction"] == 0.0
    assert _trial(result, 0).attrs["padding_fraction"] > 0.2
    # What each trial trained in its window is what the probe saw in those steps.
    for number in (0, 1):
        attrs = _trial(result, number).attrs
        first, steps = attrs["warmup_steps"], attrs["measured_steps"]
        assert attrs["window_tokens"] == sum(seen[number]["real"][first : first + steps])


def test_padding_free_reports_its_gain_over_the_padded_run_or_says_why_not(searched: Any) -> None:
    _, result = searched
    padded, flat = _trial(result, 0).attrs, _trial(result, 1).attrs
    compared = flat["padding_free_vs_padded"]
    assert compared["twin"] == 0 and compared["twin_padding_fraction"] == padded["padding_fraction"]
    assert compared["ratio"] == pytest.approx(flat["tokens_per_s"] / padded["tokens_per_s"])
    if compared["ratio"] > 1:
        assert "padding_free_note" not in flat
    else:
        assert flat["padding_free_note"].startswith(f"padding-free ran at {compared['ratio']:.2f}x")
    assert "padding_free_vs_padded" not in padded  # padded trials have nothing to compare


def test_length_grouping_reorders_the_data_and_counts_the_tokens_it_trained(searched: Any) -> None:
    seen, result = searched
    plain, grouped = seen[0], seen[2]
    assert grouped["real"] != plain["real"][: len(grouped["real"])]  # another order
    attrs = _trial(result, 2).attrs
    first, steps = attrs["warmup_steps"], attrs["measured_steps"]
    # Counted from the batches the trial trained, not from the sample order.
    assert attrs["window_tokens"] == sum(grouped["real"][first : first + steps])
    # Batches of similar lengths: far less padding than reading the data in order.
    assert attrs["padding_fraction"] < _trial(result, 0).attrs["padding_fraction"] / 2


def test_graded_checkpointing_recomputes_every_nth_layer(searched: Any) -> None:
    seen, result = searched
    assert seen[0]["checkpointed"] == []
    assert seen[3]["checkpointed"] == [True, True, True, True]
    assert seen[4]["checkpointed"] == [True, False, True, False]
    applied = _trial(result, 4).attrs["training_args"]
    assert applied["activation_checkpointing_kwargs"] == {"every_n_layers": 2}


def test_the_export_of_a_padding_free_trial_names_its_collator(searched: Any) -> None:
    from autotune.export.config import export_config
    from autotune.export.formats import notes
    from autotune.export.render import render

    _, result = searched
    config = export_config(result.study, _trial(result, 1))
    assert "DataCollatorWithFlattening" in config["data_collator"]
    assert "DataCollatorWithFlattening" in render(config, "python")
    assert "data_collator" in render(config, "json")
    assert any("DataCollatorWithFlattening" in line for line in notes(config, "flags"))
    assert "padding_free" not in config["training_args"]
    assert "data_collator" not in export_config(result.study, _trial(result, 0))


def test_fixed_length_data_leaves_the_padding_knobs_out(tmp_path: Path) -> None:
    from autotune.plan.build import plan_search

    space = write_space(tmp_path, {"padding_free": [False, True], "group_by_length": [False, True]})
    plan = plan_search(autotune.RunConfig(model="tiny-gpt2", space=space, seq_len=16), open_store=False)
    dropped = " ".join(str(d) for d in plan.not_searched)
    assert "padding_free" in dropped and "group_by_length" in dropped
    assert "same length" in dropped
