"""The command line, through the real parser: flags reach RunConfig, errors become one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import autotune
import autotune.driver.search
from autotune.cli import main
from autotune.cli._render import err_console
from autotune.errors import SearchFailed, StoreError, UsageError
from autotune.options import MeasureSettings, RunConfig
from autotune.space import builtin_spaces
from autotune.view import RichReporter
from tests.unit.cli_helpers import run


@pytest.fixture(autouse=True)
def stderr_is_not_a_terminal(monkeypatch):
    """Make rich see what it sees when stderr goes to a file or a CI log: no terminal, no colour.

    pytest's capture is not a tty either, but rich would still read a terminal size from stdin or
    the environment; remove those so every run of these tests sees the same thing.
    """
    for var in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "AUTOTUNE_STORAGE"):
        monkeypatch.delenv(var, raising=False)

    def no_terminal(fd: int = 0) -> os.terminal_size:
        raise OSError("not a terminal")

    monkeypatch.setattr(os, "get_terminal_size", no_terminal)
    monkeypatch.setattr(err_console, "_width", None)  # in case COLUMNS was set when it was built


def fail_with(monkeypatch, exc: BaseException) -> None:
    def fake_search(config, *, reporter=None, debug=False):
        raise exc

    monkeypatch.setattr(autotune.driver.search, "search", fake_search)


def err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


# --- flags reach the configuration -----------------------------------------------------------------


def test_every_flag_reaches_the_config(calls, capsys):
    code = run(
        "search",
        "--model", "tiny-llama",
        "--space", "cpu",
        "--trials", "5",
        "--storage", "sqlite:////tmp/flag.db",
        "--study", "my-study",
        "--seq-len", "64",
        "--memory-cap", "20GiB",
        "--seed", "7",
        "--settle-steps", "4",
        "--measure-steps", "12",
        "--max-seconds", "9.5",
        "--target-ci", "0.05",
        "--screen-ratio", "0.25",
        "--promote-ratio", "0.7",
    )  # fmt: skip
    assert code == 0
    assert len(calls) == 1
    call = calls[0]
    assert isinstance(call.config, RunConfig)
    assert call.config == RunConfig(
        model="tiny-llama",
        space="cpu",
        trials=5,
        storage="sqlite:////tmp/flag.db",
        study="my-study",
        seq_len=64,
        memory_cap="20GiB",
        seed=7,
        measure=MeasureSettings(
            settle_steps=4,
            max_settle_steps=MeasureSettings().max_settle_steps,
            min_measure_steps=MeasureSettings().min_measure_steps,
            measure_steps=12,
            max_seconds=9.5,
            target_rel_ci=0.05,
            screen_ratio=0.25,
            promote_ratio=0.7,
        ),
    )
    assert call.config.storage_url == "sqlite:////tmp/flag.db"
    assert call.debug is False
    assert isinstance(call.reporter, RichReporter)
    assert capsys.readouterr().err == ""


def test_defaults(calls):
    assert run("search") == 0
    config = calls[0].config
    assert config == RunConfig()
    assert config.storage_url == "sqlite:///autotune.db"


def test_short_flags_and_debug(calls):
    assert run("search", "-m", "tiny-llama", "-s", "default", "-n", "3", "--debug") == 0
    call = calls[0]
    assert (call.config.model, call.config.space, call.config.trials) == ("tiny-llama", "default", 3)
    assert call.debug is True


def test_measurement_flags_keep_settings_consistent(calls):
    assert run("search", "--settle-steps", "25", "--measure-steps", "3") == 0
    measure = calls[0].config.measure
    assert measure.settle_steps == 25
    assert measure.max_settle_steps == 25  # raised to the warm-up minimum
    assert measure.measure_steps == 3
    assert measure.min_measure_steps == 3  # lowered to fit the window


def test_storage_from_env_when_flag_absent(calls, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "sqlite:////tmp/from-env.db")
    assert run("search") == 0
    assert calls[0].config.storage_url == "sqlite:////tmp/from-env.db"


def test_storage_flag_beats_env(calls, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_STORAGE", "sqlite:////tmp/from-env.db")
    assert run("search", "--storage", "sqlite:////tmp/flag.db") == 0
    assert calls[0].config.storage_url == "sqlite:////tmp/flag.db"


# --- usage errors ----------------------------------------------------------------------------------


def test_unknown_option_is_a_usage_error(calls, capsys):
    assert run("search", "--bogus") == 2
    lines = err_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:")
    assert "--bogus" in lines[0]
    assert "--debug" not in lines[0]
    assert calls == []


def test_non_integer_trials_is_a_usage_error(calls, capsys):
    assert run("search", "--trials", "abc") == 2
    lines = err_lines(capsys)
    assert lines[0].startswith("error:")
    assert "--trials" in lines[0]
    assert calls == []


def test_non_integer_trials_never_reaches_search(calls, capsys):
    assert run("search", "--trials", "abc") != 0
    assert calls == []
    assert capsys.readouterr().err.startswith("error:")


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (("--trials", "0"), r"^error: --trials must be at least 1, got 0$"),
        (("--seq-len", "1"), r"^error: --seq-len must be at least 2, got 1$"),
        (
            ("--measure-steps", "1"),
            r"^error: --measure-steps must be at least 2, got 1 \(a confidence interval",
        ),
        (("--target-ci", "0"), r"^error: --target-ci must be positive, got 0.0$"),  # target_rel_ci's flag
    ],
)
def test_invalid_values_exit_2(calls, capsys, argv, pattern):
    assert run("search", *argv) == 2
    err = capsys.readouterr().err
    # whitespace-normalised: staying on one line is test_long_errors_stay_on_one_line's business
    assert re.search(pattern, " ".join(err.split())), err
    assert "Traceback" not in err
    assert calls == []


def test_bad_memory_cap_exits_2_naming_the_value(calls, capsys):
    assert run("search", "--memory-cap", "20XB") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid memory cap '20XB'")
    assert "Traceback" not in err
    assert calls == []


def test_unknown_space_exits_2(capsys):
    # the real search: it loads the space before anything else (no model, no store)
    assert run("search", "--space", "no-such-space", "--storage", "sqlite://") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: search space 'no-such-space' is neither a shipped space nor a file")
    assert all(name in err for name in builtin_spaces())
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "real_search"),
    [
        (("--memory-cap", "20XB"), False),
        (("--space", "no-such-space", "--storage", "sqlite://"), True),  # the driver loads the space
        (("--measure-steps", "1"), False),
    ],
)
def test_long_errors_stay_on_one_line(request, capsys, argv, real_search):
    if not real_search:
        request.getfixturevalue("calls")
    assert run("search", *argv) == 2
    lines = err_lines(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")


def test_error_text_is_printed_verbatim(capsys):
    assert run("search", "--space", "/nonexistent/[exp]/space.yaml", "--storage", "sqlite://") == 2
    assert "/nonexistent/[exp]/space.yaml" in capsys.readouterr().err


def test_error_with_closing_tag_text_exits_1(monkeypatch, capsys):
    fail_with(monkeypatch, RuntimeError("cannot write to [/dev/shm]"))
    assert run("search") == 1
    assert "[/dev/shm]" in capsys.readouterr().err


# --- errors from the search ------------------------------------------------------------------------


def test_unexpected_error_is_one_line_without_traceback(monkeypatch, capsys):
    fail_with(monkeypatch, RuntimeError("boom\nsecond line"))
    assert run("search") == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: RuntimeError: boom")
    assert "--debug" in lines[0]
    assert "second line" not in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_unexpected_error_propagates_with_debug(monkeypatch):
    fail_with(monkeypatch, RuntimeError("boom"))
    with pytest.raises(RuntimeError, match=r"^boom$"):
        main(["search", "--debug"])


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (
            StoreError("store is locked", "pick another --study"),
            1,
            "error: store is locked (pick another --study)",
        ),
        (UsageError("model 'x' not found"), 2, "error: model 'x' not found"),
        (
            SearchFailed(
                "every trial failed the same way (3 trials, error): AttributeError: no 'loss_type'",
                "`autotune show --study s --failed` lists them",
                reason="error",
                trials=3,
            ),
            1,
            "error: every trial failed the same way (3 trials, error): AttributeError: no 'loss_type' "
            "(`autotune show --study s --failed` lists them)",
        ),
    ],
)
def test_autotune_errors_use_their_exit_code(monkeypatch, capsys, exc, code, line):
    fail_with(monkeypatch, exc)
    assert run("search") == code
    assert err_lines(capsys) == [line]


def test_autotune_error_propagates_with_debug(monkeypatch):
    fail_with(monkeypatch, StoreError("store is locked"))
    with pytest.raises(StoreError, match=r"^store is locked$"):
        main(["search", "--debug"])


def test_interrupt_exits_130(monkeypatch, capsys):
    fail_with(monkeypatch, KeyboardInterrupt())
    assert run("search") == 130
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out


def test_interrupt_says_so(monkeypatch, capsys):
    fail_with(monkeypatch, KeyboardInterrupt())
    assert run("search") == 130
    assert err_lines(capsys) == ["interrupted"]


# --- version and help ------------------------------------------------------------------------------


def test_version(capsys):
    assert run("--version") == 0
    assert capsys.readouterr().out.strip() == autotune.__version__


def test_help(capsys):
    assert run("--help") == 0
    assert "search" in capsys.readouterr().out


def test_search_help_lists_every_flag(capsys):
    assert run("search", "--help") == 0
    out = capsys.readouterr().out
    for flag in (
        "--model", "--space", "--trials", "--storage", "--study", "--seq-len", "--memory-cap", "--seed",
        "--settle-steps", "--measure-steps", "--max-seconds", "--target-ci", "--debug",
    ):  # fmt: skip
        assert flag in out, flag


def _estimate(capsys, cap):
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--model", "tiny-gpt2", "--space", "quick", "--seq-len", "32", "--memory-cap", cap])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_estimate_command_prints_the_table(capsys):
    # The estimate includes this process's own baseline (1 GiB and more inside a full test run),
    # so the caps sit far on either side of any estimate this tiny model can have.
    out = _estimate(capsys, "1TiB")
    assert "Memory estimate (quick)" in out
    assert "parameters" in out and "process baseline" in out
    assert "under" in out and "over" not in out
    out = _estimate(capsys, "1MiB")
    assert "clearly over: skipped" in out and "under" not in out


# --- autotune worker ------------------------------------------------------------------------------


@pytest.fixture
def joins(monkeypatch) -> list[dict]:
    """Replace the real pool member with a fake that records what the CLI hands it (and the
    store's check it makes first, with a fake that records what it asked)."""
    import autotune.driver.pool
    import autotune.store.resumable

    seen: list[dict] = []

    def fake_check(study_name, storage_url, *, trust_remote_code):
        seen.append({"checked": study_name, "storage": storage_url, "trust": trust_remote_code})

    monkeypatch.setattr(autotune.store.resumable, "stored_run_config", fake_check)

    def fake_join(study_name, storage_url, *, reporter=None, workers=None, debug=False, trust_remote_code):
        seen.append(
            {"study": study_name, "storage": storage_url, "workers": workers, "trust": trust_remote_code}
        )

    monkeypatch.setattr(autotune.driver.pool, "join_study", fake_join)
    return seen


def test_worker_flags_reach_the_pool_member(joins):
    assert run("worker", "--study", "pool", "--storage", "sqlite:///w.db", "-w", "2") in (0, None)
    assert joins == [
        {"checked": "pool", "storage": "sqlite:///w.db", "trust": False},
        {"study": "pool", "storage": "sqlite:///w.db", "workers": 2, "trust": False},
    ]
    assert run("worker", "--study", "pool", "--storage", "sqlite:///w.db", "--trust-remote-code") in (0, None)
    assert joins[-2]["trust"] is joins[-1]["trust"] is True


def test_compile_cache_flag_reaches_the_config(calls):
    assert run("search", "--compile-cache", "/shared/compile") == 0
    assert calls[0].config.compile_cache == "/shared/compile"


def test_run_flags_reach_the_config(calls, capsys):
    code = run(
        "search", "--loss-tolerance", "0.1", "--train-tokens", "1000000", "--price-per-hour", "2.5",
    )  # fmt: skip
    assert code in (0, None)
    config = calls[-1].config
    assert (config.loss_tolerance, config.train_tokens, config.price_per_hour) == (0.1, 1_000_000, 2.5)
    assert run("search", "--train-steps", "100") in (0, None)
    assert calls[-1].config.train_steps == 100 and calls[-1].config.loss_tolerance == 0.05


def test_run_length_given_twice_is_a_usage_error(calls, capsys):
    assert run("search", "--train-tokens", "10", "--train-steps", "10") == 2
    assert err_lines(capsys)[0].startswith("error: give --train-tokens or --train-steps, not both")
    assert calls == []


def _estimate_rows(capsys, *extra: str) -> tuple[str, list[list[str]]]:
    """`autotune estimate` of tiny-llama's quick space: its header and its table's rows (cells)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--model", "tiny-llama", "--space", "quick", "--seq-len", "32", *extra])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("│")]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines]
    return out.splitlines()[0], rows


def test_estimate_with_peft_counts_optimizer_states_of_the_adapter_only(capsys):
    import peft

    from autotune.workloads.workload import resolve_workload

    full_header, full = _estimate_rows(capsys)
    lora_header, lora = _estimate_rows(capsys, "--peft", "lora")
    assert "trainable" not in full_header
    model = resolve_workload("tiny-llama", 32).build_model({})
    adapter = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in adapter.parameters() if p.requires_grad)
    assert f"{trainable / 1e6:.2f}M trainable" in lora_header
    # the same configurations, each with less for weights+grads+optimizer under the adapter
    static = {tuple(row[:-3]): row[-3] for row in full}
    assert len(lora) == len(full) > 1
    assert all(row[-3] != static[tuple(row[:-3])] for row in lora)


def test_piped_tables_and_lines_are_not_wrapped(tmp_path):
    """Output that is not a terminal (a pipe, a file) keeps each row and line whole, however long."""
    script = (
        "from rich.table import Table\n"
        "from autotune.view import console\n"
        "table = Table('study', 'model')\n"
        "table.add_row('s' * 40, '/very/long/path/' + 'm' * 300)\n"
        "console.print(table)\n"
        "console.print('w ' * 200, highlight=False)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    lines = out.splitlines()
    assert any(("m" * 300) in line and ("s" * 40) in line for line in lines), out
    assert any(line.strip() == ("w " * 200).strip() for line in lines), out


def _complete(words: str, index: int) -> list[str]:
    """What the shell completion offers for `words` at word `index`, as bash asks the installed
    command (click's completion protocol)."""
    env = {**os.environ, "_AUTOTUNE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(index)}
    command = [sys.executable, "-c", "from autotune.cli import main; main()"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    return done.stdout.split()


def test_shell_completion_offers_commands_options_and_their_values():
    assert _complete("autotune st", 1) == ["studies"]
    assert "--format" in _complete("autotune show --fo", 2)
    assert _complete("autotune show -f ", 3) == ["table", "json", "yaml"]
    # typer reads the shell from the process's ancestors unless told not to (its own switch); a
    # test run under nohup or a service manager has no shell among them, so the shell is named
    shown = subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
    )
    assert shown.stdout.startswith("_autotune_completion() {")
