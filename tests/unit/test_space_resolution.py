"""Resolving a space for a run: size rules, global batch, keep-semantics, dropped values, conditional
knobs; and the base config and run options that feed them."""

from __future__ import annotations

import dataclasses
import json
import re

import optuna
import pytest

from autotune.errors import SpaceError, UsageError
from autotune.options import RunConfig
from autotune.plan.base_args import load_base_args
from autotune.space import SearchSpace, SizeRule, global_batch_splits, load_space, parse_space, precision_of
from tests.helpers import write_file as write

BATCH = "per_device_train_batch_size"
ACCUM = "gradient_accumulation_steps"

RULE_SPACE = """\
description: a rule space
knobs:
  per_device_train_batch_size: {min: 8, max: 256, multiple_of: auto}
  precision: [fp32, bf16]
"""

SPLIT_SPACE = """\
knobs:
  per_device_train_batch_size: [8, 16, 32, 64, 128]
  gradient_accumulation_steps: [1, 2, 4]
  precision: [fp32, bf16, bf16+tf32]
  optim: [adamw_torch, adamw_torch_fused, sgd, adafactor]
  torch_compile: ["off", inductor]
"""

COMPILE_SPACE = """\
knobs:
  torch_compile: ["off", inductor]
  torch_compile_mode: [default, max-autotune]
"""


def inline(knobs: dict, source: str = "<test>") -> SearchSpace:
    return parse_space({"knobs": knobs}, name="test", source=source)


@pytest.fixture
def split_space(tmp_path) -> SearchSpace:
    return load_space(write(tmp_path, SPLIT_SPACE))


def sample_many(space: SearchSpace, n: int = 40) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []
    for _ in range(n):
        trial = study.ask()
        seen.append(space.suggest(trial))
        study.tell(trial, 1.0)
    return seen


# --- SizeRule --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "multiple", "expected"),
    [
        (SizeRule(8, 256, None), 64, (64, 128, 256)),
        (SizeRule(3, 40, 4), 4, (4, 8, 16, 32)),
        (SizeRule(8, 256, None), 8, (8, 16, 32, 64, 128, 256)),
        (SizeRule(8, 100, None), 1, (8, 16, 32, 64)),
        (SizeRule(100, 300, None), 64, (128, 256)),
        (SizeRule(8, 40, None), 64, ()),
        (SizeRule(65, 100, None), 64, ()),
        (SizeRule(64, 64, None), 64, (64,)),
    ],
)
def test_size_rule_candidates(rule, multiple, expected):
    got = rule.candidates(multiple)
    assert got == expected
    assert all(v % multiple == 0 and rule.low <= v <= rule.high for v in got)


def test_rule_space_loads_unresolved(tmp_path):
    space = load_space(write(tmp_path, RULE_SPACE))
    assert space.rules == {BATCH: SizeRule(8, 256, None)}
    assert space.knobs[BATCH] == ()
    assert list(space.knobs) == [BATCH, "precision"]


def test_suggest_before_for_hardware_is_an_error(tmp_path):
    space = load_space(write(tmp_path, RULE_SPACE))
    with pytest.raises(
        SpaceError, match=re.escape("size rules not resolved for a device (call for_hardware)")
    ):
        space.suggest(optuna.trial.FixedTrial({BATCH: 64, "precision": "fp32"}))
    with pytest.raises(SpaceError, match="size rules not resolved"):
        space.with_global_batch(64)


def test_for_hardware_resolves_auto(tmp_path):
    space = load_space(write(tmp_path, RULE_SPACE)).for_hardware(64, "H100-class GPU")
    assert space.rules == {}
    assert space.knobs[BATCH] == (64, 128, 256)
    assert list(space.knobs) == [BATCH, "precision"]
    assert space.notes == (f"{BATCH}: 64, 128, 256 [auto (H100-class GPU)]",)
    chosen = {BATCH: 128, "precision": "bf16"}
    assert space.suggest(optuna.trial.FixedTrial(chosen)) == chosen


def test_for_hardware_on_cpu_uses_every_doubling(tmp_path):
    space = load_space(write(tmp_path, RULE_SPACE)).for_hardware(1, "CPU")
    assert space.knobs[BATCH] == (8, 16, 32, 64, 128, 256)


