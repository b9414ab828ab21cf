"""`autotune report`: the HTML page, its figures' data, the trial table, the PNGs and the command."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
import typer
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.answer.decide import study_answer
from autotune.cli._report import report_command
from autotune.errors import UsageError
from autotune.export.config import export_config
from autotune.export.words import answer_lines
from autotune.records import FinalistRecord, write_study
from autotune.report import build_report, collect, pngs, write_report
from autotune.store.session import StudyStore

MIB = 2**20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DISTRIBUTIONS = {
    "per_device_train_batch_size": CategoricalDistribution([4, 8, 16, 32]),
    "precision": CategoricalDistribution(["fp32", "bf16"]),
}
STUDY = "tiny-gpt2-test-seq128"


def _params(bs: int, prec: str) -> dict[str, Any]:
    return {"per_device_train_batch_size": bs, "precision": prec}


def _add(study: optuna.Study, params: dict[str, Any], state: TrialState, **attrs: Any) -> None:
    value = attrs.get("tokens_per_s") if state == TrialState.COMPLETE else None
    study.add_trial(
        create_trial(
            state=state,
            value=value,
            params=params,
            distributions=DISTRIBUTIONS,
            user_attrs=attrs,
        )
    )


def _measured(tokens: float, peak_mib: float, estimate_mib: float | None, **attrs: Any) -> dict[str, Any]:
    peak = int(peak_mib * MIB)
    out: dict[str, Any] = {
        "tokens_per_s": tokens,
        "samples_per_s": tokens / 128,
        "peak_memory_bytes": peak,
        "rel_ci_halfwidth": 0.025,
        "trained": True,
        "feasible": True,
    }
    if estimate_mib is not None:
        out["memory_estimate_bytes"] = int(estimate_mib * MIB)
        out["memory_estimate_error"] = (estimate_mib * MIB - peak) / peak
    out.update(attrs)
    return out


def _build_study(storage: str) -> optuna.Study:
    """Six trials: three feasible (one dominated), one over the cap, one skipped, one reused."""
    s = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    s.set_user_attr("memory_cap", "800MiB")
    s.set_user_attr("device", {"device": "cpu", "name": "cpu", "count": 1, "memory_bytes": 16 * 2**30})
    s.set_user_attr("workload", {"model": "tiny-gpt2", "task": "causal-lm", "seq_len": 128})
    _add(s, _params(8, "bf16"), TrialState.COMPLETE, **_measured(30001.5, 600, 610))  # 0
    _add(s, _params(4, "fp32"), TrialState.COMPLETE, **_measured(20002.25, 500, 480))  # 1
    over = _measured(
        40003.75,
        900,
        850,
        feasible=False,
        reason="over_memory_cap",
        message="peak memory 900 MiB is over the cap of 800 MiB",
    )
    _add(s, _params(16, "bf16"), TrialState.PRUNED, **over)  # 2
    skipped = {
        "reason": "unavailable",
        "message": "bf16 needs a GPU that supports it",
        "trained": False,
        "feasible": False,
    }
    _add(s, _params(32, "bf16"), TrialState.PRUNED, **skipped)  # 3
    _add(
        s,
        _params(4, "fp32"),
        TrialState.COMPLETE,
        **_measured(20002.25, 500, 480, duplicate_of=1, trained=False, message="same parameters as trial 1"),
    )  # 4
    _add(s, _params(16, "fp32"), TrialState.COMPLETE, **_measured(18004.5, 700, 690))  # 5, dominated
    return s


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The study's store, built once (creating an optuna schema costs ~0.5 s): tests copy it."""
    path = tmp_path_factory.mktemp("template") / "report.db"
    _build_study(f"sqlite:///{path}")
    return path


@pytest.fixture
def storage(tmp_path: Path, template: Path) -> str:
    """A fresh copy of the template store (other tests add their own studies to it)."""
    shutil.copyfile(template, tmp_path / "report.db")
    return f"sqlite:///{tmp_path / 'report.db'}"


@pytest.fixture
def study(storage: str) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=storage)


