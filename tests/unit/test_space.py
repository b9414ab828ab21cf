"""Search spaces: loading, every validation error, sampling through optuna, fingerprints."""

from __future__ import annotations

import math
import re
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import SpaceError, UsageError
from autotune.space import SearchSpace, builtin_spaces, load_space, parse_space
from autotune.space.knobs import CATALOGUE, PRECISIONS, SFT_KNOBS
from tests.helpers import write_file as write

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (REPO / "search_spaces").glob("*.yaml"))

VALID = """\
description: a test space
knobs:
  per_device_train_batch_size: [8, 16, 32]
  precision: [fp32, bf16]
  torch_compile: ["off", inductor]
  activation_checkpointing: [false, true]
"""


def load_error(path: Path, pattern: str) -> SpaceError:
    """Load `path`, expecting a SpaceError whose message starts with the file name, then `pattern`."""
    with pytest.raises(SpaceError, match="^" + re.escape(str(path)) + ": " + pattern) as info:
        load_space(path)
    return info.value


# --- loading -------------------------------------------------------------------------------------


def test_shipped_spaces_are_found():
    assert SHIPPED, "no spaces in search_spaces/"
    assert sorted(builtin_spaces()) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_space_loads(name):
    space = load_space(name).for_hardware(8, "tensor cores")
    assert space.name == name
    assert space.knobs
    assert set(space.knobs) <= set(CATALOGUE)
    for key, values in space.knobs.items():
        assert isinstance(values, tuple)
        assert all(CATALOGUE[key].check(v) is None for v in values), key
    assert space.grid_size() >= 1


def test_default_space_covers_the_whole_catalogue_but_trl_s_own_knobs():
    assert set(load_space("default").knobs) == set(CATALOGUE) - set(SFT_KNOBS)
    assert set(SFT_KNOBS) <= set(load_space("trl").knobs)


def test_space_from_a_file(tmp_path):
    path = write(tmp_path, VALID, "mine.yaml")
    space = load_space(path)
    assert space.name == "mine"
    assert space.source == str(path)
    assert space.description == "a test space"
    assert list(space.knobs) == [
        "per_device_train_batch_size",
        "precision",
        "torch_compile",
        "activation_checkpointing",
    ]
    assert space.knobs["per_device_train_batch_size"] == (8, 16, 32)
    assert space.knobs["precision"] == ("fp32", "bf16")
    assert space.knobs["torch_compile"] == ("off", "inductor")
    assert space.knobs["activation_checkpointing"] == (False, True)
    # a str path works as well as a Path
    assert load_space(str(path)) == space


def test_description_is_optional(tmp_path):
    space = load_space(write(tmp_path, "knobs:\n  precision: [bf16]\n"))
    assert space.description == ""
    assert space.knobs == {"precision": ("bf16",)}


def test_to_dict_round_trips(tmp_path):
    space = load_space(write(tmp_path, VALID))
    again = parse_space(space.to_dict(), name=space.name, source=space.source)
    assert again == space


# --- validation errors -----------------------------------------------------------------------------


def test_space_error_is_a_usage_error_with_exit_code_2():
    assert issubclass(SpaceError, UsageError)
    assert SpaceError("x").exit_code == 2


def test_unknown_knob_names_file_key_and_known_knobs(tmp_path):
    path = write(tmp_path, "knobs:\n  batch_size: [8]\n")
    err = load_error(path, r"unknown knob 'batch_size' \(known knobs: ")
    for name in CATALOGUE:
        assert name in str(err)


def test_empty_list(tmp_path):
    path = write(tmp_path, "knobs:\n  precision: []\n")
    load_error(path, re.escape(f"knobs.precision is an empty list (allowed: {', '.join(PRECISIONS)})"))


@pytest.mark.parametrize(
    ("text", "shown"),
    [("precision: bf16", "'bf16'"), ("per_device_train_batch_size: 8", "8"), ("optim:", "None")],
)
def test_scalar_instead_of_a_list(tmp_path, text, shown):
    key = text.split(":")[0]
    path = write(tmp_path, f"knobs:\n  {text}\n")
    load_error(path, re.escape(f"knobs.{key} must be a list of values, got {shown}"))


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ('["8"]', "'8'"),
        ("[true]", "True"),
        ("[false]", "False"),
        ("[0]", "0"),
        ("[8, -4]", "-4"),
        ("[8.0]", "8.0"),
    ],
)
def test_batch_size_must_be_a_positive_integer(tmp_path, values, shown):
    path = write(tmp_path, f"knobs:\n  per_device_train_batch_size: {values}\n")
    load_error(
        path,
        re.escape(
            f"knobs.per_device_train_batch_size: expected a positive integer, got {shown} "
            "(allowed: positive integers"
        ),
    )