def test_explicit_multiple_ignores_the_device(tmp_path):
    path = write(tmp_path, RULE_SPACE.replace("multiple_of: auto", "multiple_of: 16"))
    space = load_space(path)
    assert space.rules[BATCH] == SizeRule(8, 256, 16)
    resolved = space.for_hardware(64, "H100-class GPU")
    assert resolved.knobs[BATCH] == (16, 32, 64, 128, 256)
    assert resolved.notes == (f"{BATCH}: 16, 32, 64, 128, 256 [multiple_of 16]",)


def test_for_hardware_without_rules_changes_nothing(split_space):
    assert split_space.for_hardware(64, "x") is split_space


def test_no_multiple_in_range_is_a_space_error(tmp_path):
    path = write(tmp_path, RULE_SPACE.replace("max: 256", "max: 40"))
    space = load_space(path)
    with pytest.raises(
        SpaceError,
        match="^"
        + re.escape(f"{path}: knobs.{BATCH}: no multiple of 64 between 8 and 40 (raise max to at least 64)"),
    ):
        space.for_hardware(64, "H100-class GPU")
    assert space.for_hardware(8, "T4").knobs[BATCH] == (8, 16, 32)


def test_no_multiple_hint_names_a_max_that_works(tmp_path):
    path = write(tmp_path, RULE_SPACE.replace("min: 8, max: 256", "min: 65, max: 100"))
    with pytest.raises(SpaceError, match=re.escape("raise max to at least 128")):
        load_space(path).for_hardware(64, "H100-class GPU")


@pytest.mark.parametrize(
    ("rule", "pattern"),
    [
        ("{min: 8, max: 256, step: 2}", f"knobs.{BATCH}: unknown rule key 'step'"),
        ("{min: 0, max: 256}", f"knobs.{BATCH}.min must be a positive integer, got 0"),
        ("{min: 8}", f"knobs.{BATCH}.max must be a positive integer, got 0"),
        ("{min: 8, max: 4}", f"knobs.{BATCH}: max 4 is below min 8"),
        (
            "{min: 8, max: 256, multiple_of: x}",
            f"knobs.{BATCH}.multiple_of must be auto or a positive integer",
        ),
        (
            "{min: 8, max: 256, multiple_of: 0}",
            f"knobs.{BATCH}.multiple_of must be auto or a positive integer",
        ),
        (
            "{min: 8, max: 256, multiple_of: true}",
            f"knobs.{BATCH}.multiple_of must be auto or a positive integer",
        ),
        ("{min: true, max: 256}", f"knobs.{BATCH}.min must be a positive integer, got True"),
        ("{min: 8, max: 256.0}", f"knobs.{BATCH}.max must be a positive integer, got 256.0"),
    ],
)
def test_invalid_rules_name_the_key(tmp_path, rule, pattern):
    path = write(tmp_path, f"knobs:\n  {BATCH}: {rule}\n")
    with pytest.raises(SpaceError, match="^" + re.escape(f"{path}: {pattern}") + r".*multiple_of: auto"):
        load_space(path)


def test_only_the_batch_size_takes_a_rule():
    with pytest.raises(SpaceError, match=re.escape(f"knobs.{ACCUM} must be a list of values")):
        inline({ACCUM: {"min": 1, "max": 4}})


@pytest.mark.parametrize("multiple", ["auto", 16])
def test_rule_round_trips_through_to_dict(tmp_path, multiple):
    space = load_space(write(tmp_path, RULE_SPACE.replace("multiple_of: auto", f"multiple_of: {multiple}")))
    data = space.to_dict()
    assert data["knobs"][BATCH] == {"min": 8, "max": 256, "multiple_of": multiple}
    again = parse_space(data, name=space.name, source=space.source)
    assert again == space
    assert again.fingerprint() == space.fingerprint()


# --- global_batch_splits ---------------------------------------------------------------------------


def test_global_batch_splits_exact_products():
    splits = global_batch_splits((8, 16, 32, 64, 128), (1, 2, 4), 1, 64)
    assert splits == [(16, 4), (32, 2), (64, 1)]


