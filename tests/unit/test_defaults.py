"""The knob values of a run without autotune are the installed `TrainingArguments`' own.

Compared field by field with a real `TrainingArguments`, so a transformers release that changes a
default (as 5.x did with ``optim``) fails here instead of skewing every stated speedup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import TrainingArguments

from autotune.errors import UsageError
from autotune.space.defaults import base_knobs, knob_defaults, knobs_of, training_args_defaults
from autotune.space.knobs import CATALOGUE, DDP_KNOBS, SFT_KNOBS
from autotune.space.mapping import trial_kwargs

BASE = {"optim": "adafactor", "bf16": True, "per_device_train_batch_size": 4, "torch_compile": True}


def _field(args: TrainingArguments, name: str) -> Any:
    value = getattr(args, name)
    return getattr(value, "value", value)  # OptimizerNames compares as its string


def assert_same_fields(values: dict[str, Any], reference: TrainingArguments) -> None:
    """Every `TrainingArguments` field the knob values land in holds the reference's value."""
    args, _ = trial_kwargs(values)
    for name, value in args.items():
        expected = _field(reference, name)
        if name == "tf32":
            expected = bool(expected)  # unset: torch's own setting, which is no TF32
        elif name == "torch_compile_mode" and expected is None:
            expected = "default"  # unset: torch.compile's default mode
        assert value == expected, name


@pytest.mark.parametrize("cuda", [False, True])
def test_no_base_config_is_training_arguments_itself(tmp_path: Path, cuda: bool) -> None:
    values = knob_defaults(None, sdpa=True, cuda=cuda)
    reference = TrainingArguments(output_dir=str(tmp_path), use_cpu=not cuda)
    assert_same_fields(values, reference)
    assert values["optim"] == _field(TrainingArguments(output_dir=str(tmp_path)), "optim")
    assert values["dataloader_pin_memory"] is cuda  # TrainingArguments turns it off with use_cpu
    assert values["attn_implementation"] == "sdpa"
    # Every knob has a default, the compile mode only with inductor, the checkpointed layers only
    # with checkpointing; DDP's own settings are None in TrainingArguments (the Trainer and torch
    # decide), so a baseline leaves them unset.
    # pad_to_multiple_of is the data's own (--pad-to-multiple-of): the baseline's collator as configured.
    # TRL's SFTConfig knobs are not fields of TrainingArguments: no baseline value there.
    assert set(values) == set(CATALOGUE) - set(SFT_KNOBS) - {
        "torch_compile_mode",
        "checkpoint_every_n_layers",
        "gradient_checkpointing_reentrant",
        "pad_to_multiple_of",
        *DDP_KNOBS,
    }
    assert values["base_weights"] == "as_is" and values["use_liger_kernel"] is False
    assert values["padding_free"] is False and values["group_by_length"] is False
    assert all(getattr(reference, name) is None for name in DDP_KNOBS)


def test_graded_checkpointing_and_length_grouping_of_a_base_config(tmp_path: Path) -> None:
    base = {
        "activation_checkpointing": True,
        "activation_checkpointing_kwargs": {"every_n_layers": 2, "use_reentrant": False},
        "train_sampling_strategy": "group_by_length",
    }
    values = knob_defaults(base, sdpa=True, cuda=False)
    assert values["activation_checkpointing"] is True
    assert values["checkpoint_every_n_layers"] == 2
    assert values["group_by_length"] is True
    assert base_knobs({"activation_checkpointing": True})["checkpoint_every_n_layers"] == 1


def test_a_base_config_is_built_as_training_arguments(tmp_path: Path) -> None:
    values = knob_defaults(BASE, sdpa=False, cuda=False)
    assert_same_fields(values, TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **BASE))
    assert values["optim"] == "adafactor" and values["precision"] == "bf16"
    assert values["per_device_train_batch_size"] == 4
    assert (values["torch_compile"], values["torch_compile_mode"]) == ("inductor", "default")
    assert values["attn_implementation"] == "eager"  # the model has no sdpa


def test_what_post_init_derives_counts() -> None:
    # A compile mode turns compile on; the deprecated gradient_checkpointing stands for the new name.
    with pytest.warns(FutureWarning, match="gradient_checkpointing"):
        values = knob_defaults(
            {
                "torch_compile_mode": "max-autotune",
                "gradient_checkpointing": True,
                "torch_empty_cache_steps": 5,
            },
            sdpa=True,
            cuda=False,
        )
    assert (values["torch_compile"], values["torch_compile_mode"]) == ("inductor", "max-autotune")
    assert values["activation_checkpointing"] is True
    assert values["torch_empty_cache_steps"] == 5


def test_a_base_config_refused_here_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not valid TrainingArguments on this machine") as info:
        knob_defaults({"tf32": True}, sdpa=True, cuda=False)  # no Ampere GPU here
    assert info.value.hint == "change base_args"  # the field: the CLI names its flag


def test_a_base_config_may_name_its_output_dir() -> None:
    assert knob_defaults({"output_dir": "ignored"}, sdpa=True, cuda=False)["optim"] == base_knobs()["optim"]


