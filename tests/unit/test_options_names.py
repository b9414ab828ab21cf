"""The names a Hugging Face user cannot misread: the measurement options (``settle_steps``,
``measure_steps``, ...) and ``--study`` in every command that names a study; their old names and
the study as an argument still work for one release, and warn; an option given under two names is a
usage error."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.cli._render import err_console
from autotune.errors import UsageError
from autotune.options import ALIASES, MeasureSettings, RunConfig, run_config
from tests.unit.cli_helpers import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Each deprecated name, the option it names, and a value that option takes (other than its default).
OLD_NAMES = [
    ("warmup_steps", "settle_steps", 2),
    ("max_warmup_steps", "max_settle_steps", 25),
    ("eager_warmup_steps", "eager_settle_steps", 2),
    ("min_steps", "min_measure_steps", 4),
    ("max_steps", "measure_steps", 12),
]


@pytest.fixture(autouse=True)
def plain_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.setattr(err_console, "_width", None)


def test_the_deprecated_names_are_the_declared_ones() -> None:
    deprecated = {alias: entry.option for alias, entry in ALIASES.items() if entry.deprecated}
    assert deprecated == {old: new for old, new, _ in OLD_NAMES}
    assert not {"n_trials", "study_name"} & set(deprecated)  # optuna's names are not deprecated
    fields = set(MeasureSettings.__dataclass_fields__)
    assert {new for _, new, _ in OLD_NAMES} <= fields and not {old for old, _, _ in OLD_NAMES} & fields


@pytest.mark.parametrize(("old", "new", "value"), OLD_NAMES)
def test_an_old_keyword_still_works_and_warns_naming_the_new_one(old: str, new: str, value: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name: no warning
        expected = run_config(**{new: value})
    with pytest.warns(
        FutureWarning, match=rf"^{old} is deprecated and goes in the next release: use {new}"
    ) as seen:
        assert run_config(**{old: value}) == expected
    assert len(seen) == 1
    with pytest.warns(FutureWarning, match=rf"^{old} is deprecated.*use {new}") as seen:
        assert MeasureSettings(**{old: value}) == MeasureSettings(**{new: value})
    assert [w.filename for w in seen] == [__file__]  # the warning points at the caller's line


def test_search_and_tune_take_the_old_names_warning_at_the_callers_line() -> None:
    # The window's value is refused, after the warning: it reached the option by its new name.
    with (
        pytest.warns(FutureWarning, match=r"^max_steps is deprecated.*use measure_steps") as seen,
        pytest.raises(UsageError, match=r"^measure_steps must be at least 2, got 1") as info,
    ):
        autotune.search(storage="sqlite://", max_steps=1)
    assert info.value.field == "measure_steps"
    assert [w.filename for w in seen] == [__file__]
    assert "max_steps" in str(seen[0].message) and "TrainingArguments.max_steps" in str(seen[0].message)


@pytest.mark.parametrize(("old", "new", "value"), OLD_NAMES)
def test_an_option_under_its_old_and_new_names_is_refused(old: str, new: str, value: int) -> None:
    with pytest.raises(
        UsageError, match=rf"^{old} and {new} name the same option \(give one of them\)$"
    ) as info:
        run_config(**{old: value, new: value})
    assert info.value.fields == (new, old)
    with pytest.raises(UsageError, match=rf"^{old} and {new} name the same option"):
        MeasureSettings(**{old: value, new: value})
    with pytest.raises(UsageError, match=rf"^{old} and {new} name the same option"):
        autotune.search(storage="sqlite://", **{old: value, new: value})


def test_search_takes_optunas_names_and_its_own_and_refuses_both() -> None:
    with pytest.raises(UsageError, match=r"^trials must be at least 1, got 0"):
        autotune.search(storage="sqlite://", trials=0)
    with pytest.raises(UsageError, match=r"^trials must be at least 1, got 0"):
        autotune.search(storage="sqlite://", n_trials=0, study_name="mine")
    with pytest.raises(UsageError, match=r"^n_trials and trials name the same option"):
        autotune.search(storage="sqlite://", n_trials=2, trials=2)
    with pytest.raises(UsageError, match=r"^study_name and study name the same option"):
        autotune.search(storage="sqlite://", study_name="a", study="a")


# --- a study stored under the old names --------------------------------------------------------------


def test_a_configuration_stored_under_the_old_names_loads_as_the_new_ones() -> None:
    stored = RunConfig(trials=4).to_dict()
    stored["measure"] = {k: v for k, v in stored["measure"].items() if k not in {n for _, n, _ in OLD_NAMES}}
    stored["measure"].update({old: value for old, _, value in OLD_NAMES})
    stored["schema"] = 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what the store holds is not the caller's to fix
        config = RunConfig.from_dict(stored)
    assert config.measure == MeasureSettings(**{new: value for _, new, value in OLD_NAMES})
    assert config.trials == 4


def test_the_oldest_stored_study_keeps_its_measurement_window(tmp_path: Path) -> None:
    from autotune.store.resumable import stored_run_config

    copy = tmp_path / "old.db"
    shutil.copy(FIXTURES / "store_v0.db", copy)
    url = f"sqlite:///{copy}"
    stored = optuna.load_study(study_name="today", storage=url).user_attrs["run_config"]["measure"]
    assert (stored["min_steps"], stored["max_steps"]) == (5, 10)  # written under the old names
    _, _, config = stored_run_config("today", url)
    assert (config.measure.min_measure_steps, config.measure.measure_steps) == (5, 10)
    assert config.measure.max_seconds == 5.0


# --- the command line ----------------------------------------------------------------------------------


def err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_the_old_flags_still_work_and_warn_on_one_line_each(calls, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run("search", "--max-steps", "12", "--warmup-steps", "2") == 0
    measure = calls[0].config.measure
    assert (measure.measure_steps, measure.settle_steps) == (12, 2)
    assert measure == run_config(measure_steps=12, settle_steps=2).measure
    assert sorted(err_lines(capsys)) == [
        "warning: --max-steps is deprecated and goes in the next release: use --measure-steps "
        "(--max-steps reads as the Trainer's own TrainingArguments.max_steps)",
        "warning: --warmup-steps is deprecated and goes in the next release: use --settle-steps "
        "(--warmup-steps reads as the Trainer's own TrainingArguments.warmup_steps)",
    ]


def test_the_new_flags_say_nothing_more(calls, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run("search", "--measure-steps", "12", "--settle-steps", "2") == 0
    assert (calls[0].config.measure.measure_steps, calls[0].config.measure.settle_steps) == (12, 2)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("--max-steps", "5", "--measure-steps", "5"), "--max-steps and --measure-steps"),
        (
            ("--measure-steps", "30", "--max-steps", "5"),
            "--max-steps and --measure-steps",
        ),  # even at its default
        (("--warmup-steps", "2", "--settle-steps", "2"), "--warmup-steps and --settle-steps"),
    ],
)
def test_a_flag_and_its_old_flag_both_are_a_usage_error(calls, capsys, tmp_path, argv, line) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "s.db"
    assert run("search", *argv, "--storage", f"sqlite:///{store}") == 2
    assert err_lines(capsys) == [f"error: {line} name the same option (give one of them)"]
    assert calls == [] and not store.exists()


def test_the_old_flags_are_not_offered(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run("search", "--help") in (0, None)
    out = capsys.readouterr().out
    assert "--measure-steps" in out and "--settle-steps" in out
    assert "--max-steps" not in out and "--warmup-steps" not in out


STUDY_COMMANDS = ["show", "resume", "worker", "export", "report"]


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store holding one study, ``other``: naming ``s`` is refused, naming it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    optuna.create_study(study_name="other", storage=url)
    return url


@pytest.mark.parametrize("command", STUDY_COMMANDS)
def test_every_command_names_its_study_by_the_study_flag(command: str, store: str, capsys) -> None:  # type: ignore[no-untyped-def]
    if command == "report":
        pytest.importorskip("plotly")
    assert run(command, "--study", "s", "--storage", store) == 2
    lines = err_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("error: no study 's' in sqlite:///"), lines
    assert "(studies there: other)" in lines[0]


@pytest.mark.parametrize("command", STUDY_COMMANDS)
def test_the_study_as_an_argument_still_works_and_warns(command: str, store: str, capsys) -> None:  # type: ignore[no-untyped-def]
    if command == "report":
        pytest.importorskip("plotly")
    assert run(command, "s", "--storage", store) == 2
    lines = err_lines(capsys)
    assert lines[0] == (
        f"warning: the study as an argument (autotune {command} s) is deprecated and goes in the next "
        f"release: use autotune {command} --study s"
    )
    assert len(lines) == 2 and lines[1].startswith("error: no study 's' in sqlite:///"), lines


@pytest.mark.parametrize("command", STUDY_COMMANDS)
def test_a_study_named_twice_or_not_at_all_is_a_usage_error(command: str, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "none.db"
    url = f"sqlite:///{store}"
    assert run(command, "a", "--study", "b", "--storage", url) == 2
    assert err_lines(capsys) == [
        "error: the study is named twice, by --study b and as the argument a (give --study alone)"
    ]
    assert run(command, "--storage", url) == 2
    assert err_lines(capsys) == [
        f"error: autotune {command} needs a study (name it with --study NAME; autotune studies lists them)"
    ]
    assert not store.exists()


@pytest.mark.parametrize("command", STUDY_COMMANDS)
def test_the_study_argument_is_not_offered(command: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(command, "--help") in (0, None)
    out = capsys.readouterr().out
    assert f"Usage: autotune {command} [OPTIONS]" in out and "STUDY" not in out and "--study" in out