def _plot(html: str, name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The data and layout of the figure in div `fig-<name>`, decoded from the page's JSON."""
    match = re.search(r'Plotly\.newPlot\(\s*"fig-' + re.escape(name) + r'",\s*', html)
    assert match, f"no figure {name}"
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(html, match.end())
    rest = html[end:].lstrip()
    assert rest.startswith(",")
    layout, _ = decoder.raw_decode(rest[1:].lstrip())
    return data, layout


def _trace(data: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [t for t in data if t.get("name") == name]
    assert found, f"no trace {name!r} in {[t.get('name') for t in data]}"
    return found[0]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=5000",
]


def _needs_chromium() -> None:
    """Skip without a chromium on PATH, except in CI, where .ci/run installs Debian's: there it fails."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH, though .ci/run installs it")
        pytest.skip("needs headless chromium (apt-get install chromium)")


def _png_size(data: bytes) -> tuple[int, int]:
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _rows(html: str) -> dict[int, str]:
    return {int(n): row for n, row in re.findall(r"<tr class='[a-z]+' data-trial='(\d+)'>(.*?)</tr>", html)}


def test_the_page_is_self_contained_with_plotly_inline_once(study: optuna.Study) -> None:
    html = build_report(StudyStore(study))
    assert html.startswith("<!DOCTYPE html>")
    assert len(re.findall(r"\* plotly\.js v\d", html)) == 1
    assert not re.search(r"<script[^>]*\bsrc=", html)
    assert '<script src="http' not in html
    for name in ("history", "throughput_memory", "importance", "memory_estimate"):
        assert html.count(f'id="fig-{name}"') == 1
        assert len(re.findall(r'Plotly\.newPlot\(\s*"fig-' + name + '"', html)) == 1


def test_header_names_study_model_device_and_winner(study: optuna.Study) -> None:
    # the finalists' rounds: trial 0 re-measured at a median of 31,234.5 tok/s, 1.2x trial 1
    write_study(
        study,
        finalists=[
            FinalistRecord(0, [31000.0, 31234.5, 31500.0], [1, 2, 3], scores=[31000.0, 31234.5, 31500.0]),
            FinalistRecord(1, [25800.0, 26030.0, 26200.0], [1, 2, 3], scores=[25800.0, 26030.0, 26200.0]),
        ],
    )
    html = build_report(StudyStore(study))
    assert STUDY in html
    assert "tiny-gpt2 (causal-lm), seq len 128" in html
    assert "CPU (16.00 GiB RAM)" in html
    assert "800MiB (800 MiB)" in html
    # Trials 0, 1, 2 and 5 trained; the skipped one and the reused one did not.
    assert "<dt>trials measured</dt><dd>4 (of 6 finished)</dd>" in html
    assert "trial 0: bs=8 prec=bf16, 30.0k tok/s" in html
    assert "median 31.2k tok/s re-measured" in html
    assert "bs=8 prec=bf16: 1.20x the runner-up (trial 1, 95% interval" in html


def test_the_header_states_the_answer_as_every_export_does(study: optuna.Study) -> None:
    answer = study_answer(StudyStore(study))
    html_text = build_report(StudyStore(study), answer)
    config = export_config(StudyStore(study), answer)
    for line in answer_lines(config, time_line=False):
        key, _, value = line.partition(": ")
        if value and not line.startswith(" "):
            assert f"<dt>{html.escape(key)}</dt><dd>{html.escape(value)}</dd>" in html_text
    assert f"<dd>{html.escape(answer.verdict)}</dd>" in html_text


def test_history_shows_measured_trials_and_the_best_feasible_so_far(study: optuna.Study) -> None:
    data, _ = _plot(build_report(StudyStore(study)), "history")
    feasible = _trace(data, "feasible")
    assert feasible["x"] == [0, 1, 4, 5]
    assert feasible["y"] == [30001.5, 20002.25, 20002.25, 18004.5]
    infeasible = _trace(data, "infeasible")
    assert infeasible["x"] == [2]
    assert infeasible["y"] == [40003.75]
    best = _trace(data, "best feasible so far")
    # The infeasible 40k never becomes the best.
    assert best["y"] == [30001.5] * 6
    assert best["line"]["shape"] == "hv"


def test_throughput_against_memory_has_cap_and_pareto_front(study: optuna.Study) -> None:
    html = build_report(StudyStore(study))
    data, layout = _plot(html, "throughput_memory")
    feasible = _trace(data, "feasible")
    # Reused duplicates are not drawn twice; the skipped trial has no point.
    assert sorted(feasible["text"]) == ["#0", "#1", "#5"]
    assert sorted(feasible["y"]) == [18004.5, 20002.25, 30001.5]
    assert sorted(feasible["x"]) == [500.0, 600.0, 700.0]
    assert sorted(feasible["customdata"]) == [500 * MIB, 600 * MIB, 700 * MIB]
    infeasible = _trace(data, "infeasible")
    assert infeasible["x"] == [900.0]
    assert infeasible["y"] == [40003.75]
    front = _trace(data, "Pareto front (feasible)")
    assert front["x"] == [500.0, 600.0]  # trial 5 (more memory, fewer tokens/s) is dominated
    assert front["y"] == [20002.25, 30001.5]
    assert front["line"]["shape"] == "hv"
    (cap,) = layout["shapes"]
    assert cap["x0"] == cap["x1"] == 800.0
    assert cap["type"] == "line"


def test_cap_line_absent_without_a_cap(storage: str) -> None:
    s = optuna.create_study(study_name="nocap", storage=storage, direction="maximize")
    _add(s, _params(8, "bf16"), TrialState.COMPLETE, **_measured(1000.0, 100, None))
    html = build_report(StudyStore(s))
    _, layout = _plot(html, "throughput_memory")
    assert not layout.get("shapes")
    assert "<dt>memory cap</dt><dd>none</dd>" in html
    # No estimates: a note instead of the figure.
    assert 'id="fig-memory_estimate"' not in html
    assert "No trial carries a memory estimate" in html


def test_fractional_cap_resolves_against_the_device(study: optuna.Study) -> None:
    study.set_user_attr("memory_cap", "5%")  # of 16 GiB
    assert collect(StudyStore(study)).cap_bytes == int(0.05 * 16 * 2**30)


def test_memory_estimate_against_peak_with_the_identity_line(study: optuna.Study) -> None:
    data, _ = _plot(build_report(StudyStore(study)), "memory_estimate")
    points = _trace(data, "trials")
    assert points["text"] == ["#0", "#1", "#2", "#5"]
    assert points["x"] == [610.0, 480.0, 850.0, 690.0]
    assert points["y"] == [600.0, 500.0, 900.0, 700.0]
    line = _trace(data, "estimate = measured")
    assert line["x"] == line["y"]


def test_importances_over_completed_trials(study: optuna.Study) -> None:
    data, _ = _plot(build_report(StudyStore(study)), "importance")
    assert sorted(data[0]["y"]) == ["bs", "prec"]
    assert abs(sum(data[0]["x"]) - 1.0) < 1e-6


def test_importance_note_when_too_few_trials(storage: str) -> None:
    s = optuna.create_study(study_name="few", storage=storage, direction="maximize")
    _add(s, _params(8, "bf16"), TrialState.COMPLETE, **_measured(1000.0, 100, 90))
    _add(s, _params(8, "bf16"), TrialState.COMPLETE, **_measured(1000.0, 100, 90, duplicate_of=0))
    _add(s, _params(16, "bf16"), TrialState.PRUNED, **_measured(2000.0, 200, 190, feasible=False))
    html = build_report(StudyStore(s))
    assert 'id="fig-importance"' not in html
    assert "need at least 2 completed trials with different knob values; this study has 1" in html
    # The other figures are still there, and plotly.js is still embedded once.
    assert len(re.findall(r"\* plotly\.js v\d", html)) == 1
    _plot(html, "history")


def test_empty_study_still_renders(storage: str) -> None:
    s = optuna.create_study(study_name="empty", storage=storage, direction="maximize")
    html = build_report(StudyStore(s))
    assert "no feasible trial" in html
    assert "No trial has a throughput measurement yet." in html
    assert "Plotly.newPlot" not in html


def test_trial_table_best_first_with_reasons_and_reuse(study: optuna.Study) -> None:
    html = build_report(StudyStore(study))
    rows = _rows(html)
    assert list(rows) == [0, 1, 5, 2, 3, 4]  # feasible by tokens/s, then the rest by number
    assert "<tr class='winner' data-trial='0'>" in html
    assert "reused #1" in rows[4]
    assert "pruned (over_memory_cap): peak memory 900 MiB is over the cap of 800 MiB" in rows[2]
    assert "pruned (unavailable): bf16 needs a GPU that supports it" in rows[3]
    cells = re.findall(r"<td class='[a-z]*'>(.*?)</td>", rows[0])
    assert cells == ["0", "8", "bf16", "30.0k", "2.5%", "600 MiB", "610 MiB", "ok"]
    skipped = re.findall(r"<td class='[a-z]*'>(.*?)</td>", rows[3])
    assert skipped[3:7] == ["-", "-", "-", "-"]


def test_table_escapes_html(study: optuna.Study) -> None:
    _add(
        study,
        _params(32, "fp32"),
        TrialState.FAIL,
        reason="error",
        message="<script>alert(1)</script>",
    )
    html = build_report(StudyStore(study))
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_write_report_with_pngs(study: optuna.Study, tmp_path: Path) -> None:
    _needs_chromium()
    out = tmp_path / "out" / "r.html"
    written = write_report(StudyStore(study), out, tmp_path / "out" / "r_png")
    assert written[0] == out
    assert [p.name for p in written[1:]] == [
        "history.png",
        "throughput_memory.png",
        "importance.png",
        "memory_estimate.png",
    ]
    for path in written[1:]:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 5000
        assert _png_size(data) == (pngs.WIDTH, pngs.HEIGHT)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("report")(report_command)
    return app


def test_command_writes_html_and_pngs(
    study: optuna.Study, storage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _needs_chromium()
    out = tmp_path / "site" / "study.html"
    _app()(args=["--study", STUDY, "--storage", storage, "-o", str(out), "--png"], standalone_mode=False)
    lines = capsys.readouterr().out.splitlines()
    png_dir = tmp_path / "site" / "study_png"
    assert lines == [
        f"wrote {out}",
        *(
            f"wrote {png_dir / n}.png"
            for n in ("history", "throughput_memory", "importance", "memory_estimate")
        ),
    ]
    assert all(p.read_bytes().startswith(PNG_SIGNATURE) for p in png_dir.iterdir())


def test_command_default_output_is_report_html(
    study: optuna.Study, storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOTUNE_STORAGE", storage)
    _app()(args=["--study", STUDY], standalone_mode=False)
    assert (tmp_path / "report.html").stat().st_size > 100_000
    assert not (tmp_path / "report_png").exists()


def test_command_missing_study_lists_the_stored_ones(study: optuna.Study, storage: str) -> None:
    optuna.create_study(study_name="another", storage=storage)
    with pytest.raises(UsageError) as info:
        _app()(args=["--study", "nope", "--storage", storage], standalone_mode=False)
    assert "no study 'nope'" in str(info.value)
    assert f"(studies there: another, {STUDY})" in str(info.value)
    assert info.value.exit_code == 2


def test_command_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    with pytest.raises(UsageError, match="does not exist"):
        _app()(args=["--study", "x", "--storage", f"sqlite:///{db}"], standalone_mode=False)
    assert not db.exists()


def test_renders_offline_in_headless_chromium(study: optuna.Study, tmp_path: Path) -> None:
    _needs_chromium()
    page = tmp_path / "report.html"
    write_report(StudyStore(study), page)
    assert CHROMIUM is not None
    flags = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    # The inline plotly.js ran with no network: every figure became an SVG.
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert dom.count('class="main-svg"') >= 4
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1400,3000", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert _png_size(data) == (1400, 3000)
    assert len(data) > 50_000


def test_trial_table_shows_mfu_only_where_it_is_known(study: optuna.Study) -> None:
    assert "<th title='model FLOPs utilisation'>MFU</th>" not in build_report(StudyStore(study))  # CPU trials
    _add(study, _params(16, "bf16"), TrialState.COMPLETE, **_measured(40_000, 700, None, mfu=0.4237))
    html = build_report(StudyStore(study))
    assert "<th title='model FLOPs utilisation'>MFU</th>" in html
    rows = _rows(html)
    cells = re.findall(r"<td class='[a-z]*'>(.*?)</td>", rows[6])
    assert cells[3:6] == ["40.0k", "2.5%", "42.4%"]
    assert re.findall(r"<td class='[a-z]*'>(.*?)</td>", rows[0])[5] == "-"  # a trial without MFU


def test_header_shows_the_finalists_rounds_and_the_search_time(study: optuna.Study) -> None:
    study.set_user_attr(
        "finalists",
        [
            {"number": 0, "tokens_per_s": [31e3, 32e3, 30e3, 31e3], "median": 31e3, "spread": 0.03},
            {"number": -1, "tokens_per_s": [25e3, 26e3, 24e3], "median": 25e3, "spread": 0.04},
        ],
    )
    study.set_user_attr(
        "time_breakdown",
        {
            "wall_s": 50.0,
            "slots": 1,
            "phases": {"setup_s": 5.0, "window_s": 40.0, "between_s": 5.0},
            "measured_share": 0.8,
            "stages": {"search_s": 30.0, "finalists_s": 20.0},
        },
    )
    html = build_report(StudyStore(study))
    assert "#0 31.0k tok/s ±3.0% over 4 rounds, baseline 25.0k tok/s ±4.0% over 3 rounds" in html
    assert "<dt>search time</dt><dd>50.0 s, 80% of it measured (set-up 5.0 s" in html


def test_header_derives_the_finalists_median_and_spread_from_their_rounds(study: optuna.Study) -> None:
    # Version 1 stores keep each round's figures, not the median and spread version 0 stored.
    write_study(
        study,
        finalists=[
            FinalistRecord(0, [31e3, 32e3, 30e3, 31e3], [1, 2, 3, 4], scores=[31e3, 32e3, 30e3, 31e3]),
            FinalistRecord(-1, [25e3, 26e3, 24e3], [1, 2, 3]),
        ],
    )
    html = build_report(StudyStore(study))
    assert "#0 31.0k tok/s ±3.2% over 4 rounds, baseline 25.0k tok/s ±4.0% over 3 rounds" in html