def test_global_batch_splits_with_two_processes():
    splits = global_batch_splits((8, 16, 32, 64, 128), (1, 2, 4), 2, 64)
    assert splits == [(8, 4), (16, 2), (32, 1)]
    assert all(b * a * 2 == 64 for b, a in splits)


@pytest.mark.parametrize(
    ("global_batch", "world_size"), [(7, 1), (0, 1), (-64, 1), (1024, 1), (64, 0), (64, 3)]
)
def test_global_batch_splits_unreachable(global_batch, world_size):
    assert global_batch_splits((8, 16, 32, 64, 128), (1, 2, 4), world_size, global_batch) == []


# --- with_global_batch -----------------------------------------------------------------------------


def test_with_global_batch(split_space):
    space = split_space.with_global_batch(64)
    assert ACCUM not in space.knobs
    assert space.knobs[BATCH] == (16, 32, 64)
    assert space.global_batch == 64
    assert space.world_size == 1
    assert space.notes[-1] == "global batch 64 = batch x accumulation x 1 rank(s): 16x4, 32x2, 64x1"
    # other knobs are untouched, and the batch stays first
    assert list(space.knobs) == [BATCH, "precision", "optim", "torch_compile"]
    assert space.knobs["precision"] == split_space.knobs["precision"]
    assert space.complete({BATCH: 16})[ACCUM] == 4
    assert space.complete({BATCH: 32})[ACCUM] == 2
    assert space.complete({BATCH: 64})[ACCUM] == 1


def test_with_global_batch_on_two_processes(split_space):
    space = split_space.with_global_batch(64, world_size=2)
    assert space.knobs[BATCH] == (8, 16, 32)
    assert space.world_size == 2
    assert space.complete({BATCH: 16}) == {BATCH: 16, ACCUM: 2}
    assert space.complete({BATCH: 8})[ACCUM] == 4


def test_with_global_batch_drops_a_sampled_accumulation(split_space):
    # replayed params that still carry an accumulation are overridden by the derived one
    space = split_space.with_global_batch(64)
    assert space.complete({BATCH: 16, ACCUM: 1})[ACCUM] == 4


@pytest.mark.parametrize("global_batch", [7, 0, 1024])
def test_unreachable_global_batch_lists_reachable_sizes(split_space, global_batch):
    reachable = sorted({b * a for b in (8, 16, 32, 64, 128) for a in (1, 2, 4)})
    with pytest.raises(
        UsageError, match=re.escape(f"global batch size {global_batch} is not reachable")
    ) as info:
        split_space.with_global_batch(global_batch)
    assert f"use one of {reachable}" in str(info.value)
    assert "[8, 16, 32, 64, 128] x accumulation [1, 2, 4] x 1 process(es)" in str(info.value)


def test_unreachable_with_world_size_lists_scaled_sizes(split_space):
    with pytest.raises(UsageError, match=re.escape("use one of [16, 32, 64, 128, 256, 512, 1024]")):
        split_space.with_global_batch(8, world_size=2)


def test_space_without_accumulation_uses_only_single_steps():
    space = inline({BATCH: [8, 16, 32], "precision": ["fp32"]}).with_global_batch(16)
    assert space.knobs[BATCH] == (16,)
    assert space.complete({BATCH: 16}) == {BATCH: 16, ACCUM: 1}
    with pytest.raises(UsageError, match=re.escape("use one of [8, 16, 32]")):
        inline({BATCH: [8, 16, 32]}).with_global_batch(64)


@pytest.mark.parametrize(("global_batch", "world_size"), [(64, 1), (128, 1), (64, 2), (32, 4)])
def test_real_trials_hit_the_global_batch(split_space, global_batch, world_size):
    space = split_space.with_global_batch(global_batch, world_size)
    seen = sample_many(space)
    for values in seen:
        assert values[BATCH] * values[ACCUM] * world_size == global_batch
        assert values[ACCUM] in (1, 2, 4)
    assert {v[BATCH] for v in seen} == set(space.knobs[BATCH])  # every split is offered


