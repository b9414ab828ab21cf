"""Run configuration: memory caps, validation, storage defaults, measurement settings."""

from __future__ import annotations

import re

import pytest

from autotune.config import (
    DEFAULT_STORAGE,
    STORAGE_ENV,
    MeasureSettings,
    MemoryCap,
    RunConfig,
    parse_memory_cap,
)
from autotune.errors import UsageError

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
    with pytest.raises(UsageError, match=re.escape(f"--trials must be at least 1, got {trials}")):
        RunConfig(trials=trials)


@pytest.mark.parametrize("seq_len", [1, 0, -8])
def test_seq_len_at_least_two(seq_len):
    with pytest.raises(UsageError, match=re.escape(f"--seq-len must be at least 2, got {seq_len}")):
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
    assert data["measure"]["max_steps"] == 30


# --- MeasureSettings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"warmup_steps": 0}, r"warmup_steps must be >= 1, got 0"),
        ({"warmup_steps": 5, "max_warmup_steps": 4}, r"max_warmup_steps must be >= warmup_steps"),
        ({"min_steps": 1}, r"need 2 <= min_steps <= max_steps.*, got min_steps=1, max_steps=30"),
        (
            {"min_steps": 6, "max_steps": 5},
            r"need 2 <= min_steps <= max_steps.*, got min_steps=6, max_steps=5",
        ),
        ({"max_seconds": 0}, r"max_seconds and target_rel_ci must be positive"),
        ({"max_seconds": -1.0}, r"max_seconds and target_rel_ci must be positive"),
        ({"target_rel_ci": 0}, r"max_seconds and target_rel_ci must be positive"),
        ({"target_rel_ci": -0.1}, r"max_seconds and target_rel_ci must be positive"),
    ],
)
def test_measure_settings_validation(kwargs, pattern):
    with pytest.raises(UsageError, match=pattern):
        MeasureSettings(**kwargs)


def test_measure_settings_boundaries_are_legal():
    settings = MeasureSettings(warmup_steps=1, max_warmup_steps=1, min_steps=2, max_steps=2)
    assert settings.step_budget == 1 + 2 + 1


def test_step_budget():
    assert MeasureSettings().step_budget == 20 + 30 + 1
    assert MeasureSettings(max_warmup_steps=7, max_steps=11).step_budget == 19
