"""`autotune report`: the page's jinja2 template (escaping, each figure once, shipped in the wheel)
and the PNGs as screenshots of the page's plotly figures (the browser found, failing, stopped)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import typer
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.cli._report import report_command
from autotune.errors import AutotuneError, UsageError
from autotune.report import FIGURES, ReportData, build_report, pngs, write_report
from autotune.report import page as page_module
from autotune.store.session import StudyStore
from tests.unit.test_report import PNG_SIGNATURE, STUDY, _build_study, _measured

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def storage(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'render.db'}"


@pytest.fixture
def study(storage: str) -> optuna.Study:
    return _build_study(storage)


def _figure_sections(html: str) -> list[str]:
    return re.findall(r"<section class='figure' id='([a-z_]+)'>", html)


def test_each_figure_appears_once(study: optuna.Study) -> None:
    html = build_report(StudyStore(study))
    assert _figure_sections(html) == list(FIGURES)
    # One plotly div per figure, each drawn by one Plotly.newPlot call.
    assert html.count('class="plotly-graph-div"') == len(FIGURES)
    assert len(re.findall(r"Plotly\.newPlot\(", html)) == len(FIGURES)
    # No second rendering of a figure as an image in the page (outside plotly.js and the figures).
    markup = re.sub(r"<script.*?</script>", "", html, flags=re.DOTALL)
    assert "<img" not in markup
    assert "data:image" not in markup


def test_a_figure_the_data_cannot_draw_appears_once_as_its_note(storage: str) -> None:
    s = optuna.create_study(study_name="one", storage=storage, direction="maximize")
    s.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=1000.0,
            params={"precision": "bf16"},
            distributions={"precision": CategoricalDistribution(["fp32", "bf16"])},
            user_attrs=_measured(1000.0, 100, None),
        )
    )
    html = build_report(StudyStore(s))
    assert _figure_sections(html) == list(FIGURES)
    assert html.count('class="plotly-graph-div"') == 2  # history, throughput against memory
    assert html.count("<p class='note'>") == 2  # importances, memory estimate
    assert "<h2>Memory estimate against measured peak</h2>" in html


def test_the_template_escapes_study_and_knob_names(storage: str) -> None:
    name, knob = "a<b>&'c", "x<y&z"
    s = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    s.set_user_attr("workload", {"model": "m<&>"})
    for value, tokens in ((1, 1000.0), (2, 2000.0)):
        s.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=tokens,
                params={knob: value},
                distributions={knob: CategoricalDistribution([1, 2])},
                user_attrs=_measured(tokens, 100 * value, None),
            )
        )
    html = build_report(StudyStore(s))
    escaped = "a&lt;b&gt;&amp;&#x27;c"
    assert f"<title>autotune report: {escaped}</title>" in html
    assert f"<h1>autotune report: {escaped}</h1>" in html
    assert f"<dt>study</dt><dd>{escaped}</dd>" in html
    assert "<dt>model</dt><dd>m&lt;&amp;&gt;</dd>" in html
    assert "<th title='x&lt;y&amp;z'>x&lt;y&amp;z</th>" in html
    for raw in (name, knob, "m<&>"):
        assert raw not in html


def test_the_templates_are_package_data() -> None:
    """Every template under autotune/report/templates/ is in the wheel: its folder is listed as a
    package and its files match that package's package-data globs."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "autotune.report.templates" in config["packages"]
    globs = config["package-data"]["autotune.report.templates"]
    folder = REPO / "autotune" / "report" / "templates"
    templates = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert templates == ["figure.html", "report.html"]
    for t in templates:
        assert any(fnmatch.fnmatch(t, g) for g in globs), f"{t} is not in the wheel"


