"""The report's figures as static PNGs: screenshots of the page's plotly figures by headless Chrome.

Each figure is drawn once, by plotly, and the PNG is taken from that same figure: it is put alone on
a page of the PNG's size, with plotly.js beside it on disk, and a headless Chrome or Chromium
(whichever is on PATH) renders the page from the local file and saves a screenshot. plotly needs a
browser to turn a figure into pixels; calling the browser directly, as the report's own rendering
test does, needs no package beyond plotly (kaleido, plotly's exporter, drives the same browser
through three more packages) and no network.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, UsageError
from autotune.report.render import markup, render

# The browsers tried, in this order, by their command names on PATH.
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
# Each PNG's size in pixels.
WIDTH, HEIGHT = 1000, 600
# How long one screenshot may take before the browser is stopped.
TIMEOUT_S = 120
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FLAGS = (
    "--headless",
    # The page is a local file autotune just wrote, and it loads nothing but the plotly.js beside
    # it; the sandbox cannot start as root or in many containers.
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    # Lets plotly's drawing finish before the screenshot, without waiting in real time.
    "--virtual-time-budget=5000",
    f"--window-size={WIDTH},{HEIGHT}",
)


def find_browser() -> str:
    """The path of the first of `BROWSERS` on PATH.

    Raises:
        UsageError: none of them is there.
    """
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    raise UsageError(
        "--png needs Chrome or Chromium to draw the figures, and none is on PATH "
        f"(looked for {', '.join(BROWSERS)})",
        "install one (Debian and Ubuntu: apt-get install chromium), or leave out --png",
    )


def write_pngs(figures: dict[str, Any], png_dir: Path, browser: str) -> list[Path]:
    """Each of the plotly `figures` (name -> figure, in page order) as ``<name>.png`` in `png_dir`,
    rendered by `browser` (`find_browser`).

    Returns:
        The PNGs written, in the order of `figures`.
    """
    from plotly.offline import get_plotlyjs

    png_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="autotune-report-") as tmp:
        work = Path(tmp)
        (work / "plotly.min.js").write_text(get_plotlyjs(), encoding="utf-8")
        for name, figure in figures.items():
            page = work / f"{name}.html"
            page.write_text(_figure_page(name, figure), encoding="utf-8")
            path = png_dir / f"{name}.png"
            _screenshot(browser, page, path, work / "profile")
            written.append(path)
    return written


def _figure_page(name: str, figure: Any) -> str:
    """A page holding `figure` alone, drawn at the PNG's size, static (no mode bar, no hover)."""
    import plotly.graph_objects as go

    sized = figure.to_dict()
    sized["layout"] = {**sized.get("layout", {}), "width": WIDTH, "height": HEIGHT}
    div = go.Figure(sized).to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=f"fig-{name}",
        config={"staticPlot": True, "displayModeBar": False},
    )
    return render("figure.html", name=name, div=markup(div))


def _screenshot(browser: str, page: Path, path: Path, profile: Path) -> None:
    """`browser`'s screenshot of `page` written to `path`; the browser's processes are stopped
    (by its process group) if it takes longer than `TIMEOUT_S`."""
    path.unlink(missing_ok=True)
    command = [browser, *_FLAGS, f"--user-data-dir={profile}", f"--screenshot={path}", page.as_uri()]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AutotuneError(
            f"{browser} did not draw {path.name} within {TIMEOUT_S} s", "run again without --png"
        ) from None
    finally:
        # The browser's helpers (renderer, GPU and zygote processes) share its process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    drawn = path.is_file() and path.read_bytes()[:8] == PNG_SIGNATURE
    if proc.returncode != 0 or not drawn:
        # Chromium logs warnings before its error: the last line says what went wrong.
        lines = [line.strip() for line in (err or "").splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise AutotuneError(f"{browser} did not draw {path.name}: {why}", "run again without --png")