def test_hp_space_does_not_record_the_derived_accumulation(split_space):
    space = split_space.with_global_batch(64)
    trial = optuna.create_study().ask()
    assert space.hp_space(trial) == {}
    assert set(trial.params) == set(space.knobs)
    assert ACCUM not in trial.params


# --- precision_of ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "precision"),
    [
        ({}, "fp32"),
        ({"bf16": True}, "bf16"),
        ({"bf16": True, "tf32": True}, "bf16+tf32"),
        ({"fp16": True}, "fp16"),
        ({"tf32": True}, "tf32"),
        ({"bf16": False, "fp16": False, "tf32": False}, "fp32"),
        ({"tf32": None, "bf16": True}, "bf16"),
    ],
)
def test_precision_of(args, precision):
    assert precision_of(args) == precision


# --- keep_semantics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "precision"),
    [
        ({}, "fp32"),
        ({"bf16": True}, "bf16"),
        ({"bf16": True, "tf32": True}, "bf16+tf32"),
        ({"fp16": True}, "fp16"),
        ({"tf32": True}, "tf32"),
    ],
)
def test_keep_semantics_fixes_precision(split_space, base, precision):
    space = split_space.keep_semantics(base)
    assert "precision" not in space.knobs
    assert space.fixed["precision"] == precision
    assert space.complete({BATCH: 8})["precision"] == precision


def test_keep_semantics_keeps_the_optimizer_family(split_space):
    space = split_space.keep_semantics({"optim": "adamw_torch"})
    assert space.knobs["optim"] == ("adamw_torch", "adamw_torch_fused")
    assert "optim" not in space.fixed
    # without an optim in the base, TrainingArguments' AdamW is assumed
    assert split_space.keep_semantics({}).knobs["optim"] == ("adamw_torch", "adamw_torch_fused")


@pytest.mark.parametrize("optim", ["sgd", "adafactor", "adagrad"])
def test_keep_semantics_fixes_an_optimizer_alone_in_its_family(split_space, optim):
    space = split_space.keep_semantics({"optim": optim})
    assert "optim" not in space.knobs
    assert space.fixed["optim"] == optim
    assert space.complete({BATCH: 8})["optim"] == optim


def test_keep_semantics_holds_the_effective_batch(split_space):
    space = split_space.keep_semantics({BATCH: 8, ACCUM: 2})
    assert space.global_batch == 16
    assert ACCUM not in space.knobs
    assert space.knobs[BATCH] == (8, 16)
    for values in sample_many(space):
        assert values[BATCH] * values[ACCUM] == 16


def test_keep_semantics_default_batch_is_eight(split_space):
    space = split_space.keep_semantics({})
    assert space.global_batch == 8
    assert space.knobs[BATCH] == (8,)
    assert space.complete({BATCH: 8})[ACCUM] == 1


def test_keep_semantics_scales_with_world_size(split_space):
    space = split_space.keep_semantics({BATCH: 16}, world_size=2)
    assert space.global_batch == 32
    assert space.world_size == 2
    for values in sample_many(space, 20):
        assert values[BATCH] * values[ACCUM] == 16


def test_keep_semantics_complete_output(split_space):
    space = split_space.keep_semantics({"bf16": True, "optim": "sgd", BATCH: 16, ACCUM: 2})
    values = space.complete({BATCH: 32, "torch_compile": "inductor"})
    assert values == {
        BATCH: 32,
        "torch_compile": "inductor",
        "precision": "bf16",
        "optim": "sgd",
        ACCUM: 1,
    }
    trial = optuna.trial.FixedTrial({BATCH: 8, "torch_compile": "off"})
    assert space.suggest(trial) == {
        BATCH: 8,
        "torch_compile": "off",
        "precision": "bf16",
        "optim": "sgd",
        ACCUM: 4,
    }


def test_keep_semantics_notes(split_space):
    space = split_space.keep_semantics({"bf16": True, "optim": "sgd"})
    assert "keep semantics: precision=bf16, optim=sgd" in space.notes
    assert space.notes[-1].startswith("global batch 8 = ")
    nothing = inline({BATCH: [8, 16], "torch_compile": ["off"]}).keep_semantics({})
    assert "keep semantics: nothing to hold" in nothing.notes
    assert nothing.fixed == {}