def _fake_browser(bin_dir: Path, body: str) -> Path:
    """A `chromium` on PATH that runs the shell `body` instead of drawing."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "chromium"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("report")(report_command)
    return app


def test_png_without_a_browser_is_refused_before_anything_is_written(
    study: optuna.Study, storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    out = tmp_path / "site" / "r.html"
    with pytest.raises(UsageError) as info:
        write_report(StudyStore(study), out, tmp_path / "site" / "r_png")
    assert "--png needs Chrome or Chromium" in str(info.value)
    assert "apt-get install chromium" in str(info.value)
    assert info.value.exit_code == 2
    assert not (tmp_path / "site").exists()
    with pytest.raises(UsageError, match="--png needs Chrome or Chromium"):
        _app()(args=[STUDY, "--storage", storage, "-o", str(out), "--png"], standalone_mode=False)
    assert not (tmp_path / "site").exists()
    # Without --png no browser is needed.
    assert write_report(StudyStore(study), out) == [out]


def test_a_browser_that_draws_nothing_is_an_error_naming_its_last_words(
    study: optuna.Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake_browser(tmp_path / "bin", "echo 'some warning' >&2\necho 'cannot open display' >&2\nexit 3")
    monkeypatch.setenv("PATH", str(fake.parent))
    with pytest.raises(AutotuneError) as info:
        write_report(StudyStore(study), tmp_path / "r.html", tmp_path / "png")
    assert str(info.value).startswith(f"{fake} did not draw history.png: cannot open display")
    assert info.value.exit_code == 1
    assert not list((tmp_path / "png").iterdir())


@pytest.mark.timeout(60)
def test_a_browser_that_hangs_is_stopped_with_its_children(
    study: optuna.Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    # The fake browser and a child of its own both wait far longer than the time allowed.
    fake = _fake_browser(tmp_path / "bin", f"sleep 300 &\necho $$ $! > {pids}\nwait")
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setattr(pngs, "TIMEOUT_S", 2)
    with pytest.raises(AutotuneError, match=r"did not draw history\.png within 2 s"):
        write_report(StudyStore(study), tmp_path / "r.html", tmp_path / "png")
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), f"process {pid} still runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as stopped.
    stat_line = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return bool(stat_line) and stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def test_each_figure_is_drawn_once_and_its_png_is_that_figure(
    study: optuna.Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The browser gets each figure plotly drew for the page, alone at the PNG's size, with
    plotly.js beside it; the figures are drawn once for the page and the PNGs together."""
    seen = tmp_path / "seen"
    seen.mkdir()
    # A fake browser: keeps the page and plotly.js it is given, and writes a PNG's first bytes.
    fake = _fake_browser(
        tmp_path / "bin",
        'for a in "$@"; do case $a in\n'
        "--screenshot=*) out=${a#--screenshot=};; file://*) page=${a#file://};;\n"
        "esac; done\n"
        f'cp "$page" {seen}/ && cp "$(dirname "$page")/plotly.min.js" {seen}/\n'
        "printf '\\211PNG\\r\\n\\032\\n' > \"$out\"",
    )
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    drawn: list[str] = []
    real = page_module.plotly_figures

    def counting(data: ReportData) -> dict[str, Any]:
        figures = real(data)
        drawn.extend(figures)
        return figures

    monkeypatch.setattr(page_module, "plotly_figures", counting)
    written = write_report(StudyStore(study), tmp_path / "r.html", tmp_path / "png")
    assert drawn == list(FIGURES)  # each figure drawn once
    assert [p.name for p in written[1:]] == [f"{n}.png" for n in FIGURES]
    assert all(p.read_bytes() == PNG_SIGNATURE for p in written[1:])
    assert "* plotly.js v" in (seen / "plotly.min.js").read_text()
    page = (tmp_path / "r.html").read_text()
    for name in FIGURES:
        figure_page = (seen / f"{name}.html").read_text()
        assert f'Plotly.newPlot(                        "fig-{name}"' in figure_page
        assert "<script src='plotly.min.js'></script>" in figure_page
        assert '"staticPlot":true' in figure_page.replace(" ", "")
        data, layout = _plot(figure_page, name)
        assert (layout["width"], layout["height"]) == (pngs.WIDTH, pngs.HEIGHT)
        # The same figure as the page's: the same traces, and the same layout but for the size.
        page_data, page_layout = _plot(page, name)
        assert data == page_data
        assert {k: v for k, v in layout.items() if k not in ("width", "height")} == page_layout


def _plot(html: str, name: str) -> tuple[Any, Any]:
    """The data and layout of figure `name`, decoded from the page's JSON."""
    match = re.search(r'Plotly\.newPlot\(\s*"fig-' + re.escape(name) + r'",\s*', html)
    assert match, f"no figure {name}"
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(html, match.end())
    layout, _ = decoder.raw_decode(html[end:].lstrip().removeprefix(",").lstrip())
    return data, layout


@pytest.mark.parametrize("missing", ["plotly", "jinja2"])
def test_the_command_names_a_missing_report_dependency(
    missing: str, study: optuna.Study, storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # `import <missing>` raises ImportError
    out = tmp_path / "r.html"
    with pytest.raises(UsageError) as info:
        _app()(args=[STUDY, "--storage", storage, "-o", str(out)], standalone_mode=False)
    assert str(info.value) == f"autotune report needs {missing} (pip install 'hf-autotune[report]')"
    assert info.value.exit_code == 2
    assert not out.exists()
