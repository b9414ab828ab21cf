"""`autotune report`: one self-contained HTML page (and optional PNGs) about a stored study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._options import StorageOpt, StoredStudyOpt, StudyArg, study_named


def report_command(
    study_argument: StudyArg = None,
    study: StoredStudyOpt = None,
    storage: StorageOpt = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="HTML file to write (opens with no server or network).")
    ] = Path("report.html"),
    png: Annotated[
        bool,
        typer.Option(
            "--png",
            help="Also write each figure as a PNG into <stem>_png/ next to the HTML "
            "(needs Chrome or Chromium on PATH).",
        ),
    ] = False,
) -> None:
    """Write an HTML report of a study: history, throughput vs memory, importances, trial table."""
    study = study_named("report", study, study_argument)
    from autotune.answer.decide import study_answer
    from autotune.errors import UsageError
    from autotune.options import RunConfig
    from autotune.report import write_report
    from autotune.store.session import StudyStore
    from autotune.view import console

    try:
        import jinja2  # noqa: F401
        import plotly  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"autotune report needs {exc.name or 'plotly and jinja2'}", "pip install 'hf-autotune[report]'"
        ) from None
    loaded = StudyStore.open(RunConfig(storage=storage).storage_url, study)
    png_dir = output.with_name(f"{output.stem}_png") if png else None
    for path in write_report(loaded, output, png_dir, study_answer(loaded)):
        console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)