def test_field_defaults_are_training_arguments_defaults(tmp_path: Path) -> None:
    # What `base_knobs` reads without building: the same as a built TrainingArguments().
    reference = TrainingArguments(output_dir=str(tmp_path))
    assert_same_fields(base_knobs(), reference)
    on_cpu = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **BASE)
    assert_same_fields({**base_knobs(BASE), "dataloader_pin_memory": False}, on_cpu)  # nothing built
    defaults = training_args_defaults()
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "optim", "bf16", "fp16"):
        assert defaults[name] == _field(reference, name), name


@pytest.mark.parametrize(
    "values",
    [
        {"precision": "bf16+tf32", "optim": "sgd", "torch_compile": "aot_eager", "dataloader_num_workers": 2},
        {"precision": "fp16", "torch_compile": "inductor", "torch_compile_mode": "reduce-overhead"},
        {"torch_empty_cache_steps": 0, "dataloader_pin_memory": False, "activation_checkpointing": True},
    ],
)
def test_knobs_of_inverts_trial_kwargs(values: dict[str, Any]) -> None:
    args, _ = trial_kwargs(values)
    derived = knobs_of({**training_args_defaults(), **args})
    assert {k: derived[k] for k in values} == values


def test_every_build_switches_tf32_as_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers caches its TF32 switch: in one process, tf32=False, then True, then False left
    TF32 on for the last (an fp32 trial after a tf32 one, seen on an H100). Here the GPU check is
    faked so the switch runs on a CPU build of torch, whose flag is the same global."""
    import torch
    import transformers.training_args as training_args_module

    from autotune.space.defaults import training_arguments

    monkeypatch.setattr(training_args_module, "is_torch_tf32_available", lambda: True)
    saved = torch.backends.fp32_precision
    try:
        seen = []
        for tf32 in (False, True, False, True):
            training_arguments(output_dir=str(tmp_path), use_cpu=True, tf32=tf32)
            seen.append(torch.backends.fp32_precision)
    finally:
        torch.backends.fp32_precision = saved
    assert seen == ["ieee", "tf32", "ieee", "tf32"]


def test_reading_the_defaults_selects_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine `TrainingArguments` selects cuda:0, which creates a CUDA context: the
    search's own process held 518 MiB of an H100 for the whole search that way. The GPU is faked
    (a CPU build of torch takes the same branch of transformers with these three answers)."""
    import torch

    selected: list[Any] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    defaults = knob_defaults(None, sdpa=True, cuda=True)
    assert selected == []
    assert torch.cuda.set_device == selected.append  # put back afterwards
    assert defaults["dataloader_pin_memory"] is True  # still read as a GPU run reads it


def test_tf32_is_read_as_a_trial_sets_it_through_either_api() -> None:
    """transformers sets TF32 through torch's new API, accelerate (compiled fp32 runs) through the
    legacy flag. `torch.get_float32_matmul_precision()` raises once the new API set TF32 on;
    `tf32_matmuls` reads every state."""
    import torch

    from autotune.space.defaults import tf32_matmuls

    matmul: Any = torch.backends.cuda.matmul
    backends: Any = torch.backends
    saved = (backends.fp32_precision, matmul.fp32_precision)
    seen = []
    try:
        seen.append(tf32_matmuls())  # torch's default
        backends.fp32_precision = "tf32"  # TrainingArguments(tf32=True)
        seen.append(tf32_matmuls())
        with pytest.raises(RuntimeError):  # what the trial read before: it failed every tf32 trial
            torch.get_float32_matmul_precision()
        backends.fp32_precision = "ieee"  # TrainingArguments(tf32=False)
        seen.append(tf32_matmuls())
        matmul.allow_tf32 = True  # accelerate, for a compiled run without mixed precision
        seen.append(tf32_matmuls())
    finally:
        backends.fp32_precision, matmul.fp32_precision = saved
    assert seen == [False, True, False, True]


def test_the_defaults_are_kept_per_installed_transformers_and_read_back_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.space import defaults as module

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    module._field_defaults.cache_clear()
    read = module._read_field_defaults()
    assert training_args_defaults() == read
    (saved,) = (tmp_path / "autotune" / "training-args-defaults").glob("*.json")
    module._field_defaults.cache_clear()
    monkeypatch.setattr(module, "_read_field_defaults", lambda: pytest.fail("read again, not from the file"))
    assert training_args_defaults() == read  # every field, from the file
    # Another transformers (another stamp) does not take this file's defaults.
    other = json.loads(saved.read_text())
    saved.write_text(json.dumps({**other, "stamp": "another", "defaults": {**read, "optim": "sgd"}}))
    module._field_defaults.cache_clear()
    monkeypatch.setattr(module, "_read_field_defaults", lambda: read)
    assert training_args_defaults() == read
    assert json.loads(saved.read_text())["stamp"] == other["stamp"]  # written anew
    saved.write_text("{not json")
    module._field_defaults.cache_clear()
    assert training_args_defaults() == read
    module._field_defaults.cache_clear()


def test_reading_the_kept_defaults_imports_no_training_arguments(tmp_path: Path) -> None:
    code = (
        "import sys; from autotune.space.defaults import training_args_defaults; "
        "training_args_defaults(); print('transformers.training_args' in sys.modules)"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    first, second = (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        for _ in range(2)
    )
    assert first.stdout.strip() == "True", first.stderr[-2000:]  # read once, through transformers
    assert second.stdout.strip() == "False", second.stderr[-2000:]
