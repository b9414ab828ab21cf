"""Run configuration: memory caps, validation, storage defaults, measurement settings."""

from __future__ import annotations

import re

import pytest

from autotune.errors import UsageError
from autotune.options import (
    DEFAULT_STORAGE,
    STORAGE_ENV,
    MeasureSettings,
    MemoryCap,
    RunConfig,
    parse_memory_cap,
)
from autotune.plan.paths import stored_run_config
from autotune.schema import SCHEMA_VERSION
from autotune.store.trust import refuse_stored_remote_code

# --- parse_memory_cap ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("20GiB", 20 * 2**30),
        ("20GB", 20 * 10**9),
        ("20000MiB", 20000 * 2**20),
        ("512kib", 512 * 2**10),
        ("512KiB", 512 * 2**10),
        ("1.5GiB", 3 * 2**29),
        ("2TB", 2 * 10**12),
        ("1tib", 2**40),
        ("4096b", 4096),
        (" 20 GiB ", 20 * 2**30),
    ],
)
def test_sizes(text, size):
    cap = parse_memory_cap(text)
    assert cap.kind == "bytes"
    assert cap.value == size
    assert cap.resolve(80 * 2**30) == size  # an absolute cap ignores the device size
    assert isinstance(cap.resolve(80 * 2**30), int)
    assert cap.text == text.strip()


@pytest.mark.parametrize("text", ["90%", "0.9", " 90 %"])
def test_fractions(text):
    cap = parse_memory_cap(text)
    assert cap.kind == "fraction"
    assert cap.value == pytest.approx(0.9)
    assert cap.resolve(1000) == 900
    assert cap.resolve(10**10) == 9 * 10**9
    assert cap.text == text.strip()


@pytest.mark.parametrize(("text", "value"), [("100%", 1.0), ("1", 1.0), ("50%", 0.5), (".5", 0.5)])
def test_fraction_bounds(text, value):
    cap = parse_memory_cap(text)
    assert cap == MemoryCap("fraction", value, text)
    assert cap.resolve(2**31) == int(value * 2**31)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("abc", ""),
        ("20XB", ": unknown unit 'XB'"),
        ("0%", ": a percentage must be in (0, 100]"),
        ("150%", ": a percentage must be in (0, 100]"),
        ("abc%", ""),
        ("1.5", ": a bare number is a fraction in (0, 1]"),
        ("0", ": a bare number is a fraction in (0, 1]"),
        ("-1GiB", ""),
        ("0GiB", ": must be positive"),
        ("", ""),
        ("GiB", ""),
    ],
)
def test_invalid_caps_name_the_value(text, why):
    with pytest.raises(
        UsageError, match="^" + re.escape(f"invalid memory cap {text!r}{why} (write a size like")
    ):
        parse_memory_cap(text)


def test_memory_cap_error_exit_code():
    with pytest.raises(UsageError) as info:
        parse_memory_cap("lots")
    assert info.value.exit_code == 2
    assert "90%" in info.value.hint


# --- RunConfig -------------------------------------------------------------------------------------


def test_run_config_defaults():
    config = RunConfig()
    assert config.model == "tiny-gpt2"
    assert config.space == "quick"
    assert config.trials == 8
    assert config.measure == MeasureSettings()
    assert config.memory_cap_parsed is None


@pytest.mark.parametrize("trials", [0, -3])
def test_trials_must_be_positive(trials):
    with pytest.raises(UsageError, match="^" + re.escape(f"trials must be at least 1, got {trials}")) as info:
        RunConfig(trials=trials)
    assert info.value.field == "trials"  # a caller of tune()/search() reads the field, not a flag


@pytest.mark.parametrize("seq_len", [1, 0, -8])
def test_seq_len_at_least_two(seq_len):
    with pytest.raises(UsageError, match=re.escape(f"seq_len must be at least 2, got {seq_len}")):
        RunConfig(seq_len=seq_len)
    assert RunConfig(seq_len=2).seq_len == 2


