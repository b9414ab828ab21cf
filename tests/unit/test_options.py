"""Run options declared once: a flag and a field cannot drift apart.

Every declared option is a flag of ``autotune search`` (or declared without one) and reaches
`RunConfig` through the real parser; every command that shares an option spells its flag as
declared; library errors name the field and the command line prints its flag; the committed
reference is what the declarations generate.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path
from typing import Any

import pytest
import typer

import autotune
import autotune.driver.search
from autotune.cli import app
from autotune.cli._render import err_console
from autotune.errors import StoreError, UsageError
from autotune.options import (
    BY_NAME,
    GROUPS,
    KEYWORDS,
    OPTIONS,
    REFERENCE,
    REGENERATE,
    MeasureSettings,
    RunConfig,
    command_line_text,
    flagged,
    help_text,
    reference,
    run_config,
)
from tests.unit.cli_helpers import run

ROOT = Path(__file__).resolve().parents[2]
FLAGGED = [o for o in OPTIONS if o.flag is not None]

# A value other than the default for every option with a flag, and the flags it needs beside it.
VALUES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "model": ("tiny-llama", ()),
    "space": ("cpu", ()),
    "trials": (5, ()),
    "storage": ("sqlite:////tmp/options.db", ()),
    "study": ("my-study", ()),
    "seq_len": (64, ()),
    "memory_cap": ("20GiB", ()),
    "seed": (7, ()),
    "settle_steps": (4, ()),
    "measure_steps": (12, ()),
    "max_seconds": (9.5, ()),
    "target_rel_ci": (0.05, ()),
    "trial_timeout_s": (120.0, ()),
    "screen_ratio": (0.25, ()),
    "promote_ratio": (0.7, ()),
    "global_batch_size": (16, ()),
    "keep_semantics": (True, ()),
    "base_args": ("base.json", ()),
    "finalists": (2, ()),
    "finalist_rounds": (4, ()),
    "allow_mismatch": (("memory_cap", "torch"), ()),
    "measure_baseline": (False, ()),
    "isolation": ("none", ()),
    "workers": (2, ()),
    "nproc_per_node": (2, ()),
    "ddp_timeout_s": (60.0, ()),
    "backend": ("ray", ()),
    "ray_address": ("head:6379", ("--backend", "ray")),
    "task": ("masked-lm", ()),
    "pretrained": (True, ()),
    "trust_remote_code": (True, ()),
    "dataset": ("corpus.txt", ()),
    "dataset_config": ("wikitext-2-raw-v1", ("--dataset", "wikitext")),
    "split": ("validation", ()),
    "text_column": ("body", ("--dataset", "corpus.jsonl")),
    "tokenizer": ("gpt2", ("--dataset", "corpus.txt")),
    "pad_to_multiple_of": (8, ("--dataset", "corpus.txt")),
    "packing": ("examples", ("--dataset", "corpus.txt")),
    "peft": ("lora", ()),
    "compile_cache": ("/shared/compile", ()),
    "loss_tolerance": (0.1, ()),
    "train_tokens": (1_000_000, ()),
    "train_steps": (100, ()),
    "price_per_hour": (2.5, ()),
    "whole_run_check": (False, ()),
    "eval_batch_size": (4, ()),
    "report_to": (("mlflow", "wandb"), ()),
    "tracker_dir": ("/shared/runs", ()),
}


@pytest.fixture(autouse=True)
def wide_plain_terminal(monkeypatch):
    """No terminal and a wide one: help lines are not cut, errors are one line."""
    for var in ("LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "AUTOTUNE_STORAGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "400")

    def no_terminal(fd: int = 0) -> os.terminal_size:
        raise OSError("not a terminal")

    monkeypatch.setattr(os, "get_terminal_size", no_terminal)
    monkeypatch.setattr(err_console, "_width", None)


def value_of(config: RunConfig, name: str) -> Any:
    return getattr(config.measure if BY_NAME[name].measure else config, name)


def argv_for(name: str, value: Any) -> list[str]:
    option = BY_NAME[name]
    assert option.flag is not None
    if value is True:
        return [option.flag]
    if value is False:
        assert option.negative, f"{name}: a boolean on by default needs an off switch"
        return [option.negative]
    if isinstance(value, tuple):
        return [part for item in value for part in (option.flag, str(item))]
    return [option.flag, str(value)]


# --- the declaration ------------------------------------------------------------------------------


def test_every_option_is_declared_with_help_and_a_known_group():
    assert {o.name for o in OPTIONS} == (
        {f for f in RunConfig.__dataclass_fields__ if f != "measure"}
        | set(MeasureSettings.__dataclass_fields__)
    )
    for option in OPTIONS:
        assert option.help.strip() and option.group in GROUPS, option.name
    assert len({flag for o in OPTIONS for flag in o.flags}) == sum(len(o.flags) for o in OPTIONS)


def test_fields_named_unlike_their_flags_are_declared_with_their_flag():
    renamed = {o.name: o.flags for o in FLAGGED if o.flag != "--" + o.name.replace("_", "-")}
    assert renamed == {
        "target_rel_ci": ("--target-ci",),
        "trial_timeout_s": ("--trial-timeout",),
        "measure_baseline": ("--baseline", "--no-baseline"),
        "ddp_timeout_s": ("--ddp-timeout",),
    }


def test_the_test_values_cover_every_flag():
    # A new option with a flag needs a value here: the test below then proves it reaches RunConfig.
    assert set(VALUES) == {o.name for o in FLAGGED}
    for name, (value, _) in VALUES.items():
        assert value != BY_NAME[name].default, name


# --- the command line -----------------------------------------------------------------------------


def test_search_help_lists_every_option_under_its_flag_and_group(capsys):
    assert run("search", "--help") == 0
    out = capsys.readouterr().out
    for option in FLAGGED:
        for flag in option.flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", out), flag
        first_words = " ".join(help_text(option, command_line=True).split()[:3])
        assert first_words in " ".join(out.replace("│", " ").split()), option.name
    for title in GROUPS.values():
        assert title in out
    for name in ("--store-retry-s", "--debug"):
        assert name in out


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_flag_reaches_its_field_through_the_real_parser(calls, name):
    value, needs = VALUES[name]
    assert run("search", *needs, *argv_for(name, value)) == 0
    assert value_of(calls[-1].config, name) == value


def test_short_aliases_and_the_environment_reach_their_fields(calls, monkeypatch):
    shorts = {o.name: VALUES[o.name][0] for o in FLAGGED if o.short}
    argv = [part for name, value in shorts.items() for part in (BY_NAME[name].short, str(value))]
    assert run("search", *argv) == 0
    assert {name: value_of(calls[-1].config, name) for name in shorts} == shorts
    for option in (o for o in FLAGGED if o.envvar):
        value = VALUES[option.name][0]
        monkeypatch.setenv(option.envvar, str(value))
        assert run("search") == 0
        assert value_of(calls[-1].config, option.name) == value


def test_other_commands_spell_a_shared_option_as_declared():
    """``estimate --seq-len``, ``worker --trust-remote-code``, ``export --memory-cap``, ``resume
    --trials``, ...: one flag, its short alias and its environment variable, wherever it is."""
    by_flag = {o.flag: o for o in FLAGGED}
    root = typer.main.get_command(app)
    shared = 0
    for command in root.commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            option = next((by_flag[f] for f in param.opts if f in by_flag), None)
            if option is None:
                continue
            shared += 1
            where = f"autotune {command.name} {option.flag}"
            assert set(param.opts) | set(param.secondary_opts) == set(option.flags), where
            assert param.envvar == option.envvar, where
    assert shared >= 15


def test_a_bad_value_is_one_line_naming_the_flag(calls, capsys):
    cases = {
        ("--train-steps", "0"): "error: --train-steps must be at least 1, got 0",
        ("--target-ci", "0"): "error: --target-ci must be positive, got 0.0",
        ("--trial-timeout", "-1"): "error: --trial-timeout must be positive, got -1.0",
        ("--ddp-timeout", "0"): "error: --ddp-timeout must be positive, got 0.0",
        ("--no-baseline", "--train-steps", "5"): (
            "error: --train-steps counts steps of the baseline's batch, which --no-baseline does not "
            "measure (drop --no-baseline, or give --train-tokens)"
        ),
        ("--workers", "2", "--isolation", "none"): (
            "error: --workers 2 needs worker processes (drop --isolation none, or --workers)"
        ),
        ("--tokenizer", "gpt2"): "error: --tokenizer only applies with --dataset (give --dataset (a file, "
        "a folder or a hub id))",
    }
    for argv, line in cases.items():
        assert run("search", *argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [line]
        assert "Traceback" not in captured.err + captured.out
    assert calls == []


# --- the library ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"train_steps": 0}, "train_steps", "train_steps must be at least 1, got 0"),
        ({"target_rel_ci": 0.0}, "target_rel_ci", "target_rel_ci must be positive, got 0.0"),
        ({"trial_timeout_s": 0.0}, "trial_timeout_s", "trial_timeout_s must be positive, got 0.0"),
        ({"ddp_timeout_s": 0.0}, "ddp_timeout_s", "ddp_timeout_s must be positive, got 0.0"),
        (
            {"train_steps": 5, "measure_baseline": False},
            "train_steps",
            "train_steps counts steps of the baseline's batch, which measure_baseline=False does not "
            "measure (drop measure_baseline=False, or give train_tokens)",
        ),
    ],
)
def test_library_errors_name_the_field(options, field, message):
    with pytest.raises(UsageError) as info:
        run_config(**options)
    assert str(info.value) == message and "--" not in str(info.value)
    assert info.value.field == field


def test_search_takes_every_option_by_its_name():
    assert run_config(measure_steps=3, settle_steps=25).measure == MeasureSettings(
        settle_steps=25, max_settle_steps=25, min_measure_steps=3, measure_steps=3
    )
    base = RunConfig(trials=3, measure=MeasureSettings(measure_steps=10))
    assert run_config(base, seed=1, allow_mismatch=["torch"]) == RunConfig(
        trials=3, seed=1, allow_mismatch=("torch",), measure=MeasureSettings(measure_steps=10)
    )
    with pytest.raises(UsageError, match=r"^unknown option 'max_step' \(the options are .*options\.md\)$"):
        autotune.search(max_step=3)
    with pytest.raises(UsageError, match=r"^target_rel_ci must be positive") as info:
        autotune.search(storage="sqlite://", target_rel_ci=0.0)
    assert info.value.field == "target_rel_ci"
    parameters = inspect.signature(autotune.search).parameters
    assert set(KEYWORDS) <= set(parameters) and "overrides" not in parameters


def test_tune_takes_the_options_not_named_by_the_trainer(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from autotune.driver.tune import _NOT_OPTIONS, OPTIONS

    keywords = {
        p.name for p in inspect.signature(autotune.tune).parameters.values() if p.kind is p.KEYWORD_ONLY
    }
    assert keywords - {"reporter", "callbacks", "debug"} == set(OPTIONS) and not _NOT_OPTIONS & set(OPTIONS)
    assert {"measure_steps", "measure", "memory_cap", "trial_timeout_s"} <= set(OPTIONS)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=32, n_positions=16))
    trainer = Trainer(
        model=model,
        args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]),
        train_dataset=[{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 4,
    )
    with pytest.raises(UsageError, match=r"^trial_timeout_s must be positive, got 0.0$") as info:
        autotune.tune(trainer, storage="sqlite://", trial_timeout_s=0.0)
    assert info.value.field == "trial_timeout_s"
    with pytest.raises(UsageError, match=r"^tune\(\) takes no option 'seq_len'"):
        autotune.tune(trainer, seq_len=8)
    # the budget and the study by either name, as search() takes them; both at once is refused
    with pytest.raises(UsageError, match=r"^n_trials and trials name the same option") as both:
        autotune.tune(trainer, n_trials=2, trials=3)
    assert both.value.field == "trials"
    with pytest.raises(UsageError, match=r"^study_name and study name the same option"):
        autotune.tune(trainer, study_name="a", study="a")
    with pytest.raises(UsageError, match=r"^trials must be at least 1, got 0"):
        autotune.tune(trainer, trials=0, study="mine")
    with pytest.raises(UsageError, match=r"^trials must be at least 1, got 0"):
        autotune.tune(trainer, n_trials=0, study_name="mine")
    # a measurement option's deprecated name works, with a warning at this line; both names: refused
    with (
        pytest.warns(FutureWarning, match=r"^max_steps is deprecated.*use measure_steps") as seen,
        pytest.raises(UsageError, match=r"^measure_steps must be at least 2, got 1"),
    ):
        autotune.tune(trainer, max_steps=1)
    assert [w.filename for w in seen] == [__file__]
    with pytest.raises(UsageError, match=r"^max_steps and measure_steps name the same option"):
        autotune.tune(trainer, max_steps=5, measure_steps=5)


def test_search_and_tune_take_optunas_names_for_the_budget_and_the_study() -> None:
    from autotune.options import run_config

    assert run_config(None, n_trials=3, study_name="mine") == run_config(None, trials=3, study="mine")
    with pytest.raises(UsageError, match=r"^study_name and study name the same option"):
        run_config(None, study_name="a", study="b")
    with pytest.raises(UsageError, match=r"^trials must be at least 1, got 0") as info:
        autotune.search(storage="sqlite://", n_trials=0)
    assert info.value.field == "trials"


# --- the CLI's spelling of an error ---------------------------------------------------------------


FLAGGED_TEXTS = [
    ("train_steps must be at least 1", ("train_steps",), "--train-steps must be at least 1"),
    ("drop isolation='none', or workers", ("isolation", "workers"), "drop --isolation none, or --workers"),
    ("which measure_baseline=False does not", ("measure_baseline",), "which --no-baseline does not"),
    ("add backend='ray'", ("backend",), "add --backend ray"),
    ("allow_mismatch=('torch', 'cuda')", ("allow_mismatch",), "--allow-mismatch torch --allow-mismatch cuda"),
    # Only the fields the error names, and never inside a longer name or a path:
    ("dataset /data/dataset/a: max_settle_steps", ("dataset", "settle_steps"), "--dataset /data/dataset/a: "
     "max_settle_steps"),
    # no flag: its name stays
    ("min_measure_steps <= measure_steps", ("min_measure_steps",), "min_measure_steps <= measure_steps"),
    # A deprecated name: its old flag.
    ("max_steps and measure_steps", ("measure_steps", "max_steps"), "--max-steps and --measure-steps"),
    ("min_steps", ("min_steps",), "min_steps"),  # a deprecated name whose option has no flag
    ("the model's workers", ("dataset",), "the model's workers"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "fields", "line"), FLAGGED_TEXTS)
def test_flagged_spells_the_named_fields_as_flags(text, fields, line):
    assert flagged(text, fields) == line


def test_an_error_naming_no_field_is_printed_as_it_is():
    assert command_line_text(StoreError("store is locked", "pick another --study")) == (
        "store is locked (pick another --study)"
    )
    error = StoreError("study='x' minimizes", "pick another study name", field="study")
    assert command_line_text(error) == "--study x minimizes (pick another --study name)"


# --- the reference ---------------------------------------------------------------------------------


def test_the_committed_reference_is_what_the_declarations_generate():
    committed = (ROOT / REFERENCE).read_text(encoding="utf-8") if (ROOT / REFERENCE).exists() else ""
    assert committed == reference(), f"{REFERENCE} is stale: run `{REGENERATE}` and commit it"


def test_the_reference_lists_every_option_by_group():
    text = reference()
    sections = text.split("\n## ")[1:]
    assert [s.splitlines()[0] for s in sections] == [*GROUPS.values(), "Other names"]
    for option in OPTIONS:
        section = sections[list(GROUPS).index(option.group)]
        row = next(line for line in section.splitlines() if line.startswith(f"| `{option.name}` |"))
        assert all(f"`{flag}`" in row for flag in option.flags), option.name
    # every other name, with the option it names and its old flag where it has one
    rows = sections[-1].splitlines()
    assert "| `max_steps` | `--max-steps` | `measure_steps` | yes |" in rows
    assert "| `min_steps` | - | `min_measure_steps` | yes |" in rows
    assert "| `n_trials` | - | `trials` | no |" in rows