def test_keep_semantics_unreachable_base_batch(split_space):
    with pytest.raises(UsageError, match=re.escape("global batch size 3 is not reachable")):
        split_space.keep_semantics({BATCH: 3})


def test_keep_semantics_without_a_batch_knob_holds_the_base_batch():
    space = inline({"precision": ["fp32", "bf16"]}).keep_semantics({BATCH: 16})
    values = space.complete({})
    assert values[BATCH] * values[ACCUM] == 16


# --- without ---------------------------------------------------------------------------------------


def test_without_drops_exactly_the_unavailable_values(split_space):
    def reason_of(knob, value):
        if knob == "optim" and value in ("sgd", "adafactor"):
            return f"no {value} here"
        if knob == "precision" and value == "bf16+tf32":
            return "no tf32"
        return None

    space, dropped = split_space.without(reason_of)
    assert dropped == [
        "precision=bf16+tf32: no tf32",
        "optim=sgd: no sgd here",
        "optim=adafactor: no adafactor here",
    ]
    assert space.knobs["precision"] == ("fp32", "bf16")
    assert space.knobs["optim"] == ("adamw_torch", "adamw_torch_fused")
    for name in (BATCH, ACCUM, "torch_compile"):
        assert space.knobs[name] == split_space.knobs[name]


def test_without_nothing_unavailable(split_space):
    space, dropped = split_space.without(lambda knob, value: None)
    assert dropped == []
    assert space == split_space


def test_without_keeps_the_resolution(split_space):
    resolved = split_space.keep_semantics({"bf16": True, BATCH: 16})
    space, _ = resolved.without(lambda knob, value: "no" if value == 32 else None)
    assert space.knobs[BATCH] == (8, 16)
    assert space.global_batch == 16
    assert space.fixed == resolved.fixed
    assert space.notes == resolved.notes


def test_without_every_candidate_is_a_space_error(split_space):
    def reason_of(knob, value):
        return f"{value} needs a GPU" if knob == "precision" else None

    with pytest.raises(
        SpaceError,
        match="^"
        + re.escape(
            f"{split_space.source}: no value of knobs.precision can run here "
            "(fp32 needs a GPU; bf16 needs a GPU; bf16+tf32 needs a GPU)"
        ),
    ):
        split_space.without(reason_of)


def test_without_a_held_value_that_cannot_run_is_a_usage_error(split_space):
    space = split_space.keep_semantics({"bf16": True})

    def reason_of(knob, value):
        return "no bf16 here" if value == "bf16" else None

    with pytest.raises(
        UsageError, match=re.escape("the base config's precision=bf16 cannot run here: no bf16 here")
    ):
        space.without(reason_of)
    # the same value as a plain candidate is only dropped
    _, dropped = split_space.without(reason_of)
    assert dropped == ["precision=bf16: no bf16 here"]


# --- conditional knobs -----------------------------------------------------------------------------


@pytest.fixture
def compile_space(tmp_path) -> SearchSpace:
    return load_space(write(tmp_path, COMPILE_SPACE))


def test_mode_is_left_out_without_inductor(compile_space):
    trial = optuna.trial.FixedTrial({"torch_compile": "off", "torch_compile_mode": "default"})
    assert compile_space.suggest(trial) == {"torch_compile": "off"}


def test_mode_is_sampled_with_inductor(compile_space):
    trial = optuna.trial.FixedTrial({"torch_compile": "inductor", "torch_compile_mode": "max-autotune"})
    assert compile_space.suggest(trial) == {"torch_compile": "inductor", "torch_compile_mode": "max-autotune"}


def test_complete_drops_a_mode_that_does_not_apply(compile_space):
    assert compile_space.complete({"torch_compile": "off", "torch_compile_mode": "max-autotune"}) == {
        "torch_compile": "off"
    }
    assert compile_space.complete({"torch_compile": "inductor", "torch_compile_mode": "default"}) == {
        "torch_compile": "inductor",
        "torch_compile_mode": "default",
    }


