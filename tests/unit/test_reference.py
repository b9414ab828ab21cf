"""The manual's generated pages (docs/reference/) are what the code generates: a knob's help, a
command's help or an option's declaration changed without regenerating them fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune.cli import _inspect, reference
from autotune.cli._knobs import knobs_markdown
from autotune.space import knobs
from tests.unit.cli_helpers import run

ROOT = Path(__file__).resolve().parents[2]


def test_every_committed_generated_page_is_what_the_code_generates(tmp_path: Path) -> None:
    assert reference.main(["--out", str(tmp_path)]) == 0
    for path in reference.PAGES:
        committed = ROOT / path
        assert committed.exists(), f"{path} is missing: run `{reference.REGENERATE}` and commit it"
        assert committed.read_text(encoding="utf-8") == (tmp_path / path).read_text(encoding="utf-8"), (
            f"{path} is stale: run `{reference.REGENERATE}` and commit it"
        )
    assert reference.stale(ROOT) == []


def test_a_knob_help_changed_makes_the_knob_page_stale_until_regenerated(monkeypatch, tmp_path) -> None:
    assert reference.main(["--out", str(tmp_path)]) == 0
    changed = dataclasses.replace(knobs.CATALOGUE["precision"], help="a help text nobody wrote")
    monkeypatch.setitem(knobs.CATALOGUE, "precision", changed)
    assert reference.stale(tmp_path) == ["docs/reference/knobs.md"]
    assert reference.stale(ROOT) == ["docs/reference/knobs.md"]
    assert reference.main(["--check", "--out", str(tmp_path)]) == 1
    reference.main(["--out", str(tmp_path)])  # regenerated: current again
    assert "a help text nobody wrote" in (tmp_path / "docs/reference/knobs.md").read_text(encoding="utf-8")
    assert reference.main(["--check", "--out", str(tmp_path)]) == 0


def test_a_command_help_changed_makes_the_cli_page_stale(monkeypatch) -> None:
    monkeypatch.setattr(_inspect.studies_command, "__doc__", "List nothing at all.")
    assert reference.stale(ROOT) == ["docs/reference/cli.md"]
    assert "List nothing at all." in reference.cli_markdown()


def test_a_missing_page_is_stale(tmp_path: Path) -> None:
    assert set(reference.stale(tmp_path)) == set(reference.PAGES)


def test_the_cli_page_lists_every_command_with_its_options() -> None:
    text = reference.cli_markdown()
    for command in ("search", "knobs", "estimate", "studies", "show", "resume", "worker", "export", "report"):
        assert f"\n## autotune {command}\n" in text
    search = text.split("\n## autotune search\n")[1].split("\n## ")[0]
    assert "### The workload: what is trained" in search and "### The store" in search
    assert "| `-m, --model <str>` |" in search and "[default: tiny-gpt2]" in search
    assert "\\[" not in text  # rich markup's escapes are undone


def test_the_knob_page_has_a_row_per_knob_landing_where_its_values_land() -> None:
    text = knobs_markdown()
    for name in knobs.CATALOGUE:
        assert f"\n| `{name}` |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `precision` |"))
    assert "`bf16`, `fp16`, `tf32`" in row and "| yes |" in row
    row = next(line for line in text.splitlines() if line.startswith("| `torch_compile_mode` |"))
    assert "trials with `torch_compile` inductor" in row


def test_knobs_format_markdown_prints_the_knob_page(capsys) -> None:
    assert run("knobs", "--format", "markdown") in (None, 0)
    assert capsys.readouterr().out == (ROOT / "docs/reference/knobs.md").read_text(encoding="utf-8")


def test_knobs_format_markdown_checks_no_model(capsys) -> None:
    assert run("knobs", "--format", "markdown", "--model", "tiny-gpt2") == 2
    err = capsys.readouterr().err
    assert "--format markdown" in err and "--model" in err


@pytest.mark.parametrize("value", ["html", "MARKDOWN"])
def test_knobs_format_takes_table_or_markdown(value, capsys) -> None:
    assert run("knobs", "--format", value) == 2
