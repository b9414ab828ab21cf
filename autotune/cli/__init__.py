"""The `autotune` command line: wiring only. Each command lives in its own module."""

from __future__ import annotations

import sys

import typer

from autotune.cli import _estimate, _export, _inspect, _knobs, _report, _search, _worker
from autotune.cli._render import print_error
from autotune.errors import AutotuneError

app = typer.Typer(
    name="autotune",
    help="Find the fastest way to train a Hugging Face model on this hardware, by measuring.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from autotune import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    """Find the fastest way to train a Hugging Face model on this hardware, by measuring."""


app.command("search")(_search.search_command)
app.command("knobs")(_knobs.knobs_command)
app.command("estimate")(_estimate.estimate_command)
app.command("studies")(_inspect.studies_command)
app.command("show")(_inspect.show_command)
app.command("resume")(_inspect.resume_command)
app.command("worker")(_worker.worker_command)
app.command("export")(_export.export_command)
app.command("report")(_report.report_command)


def _is_usage_error(exc: BaseException) -> bool:
    # typer vendors its own click, whose exceptions are not the `click` package's: recognise a
    # usage error by what both define (a message formatter and exit code 2).
    return hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every error into one line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = app(args=args, prog_name="autotune", standalone_mode=False)
    except AutotuneError as exc:
        if debug:
            raise
        print_error(f"error: {exc}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        if _is_usage_error(exc):
            ctx = getattr(exc, "ctx", None)
            command = ctx.command_path if ctx is not None else "autotune"
            print_error(f"error: {exc.format_message()} (see '{command} --help')")  # type: ignore[attr-defined]
            sys.exit(2)
        if debug:
            raise
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print_error(f"error: {type(exc).__name__}: {text} (rerun with --debug for the traceback)")
        sys.exit(1)
    if code == 130:
        print_error("interrupted")
    sys.exit(code if isinstance(code, int) else 0)