def test_real_trials_record_the_mode_only_with_inductor(compile_space):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    backends = set()
    for _ in range(30):
        trial = study.ask()
        values = compile_space.suggest(trial)
        backends.add(values["torch_compile"])
        assert ("torch_compile_mode" in values) == (values["torch_compile"] == "inductor")
        assert trial.params == values
        study.tell(trial, 1.0)
    assert backends == {"off", "inductor"}


def test_mode_listed_first_still_works(tmp_path):
    text = 'knobs:\n  torch_compile_mode: [default, max-autotune]\n  torch_compile: ["off", inductor]\n'
    space = load_space(write(tmp_path, text))
    assert list(space.knobs) == ["torch_compile", "torch_compile_mode"]
    trial = optuna.trial.FixedTrial({"torch_compile": "inductor", "torch_compile_mode": "default"})
    assert space.suggest(trial) == {"torch_compile": "inductor", "torch_compile_mode": "default"}
    trial = optuna.trial.FixedTrial({"torch_compile": "off", "torch_compile_mode": "default"})
    assert space.suggest(trial) == {"torch_compile": "off"}


@pytest.mark.parametrize(
    "compile_line",
    ['  torch_compile: ["off", aot_eager]\n', ""],
    ids=["no-inductor", "no-torch-compile"],
)
def test_mode_without_inductor_is_a_space_error(tmp_path, compile_line):
    path = write(tmp_path, "knobs:\n  torch_compile_mode: [default]\n" + compile_line)
    with pytest.raises(
        SpaceError,
        match="^"
        + re.escape(
            f"{path}: knobs.torch_compile_mode only applies when torch_compile is one of inductor "
            "(add inductor to knobs.torch_compile, or drop knobs.torch_compile_mode)"
        ),
    ):
        load_space(path)


# --- describe and fingerprint ----------------------------------------------------------------------


def test_describe_includes_the_resolution(split_space):
    space = split_space.keep_semantics({"bf16": True, BATCH: 8, ACCUM: 2}, world_size=2)
    data = space.describe()
    assert data["fixed"] == {"precision": "bf16"}
    assert data["global_batch"] == 32
    assert data["world_size"] == 2
    assert data["notes"] == list(space.notes)
    assert any(n.startswith("keep semantics: ") for n in data["notes"])
    assert ACCUM not in data["knobs"]
    json.dumps(data)


def test_describe_of_a_plain_space(split_space):
    data = split_space.describe()
    assert data["fixed"] == {}
    assert data["global_batch"] is None
    assert data["world_size"] == 1
    assert data["notes"] == []


def test_fingerprint_changes_with_the_global_batch():
    space = inline({BATCH: [8, 16], ACCUM: [1, 2, 4]})
    a, b = space.with_global_batch(16), space.with_global_batch(32)
    assert a.knobs == b.knobs  # same candidates: only the global batch differs
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() != space.fingerprint()
    assert a.fingerprint() == space.with_global_batch(16).fingerprint()


def test_fingerprint_changes_with_world_size():
    space = inline({BATCH: [8, 16], ACCUM: [1, 2, 4]})
    a, b = space.with_global_batch(32, 1), space.with_global_batch(32, 2)
    assert a.knobs == b.knobs
    assert a.fingerprint() != b.fingerprint()


def test_fingerprint_changes_with_fixed_values(split_space):
    a = split_space.keep_semantics({"bf16": True})
    b = split_space.keep_semantics({"fp16": True})
    assert a.knobs == b.knobs
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == split_space.keep_semantics({"bf16": True}).fingerprint()


def test_fingerprint_ignores_notes(split_space):
    a = split_space.for_hardware(64, "one reason")
    assert dataclasses.replace(a, notes=("other",)).fingerprint() == a.fingerprint()


# --- load_base_args and run options ----------------------------------------------------------------


def test_load_yaml_base_args(tmp_path):
    path = write(tmp_path, "bf16: true\nper_device_train_batch_size: 16\noptim: sgd\n", "base.yaml")
    assert load_base_args(str(path)) == {"bf16": True, "per_device_train_batch_size": 16, "optim": "sgd"}


def test_load_json_base_args(tmp_path):
    data = {"fp16": True, "gradient_accumulation_steps": 4, "learning_rate": 1e-4}
    path = write(tmp_path, json.dumps(data), "base.json")
    assert load_base_args(str(path)) == data


