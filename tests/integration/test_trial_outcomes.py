"""Trials that cannot or must not count: unavailable combinations, NaN losses; and held semantics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

import autotune
import autotune.plan.build
from autotune.cli import main
from autotune.progress import Reporter
from autotune.space.availability import Hardware
from autotune.workloads.workload import Workload
from tests.helpers import FAST_RUN, IN_PROCESS, KnobProbe, write_space

H100 = Hardware(
    device="cuda",
    name="NVIDIA H100 80GB HBM3",
    capability=(9, 0),
    bf16=True,
    packages=frozenset({"flash_attn", "triton"}),
    count=1,
    memory_bytes=80 * 2**30,
)


class Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def on_note(self, text: str) -> None:
        self.notes.append(text)


def test_unavailable_combination_is_skipped_without_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An H100 with flash-attn installed, but flash attention only runs in half precision: a trial
    # asking for it in fp32 must be recorded as skipped, with its reason, and train nothing.
    monkeypatch.setattr(autotune.plan.build, "detect_hardware", lambda: H100)
    builds: list[dict[str, Any]] = []
    real_build = Workload.build_model

    def counting_build(self: Workload, kwargs: dict[str, Any]) -> Any:
        builds.append(kwargs)
        return real_build(self, {})

    monkeypatch.setattr(Workload, "build_model", counting_build)
    space = write_space(tmp_path, {"attn_implementation": ["flash_attention_2"], "precision": ["fp32"]})
    probe, notes = KnobProbe(), Notes()
    result = autotune.search(
        model="tiny-llama",
        space=space,
        trials=1,
        storage=f"sqlite:///{tmp_path / 's.db'}",
        seq_len=16,
        **IN_PROCESS,
        callbacks=[probe],
        reporter=notes,
    )
    assert result.ran == 0 and result.best is None
    assert result.trials, "skipped trials are stored"
    for trial in result.trials:
        assert trial.state == "PRUNED"
        assert trial.reason == "unavailable"
        assert trial.attrs["unavailable_knob"] == "attn_implementation"
        assert "fp16 or bf16" in (trial.message or "")
    frozen = result.study.optuna_study.trials
    assert all(t.constraints["runs_here"] == 1.0 for t in frozen)  # the sampler sees them as infeasible
    assert probe.trials == []  # no trial reached training
    assert builds == []  # no model at all: the Trainer's own is a placeholder, and no trial built one
    assert notes.notes and "all 1 combinations of the space were tried" in notes.notes[0]


class PoisonWeights(TrainerCallback):
    """Makes the loss NaN in trials with the given batch size."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        if args.per_device_train_batch_size == self.batch_size:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))


def test_nan_loss_makes_a_trial_infeasible(tmp_path: Path) -> None:
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'n.db'}",
        seq_len=16,
        **FAST_RUN,
        callbacks=[PoisonWeights(batch_size=4)],
        enqueue=[{"per_device_train_batch_size": 4}, {"per_device_train_batch_size": 2}],
    )
    poisoned = next(t for t in result.trials if t.params["per_device_train_batch_size"] == 4)
    assert poisoned.state == "PRUNED"
    assert poisoned.reason == "nan_loss"
    frozen = result.study.optuna_study.trials[poisoned.number]
    assert frozen.constraints["finite_loss"] == 1.0
    assert result.best is not None and result.best.params == {"per_device_train_batch_size": 2}


class ArgsProbe(TrainerCallback):
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.seen.append(
            {
                "batch": args.per_device_train_batch_size * args.gradient_accumulation_steps,
                "bf16": args.bf16,
                "optim": str(args.optim.value),
                "learning_rate": args.learning_rate,
            }
        )


def test_keep_semantics_holds_the_math_of_the_base_config(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text(
        json.dumps(
            {
                "per_device_train_batch_size": 4,
                "gradient_accumulation_steps": 2,
                "optim": "adamw_torch",
                "bf16": True,
                "learning_rate": 1e-3,
            }
        )
    )
    probe = ArgsProbe()
    result = autotune.search(
        model="tiny-gpt2",
        space="quick",
        trials=3,
        storage=f"sqlite:///{tmp_path / 'k.db'}",
        seq_len=16,
        **IN_PROCESS,
        keep_semantics=True,
        base_args=str(base),
        callbacks=[probe],
    )
    assert len(probe.seen) == 3
    for seen in probe.seen:
        assert seen["batch"] == 8  # 4 x 2 held, split free
        assert seen["bf16"] is True
        assert seen["optim"] in ("adamw_torch", "adamw_torch_fused")  # same update rule
        assert seen["learning_rate"] == 1e-3  # the base config is every trial's base
    assert "precision" not in result.study.optuna_study.trials[0].params
    assert "gradient_accumulation_steps" not in result.study.optuna_study.trials[0].params
    assert result.study.user_attrs["space"]["fixed"] == {"precision": "bf16"}
    assert result.study.user_attrs["space"]["global_batch"] == 8


def test_global_batch_size_restricts_the_splits(tmp_path: Path) -> None:
    probe = ArgsProbe()
    autotune.search(
        model="tiny-gpt2",
        space="quick",
        trials=3,
        storage=f"sqlite:///{tmp_path / 'g.db'}",
        seq_len=16,
        **IN_PROCESS,
        global_batch_size=16,
        callbacks=[probe],
    )
    assert [seen["batch"] for seen in probe.seen] == [16, 16, 16]


def test_unreachable_global_batch_is_a_usage_error_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = f"sqlite:///{tmp_path / 'u.db'}"
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "--space", "quick", "--global-batch-size", "7", "--storage", storage])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "global batch size 7 is not reachable" in err
    assert "use one of [4, 8, 16, 32]" in err
    assert not (tmp_path / "u.db").exists()  # nothing was created, let alone trained


def test_skipped_trials_do_not_spend_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.trial.prechecks

    def batch_4_cannot_run(values: Any, hw: Any, model: Any) -> tuple[str, str] | None:
        if values.get("per_device_train_batch_size") == 4:
            return "per_device_train_batch_size", "pretend batch 4 cannot run here"
        return None

    monkeypatch.setattr(autotune.trial.prechecks, "combination_unavailable", batch_4_cannot_run)
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4, 8]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'b.db'}",
        seq_len=16,
        **IN_PROCESS,
        enqueue=[{"per_device_train_batch_size": 4}],
    )
    states = [(t.params["per_device_train_batch_size"], t.state, t.reason) for t in result.trials]
    assert (4, "PRUNED", "unavailable") in states
    # Trained trials only: a proposal that repeats a finished trial reuses its result (untrained).
    measured = [t for t in result.trials if t.attrs.get("trained")]
    assert len(measured) == 2 and all(t.state == "COMPLETE" for t in measured)
    assert all(t.params["per_device_train_batch_size"] != 4 for t in measured)
    assert result.ran == 2