@pytest.mark.parametrize(("values", "shown"), [("[0]", "0"), ("[1]", "1"), ('["true"]', "'true'")])
def test_checkpointing_must_be_bool(tmp_path, values, shown):
    path = write(tmp_path, f"knobs:\n  activation_checkpointing: {values}\n")
    load_error(
        path,
        re.escape(
            f"knobs.activation_checkpointing: expected true or false, got {shown} (allowed: [false, true])"
        ),
    )


def test_precision_outside_the_allowed_set_lists_allowed_values(tmp_path):
    path = write(tmp_path, "knobs:\n  precision: [fp32, fp4]\n")
    allowed = ", ".join(PRECISIONS)
    load_error(path, re.escape(f"knobs.precision: 'fp4' is not one of {allowed} (allowed: {allowed})"))


def test_unquoted_off_is_rejected_not_silently_accepted(tmp_path):
    # YAML 1.1 reads a bare `off` as false; the message must still point at the key.
    path = write(tmp_path, "knobs:\n  torch_compile: [off, inductor]\n")
    load_error(path, re.escape("knobs.torch_compile: False is not one of off, "))


def test_duplicate_value(tmp_path):
    path = write(tmp_path, "knobs:\n  per_device_train_batch_size: [8, 16, 8]\n")
    load_error(path, re.escape("knobs.per_device_train_batch_size lists a value twice: [8, 16, 8]"))


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, "knob:\n  precision: [bf16]\nknobs:\n  precision: [bf16]\n")
    load_error(path, re.escape("unknown top-level key 'knob' (allowed keys: description, knobs)"))


@pytest.mark.parametrize(
    "text",
    ["description: no knobs\n", "knobs:\n", "knobs: {}\n", "knobs: [precision]\n", "knobs: bf16\n"],
    ids=["missing", "null", "empty", "list", "scalar"],
)
def test_knobs_must_be_a_non_empty_mapping(tmp_path, text):
    path = write(tmp_path, text)
    load_error(path, re.escape("'knobs' must be a non-empty mapping"))


@pytest.mark.parametrize("text", ["- precision\n- optim\n", "just text\n", "", "42\n"])
def test_document_must_be_a_mapping(tmp_path, text):
    path = write(tmp_path, text)
    load_error(path, re.escape("expected a mapping with a 'knobs' key"))


def test_description_must_be_a_string(tmp_path):
    path = write(tmp_path, "description: [a, b]\nknobs:\n  precision: [bf16]\n")
    load_error(path, re.escape("'description' must be a string"))


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "knobs:\n\tprecision: [fp32]\n")
    load_error(path, re.escape("not valid YAML at line 2 (fix the syntax of the file)"))