def test_base_args_aliases_are_read_as_the_fields_they_stand_for(tmp_path):
    # transformers 5's deprecated names: the knobs write the fields, so the base config does too
    data = {
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": True},
        "seed": 3,
    }
    path = write(tmp_path, json.dumps(data), "base.json")
    assert load_base_args(str(path)) == {
        "activation_checkpointing": True,
        "activation_checkpointing_kwargs": {"use_reentrant": True},
        "seed": 3,
    }
    # where both are given, the field's value, as TrainingArguments reads them
    both = {"gradient_checkpointing": True, "activation_checkpointing": False}
    both = write(tmp_path, json.dumps(both), "both.json")
    assert load_base_args(str(both)) == {"activation_checkpointing": False}


def test_base_args_unknown_field(tmp_path):
    path = write(tmp_path, "bf16: true\nbatch_size: 16\n", "base.yaml")
    with pytest.raises(
        UsageError, match=re.escape(f"base_args {path}: 'batch_size' is not a TrainingArguments field")
    ):
        load_base_args(str(path))


@pytest.mark.parametrize("field", ["output_dir", "max_steps", "report_to", "num_train_epochs"])
def test_base_args_reserved_field(tmp_path, field):
    path = write(tmp_path, json.dumps({"bf16": True, field: 1}), "base.json")
    with pytest.raises(
        UsageError, match=re.escape(f"base_args {path}: {field!r} is set by the search itself")
    ):
        load_base_args(str(path))


@pytest.mark.parametrize(
    ("text", "name"),
    [("- bf16\n- fp16\n", "base.yaml"), ("", "base.yaml"), ("[1, 2]", "base.json"), ("42", "base.json")],
)
def test_base_args_must_be_a_mapping(tmp_path, text, name):
    path = write(tmp_path, text, name)
    with pytest.raises(
        UsageError, match=re.escape(f"base_args {path} must hold a mapping of TrainingArguments fields")
    ):
        load_base_args(str(path))


@pytest.mark.parametrize(
    ("text", "name"),
    [("bf16: [true\n", "base.yaml"), ("{'bf16': true}", "base.json"), ("bf16: true\n", "base.json")],
)
def test_base_args_invalid_syntax(tmp_path, text, name):
    path = write(tmp_path, text, name)
    with pytest.raises(
        UsageError, match=re.escape(f"base_args {path} is not valid JSON/YAML (fix the file's syntax)")
    ):
        load_base_args(str(path))


def test_base_args_missing_file(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(UsageError, match=re.escape(f"cannot read base_args {path}: ")) as info:
        load_base_args(str(path))
    assert info.value.exit_code == 2


def test_base_args_directory(tmp_path):
    with pytest.raises(UsageError, match=re.escape(f"cannot read base_args {tmp_path}: ")):
        load_base_args(str(tmp_path))


def test_keep_semantics_and_global_batch_are_exclusive():
    with pytest.raises(UsageError, match=re.escape("keep_semantics already holds the global batch")):
        RunConfig(keep_semantics=True, global_batch_size=8)
    assert RunConfig(keep_semantics=True).keep_semantics is True
    assert RunConfig(global_batch_size=8).global_batch_size == 8


@pytest.mark.parametrize("size", [0, -8])
def test_global_batch_size_must_be_positive(size):
    with pytest.raises(UsageError, match=re.escape(f"global_batch_size must be at least 1, got {size}")):
        RunConfig(global_batch_size=size)


def test_without_drops_a_conditional_knob_whose_condition_is_gone():
    space = parse_space(
        {"knobs": {"torch_compile": ["off", "inductor"], "torch_compile_mode": ["default", "max-autotune"]}},
        name="c",
        source="c.yaml",
    )
    pruned, dropped = space.without(lambda knob, value: "no compiler" if value == "inductor" else None)
    assert dict(pruned.knobs) == {"torch_compile": ("off",)}
    assert "torch_compile=inductor: no compiler" in dropped
    assert any(line.startswith("torch_compile_mode: only applies with torch_compile") for line in dropped)
    assert pruned.grid_size() == 1