def test_bad_memory_cap_is_rejected_at_construction():
    with pytest.raises(UsageError, match=re.escape("invalid memory cap '20XB'")):
        RunConfig(memory_cap="20XB")


def test_memory_cap_parsed():
    assert RunConfig(memory_cap="20GiB").memory_cap_parsed == MemoryCap("bytes", 20 * 2**30, "20GiB")
    assert RunConfig(memory_cap="90%").memory_cap_parsed.resolve(1000) == 900


def test_storage_default(monkeypatch):
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert DEFAULT_STORAGE == "sqlite:///autotune.db"
    assert RunConfig().storage_url == "sqlite:///autotune.db"


def test_storage_from_env(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "sqlite:////tmp/from-env.db")
    assert RunConfig().storage_url == "sqlite:////tmp/from-env.db"


def test_explicit_storage_beats_env(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "sqlite:////tmp/from-env.db")
    assert RunConfig(storage="sqlite:////tmp/explicit.db").storage_url == "sqlite:////tmp/explicit.db"


def test_to_dict_resolves_storage(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "sqlite:////tmp/from-env.db")
    data = RunConfig(trials=3).to_dict()
    assert data["storage"] == "sqlite:////tmp/from-env.db"
    assert data["trials"] == 3
    assert data["measure"]["measure_steps"] == 30


# --- MeasureSettings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"settle_steps": 0}, r"settle_steps must be >= 1, got 0"),
        ({"settle_steps": 5, "max_settle_steps": 4}, r"max_settle_steps must be >= settle_steps"),
        (
            {"min_measure_steps": 1},
            r"need 2 <= min_measure_steps <= measure_steps.*, got min_measure_steps=1, measure_steps=30",
        ),
        (
            {"min_measure_steps": 6, "measure_steps": 5},
            r"need 2 <= min_measure_steps <= measure_steps.*, got min_measure_steps=6, measure_steps=5",
        ),
        ({"measure_steps": 1, "min_measure_steps": 1}, r"^measure_steps must be at least 2, got 1"),
        ({"max_seconds": 0}, r"^max_seconds must be positive, got 0"),
        ({"max_seconds": -1.0}, r"^max_seconds must be positive, got -1.0"),
        ({"target_rel_ci": 0}, r"^target_rel_ci must be positive, got 0"),
        ({"target_rel_ci": -0.1}, r"^target_rel_ci must be positive, got -0.1"),
    ],
)
def test_measure_settings_validation(kwargs, pattern):
    with pytest.raises(UsageError, match=pattern):
        MeasureSettings(**kwargs)


def test_measure_settings_boundaries_are_legal():
    settings = MeasureSettings(settle_steps=1, max_settle_steps=1, min_measure_steps=2, measure_steps=2)
    assert settings.step_budget == 1 + 2 + 1


def test_step_budget():
    assert MeasureSettings().step_budget == 20 + 30 + 1
    assert MeasureSettings(max_settle_steps=7, measure_steps=11).step_budget == 19


# --- Stored run configurations: versions, paths, remote code ----------------------------------------


def test_stored_config_records_its_schema_and_autotune_version():
    import autotune

    data = RunConfig().to_dict()
    assert data["schema"] == SCHEMA_VERSION and data["autotune_version"] == autotune.__version__
    assert RunConfig.from_dict(data) == RunConfig(storage=RunConfig().storage_display)


def test_a_newer_schema_is_refused_naming_both_versions_and_the_fix():
    data = RunConfig().to_dict() | {"schema": SCHEMA_VERSION + 1, "autotune_version": "9.0.0"}
    with pytest.raises(
        UsageError,
        match=r"schema 6 \(written by autotune 9\.0\.0\), newer than schema 5 of this autotune 0\.1\.0 "
        r"\(upgrade autotune on this worker to 9\.0\.0 or later\)",
    ) as info:
        RunConfig.from_dict(data | {"new_knob": 1})  # its unknown keys are the reason, not a TypeError
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    with pytest.raises(UsageError, match="written by autotune a newer version"):
        RunConfig.from_dict({"schema": 99})
    with pytest.raises(UsageError, match="invalid schema 'x'"):
        RunConfig.from_dict({"schema": "x"})