def test_missing_file_lists_shipped_spaces(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(
        SpaceError, match=re.escape(f"search space '{path}' is neither a shipped space nor a file")
    ):
        load_space(path)
    with pytest.raises(SpaceError, match=re.escape(f"use one of: {', '.join(SHIPPED)}, or a path")):
        load_space(path)


def test_unknown_name_lists_shipped_spaces():
    with pytest.raises(SpaceError, match=re.escape("'nope' is neither a shipped space nor a file")) as info:
        load_space("nope")
    assert f"use one of: {', '.join(SHIPPED)}" in str(info.value)
    assert info.value.exit_code == 2


def test_a_directory_is_not_a_space(tmp_path):
    with pytest.raises(SpaceError, match="is neither a shipped space nor a file"):
        load_space(tmp_path)


def test_binary_file_is_a_space_error(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_bytes(b"\xff\xfe\x00knobs")
    with pytest.raises(SpaceError, match=re.escape(str(path))):
        load_space(path)


def test_parse_space_uses_the_given_source():
    with pytest.raises(SpaceError, match=r"^<inline>: unknown knob 'nope'"):
        parse_space({"knobs": {"nope": [1]}}, name="x", source="<inline>")


# --- sampling --------------------------------------------------------------------------------------


@pytest.fixture
def space(tmp_path) -> SearchSpace:
    return load_space(write(tmp_path, VALID))


def test_suggest_replays_a_fixed_trial(space):
    chosen = {
        "per_device_train_batch_size": 16,
        "precision": "bf16",
        "torch_compile": "inductor",
        "activation_checkpointing": True,
    }
    assert space.suggest(optuna.trial.FixedTrial(chosen)) == chosen


def test_suggest_with_a_real_trial_picks_candidates(space):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        values = space.suggest(trial)
        assert list(values) == list(space.knobs)
        for key, value in values.items():
            assert value in space.knobs[key]
            assert type(value) is type(space.knobs[key][0])
        assert trial.params == values
        study.tell(trial, 1.0)


def test_hp_space_returns_nothing_but_records_every_param(space):
    study = optuna.create_study()
    trial = study.ask()
    assert space.hp_space(trial) == {}
    assert set(trial.params) == set(space.knobs)
    for key, value in trial.params.items():
        assert value in space.knobs[key]


# --- fingerprint and size ----------------------------------------------------------------------------


def test_fingerprint_equal_for_equal_spaces(tmp_path):
    a = load_space(write(tmp_path, VALID, "a.yaml"))
    b = load_space(write(tmp_path, "description: other words\n" + VALID.split("\n", 1)[1], "b.yaml"))
    assert a.fingerprint() == b.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{16}", a.fingerprint())


def test_fingerprint_changes_with_a_candidate(tmp_path):
    a = load_space(write(tmp_path, VALID, "a.yaml"))
    b = load_space(write(tmp_path, VALID.replace("[8, 16, 32]", "[8, 16, 64]"), "b.yaml"))
    c = load_space(write(tmp_path, VALID.replace("[fp32, bf16]", "[fp32]"), "c.yaml"))
    assert len({a.fingerprint(), b.fingerprint(), c.fingerprint()}) == 3


def test_grid_size(space):
    assert space.grid_size() == 3 * 2 * 2 * 2
    for name in SHIPPED:
        data = yaml.safe_load((REPO / "search_spaces" / f"{name}.yaml").read_text())
        if all(isinstance(v, list) for v in data["knobs"].values()):
            listed = [[x for x in v if x != "fits"] for v in data["knobs"].values()]  # fits: resolved later
            assert load_space(name).grid_size() == math.prod(len(v) for v in listed)


def test_grid_enumerates_every_point_once_with_conditional_knobs(tmp_path):
    path = write(
        tmp_path,
        "knobs:\n"
        "  per_device_train_batch_size: [4, 8]\n"
        "  torch_compile: ['off', inductor]\n"
        "  torch_compile_mode: [default, max-autotune-no-cudagraphs]\n",
    )
    grid = load_space(path).grid()
    # The mode varies only where inductor applies: 2 batches x (off + inductor x 2 modes).
    assert len(grid) == 6
    assert len({tuple(sorted(p.items())) for p in grid}) == 6
    assert {"per_device_train_batch_size": 4, "torch_compile": "off"} in grid
    assert all(("torch_compile_mode" in p) == (p["torch_compile"] == "inductor") for p in grid)
    # Every point is one `suggest` can return.
    for point in grid:
        assert load_space(path).suggest(optuna.trial.FixedTrial(point)) == point


def test_grid_needs_resolved_size_rules(tmp_path):
    path = write(tmp_path, "knobs:\n  per_device_train_batch_size: {min: 8, max: 64, multiple_of: auto}\n")
    with pytest.raises(SpaceError, match="not resolved"):
        load_space(path).grid()
    assert [p["per_device_train_batch_size"] for p in load_space(path).for_hardware(8, "gpu").grid()] == [
        8,
        16,
        32,
        64,
    ]


def test_ddp_knobs_vary_only_where_the_ranks_run_ddp(tmp_path):
    path = write(
        tmp_path,
        "knobs:\n  data_parallel: [ddp, zero2, fsdp_full_shard]\n  ddp_bucket_cap_mb: [25, 100]\n"
        "  ddp_static_graph: [false, true]\n",
    )
    grid = load_space(path).grid()
    # ddp x 2 buckets x 2 graphs, and each sharded strategy once, without DDP's settings.
    assert len(grid) == 4 + 2
    assert all(("ddp_bucket_cap_mb" in p) == (p["data_parallel"] == "ddp") for p in grid)
    assert {"data_parallel": "zero2"} in grid
    for point in grid:
        assert load_space(path).suggest(optuna.trial.FixedTrial(point)) == point


def test_ddp_knobs_without_a_strategy_knob_apply_to_the_default_ddp(tmp_path):
    grid = load_space(write(tmp_path, "knobs:\n  ddp_static_graph: [false, true]\n")).grid()
    assert grid == [{"ddp_static_graph": False}, {"ddp_static_graph": True}]


def test_ddp_knobs_with_only_sharded_strategies_are_a_space_error(tmp_path):
    path = write(tmp_path, "knobs:\n  data_parallel: [zero2, zero3]\n  ddp_static_graph: [false, true]\n")
    with pytest.raises(
        SpaceError, match=r"knobs\.ddp_static_graph only applies when data_parallel is one of ddp"
    ):
        load_space(path)


def test_a_strategy_left_out_here_takes_the_ddp_knobs_with_it_only_when_ddp_goes(tmp_path):
    space = load_space(
        write(tmp_path, "knobs:\n  data_parallel: [ddp, zero2]\n  ddp_static_graph: [false, true]\n")
    )
    kept, dropped = space.without(lambda name, value: "not here" if value == "ddp" else None)
    assert "ddp_static_graph" not in kept.knobs
    assert any(d.startswith("ddp_static_graph: only applies with data_parallel in ['ddp']") for d in dropped)
