"""RESULTS.md is the benchmarks' sections, each rendered from its committed JSON by the module that
measured it, in `assemble.ORDER`: rendering them again changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import assemble, report
from tests.unit.test_bench_screening import WINNER, _data, _run

MEASURED = [(name, module) for name, module in assemble.ORDER if module and report.load(name) is not None]


def test_results_md_is_what_the_committed_json_renders() -> None:
    assert assemble.assemble() == assemble.OUT.read_text(), "stale: python -m benchmarks.assemble"


@pytest.mark.parametrize(("name", "module"), MEASURED, ids=[name for name, _ in MEASURED])
def test_each_section_renders_from_its_json_into_results_md(name: str, module: str) -> None:
    render = assemble._function(module, name, "render")
    assert render is not None, f"benchmarks.{module} has no renderer for results/{name}.json"
    data = report.load(name)
    assert data is not None
    assert render(data) in assemble.OUT.read_text()


def test_every_stored_result_has_its_place_in_the_order() -> None:
    names = {name for name, _ in assemble.ORDER}
    assert {path.stem for path in report.RESULTS.glob("*.json")} <= names


def test_hand_written_sections_are_kept_and_unmeasured_benchmarks_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results, sections = tmp_path / "results", tmp_path / "sections"
    results.mkdir()
    sections.mkdir()
    (results / "screening.json").write_text(
        json.dumps(_data(_run(0.0, 90, 50, WINNER), _run(0.5, 30, 10, WINNER)))
    )
    (sections / "reliability.md").write_text("## Reliability\n\nby hand\n")
    (sections / "gpu.md").write_text("## GPU\n\nnot run yet\n")
    (results / "no_module.json").write_text("{}")  # listed before its module exists
    order = (("screening", "screening"), ("reliability", None), ("no_module", "no_module"), ("gpu", "gpu"))
    monkeypatch.setattr(report, "RESULTS", results)
    monkeypatch.setattr(assemble, "SECTIONS", sections)
    monkeypatch.setattr(assemble, "ORDER", order)
    out = assemble.assemble()
    assert [name for name, _, _ in assemble.parts()] == ["screening", "reliability", "gpu"]
    assert (
        out.index("## 6. Screening") < out.index("## Reliability\n\nby hand") < out.index("## GPU\n\nnot run")
    )
    summary = out[out.index("## Where autotune wins") : out.index("## 6. Screening")]
    assert "- Screening: a 12-trial search over a space where bf16 runs far slower takes 30 s" in summary


def test_check_fails_on_a_stale_results_md(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "RESULTS.md"
    stale.write_text("# by hand\n")
    monkeypatch.setattr(assemble, "OUT", stale)
    monkeypatch.setattr(sys, "argv", ["assemble", "--check"])
    with pytest.raises(SystemExit, match=r"RESULTS\.md is stale"):
        assemble.main()
    monkeypatch.setattr(sys, "argv", ["assemble"])
    assemble.main()
    assert stale.read_text() == assemble.OUT.read_text() != "# by hand\n"


def test_summary_and_table_helpers() -> None:
    assert report.summary([3.0, None, 1.0, 2.0, 10.0]) == {"n": 4, "median": 2.5, "min": 1.0, "max": 10.0}
    assert report.summary([]) == {"n": 0, "median": None, "min": None, "max": None}
    assert report.spread(report.summary([1.0, 3.0]), report.seconds) == "2.00 s (1.00 s-3.00 s)"
    # cells as given: no number parsing (">128" beside "19.5", "1.0" kept)
    assert report.table(["a", "b"], [[">128", "1.0"], ["19.5", None]]).splitlines() == [
        "| a    | b   |",
        "|------|-----|",
        "| >128 | 1.0 |",
        "| 19.5 |     |",
    ]


def test_a_template_field_left_unfilled_is_an_error() -> None:
    with pytest.raises(KeyError, match="claims"):
        report.fill("assemble", "head")