def test_older_or_unversioned_configs_read_with_defaults_and_unknown_keys_ignored():
    old = {
        "model": "tiny-gpt2",
        "trials": 4,
        "measure": {"measure_steps": 12, "gone_setting": 1},
        "gone": True,
    }
    config = RunConfig.from_dict(old)  # no schema: written before versions were recorded
    assert (config.trials, config.measure.measure_steps, config.nproc_per_node) == (4, 12, 1)
    assert RunConfig.from_dict(old | {"schema": 1}) == config
    assert RunConfig.from_dict(old | {"schema": SCHEMA_VERSION, "later": 1}) == config


def test_local_paths_are_stored_absolute_and_hub_ids_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "mine").mkdir(parents=True)
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    (tmp_path / "base.json").write_text("{}")
    (tmp_path / "space.yaml").write_text("knobs: {}\n")
    config = RunConfig(
        model="models/mine",
        dataset="corpus.jsonl",
        tokenizer="org/tokenizer",
        base_args="base.json",
        space="space.yaml",
    )
    data = stored_run_config(config)
    assert data["model"] == str(tmp_path / "models" / "mine")
    assert data["dataset"] == str(tmp_path / "corpus.jsonl")
    assert data["base_args"] == str(tmp_path / "base.json")
    assert data["space"] == str(tmp_path / "space.yaml")
    assert data["tokenizer"] == "org/tokenizer"  # not here: a hub id
    assert config.model == "models/mine"  # the config itself (and the study name it derives) unchanged
    monkeypatch.chdir("/")
    assert RunConfig.from_dict(data).model == str(tmp_path / "models" / "mine")  # found from anywhere
    hub = stored_run_config(RunConfig(model="org/name", dataset="wikitext"))
    assert (hub["model"], hub["dataset"]) == ("org/name", "wikitext")


def test_presets_and_shipped_spaces_win_over_local_files_of_their_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-gpt2").mkdir()
    (tmp_path / "quick").write_text("")
    data = stored_run_config(RunConfig(model="tiny-gpt2", space="quick"))
    assert (data["model"], data["space"]) == ("tiny-gpt2", "quick")


def test_stored_remote_code_needs_the_workers_own_opt_in():
    stored = RunConfig(model="org/custom", trust_remote_code=True).to_dict()
    with pytest.raises(
        UsageError, match=r"runs code from the hub repository of 'org/custom'.*trust_remote_code=True"
    ) as info:
        refuse_stored_remote_code(stored, allowed=False)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
    refuse_stored_remote_code(stored, allowed=True)
    refuse_stored_remote_code(RunConfig(model="org/plain").to_dict(), allowed=False)
    refuse_stored_remote_code({}, allowed=False)  # an old config without the key asks for nothing


def test_a_compile_cache_folder_is_stored_absolute_before_it_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = stored_run_config(RunConfig(compile_cache="cache/compile"))
    assert data["compile_cache"] == str(tmp_path / "cache" / "compile")
    assert stored_run_config(RunConfig())["compile_cache"] is None
    assert RunConfig.from_dict(data).compile_cache == str(tmp_path / "cache" / "compile")


def test_cap_bytes_is_the_one_conversion_of_a_cap() -> None:
    from autotune.options import cap_bytes

    assert cap_bytes(None, 1000) is None
    assert cap_bytes("90%", 1000) == 900 and cap_bytes("1KiB", 0, study="s") == 1024
    with pytest.raises(UsageError, match="study 's' does not record its device's memory"):
        cap_bytes("90%", 0, study="s")
    with pytest.raises(UsageError, match="invalid memory cap ''"):
        cap_bytes("", 1000)
