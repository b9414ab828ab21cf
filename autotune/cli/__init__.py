"""The `autotune` command line: wiring only. Each command lives in its own module."""

from __future__ import annotations

import sys

import click
import typer

from autotune.cli import _search
from autotune.cli._render import err_console
from autotune.errors import AutotuneError

app = typer.Typer(
    name="autotune",
    help="Find the fastest way to train a Hugging Face model on this hardware, by measuring.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True),
) -> None:
    if version:
        from autotune import __version__

        typer.echo(__version__)
        raise typer.Exit()


app.command("search")(_search.search_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every error into one line and an exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = app(args=args, prog_name="autotune", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "autotune"
        err_console.print(f"error: {exc.format_message()} (see '{command} --help')", highlight=False)
        sys.exit(2)
    except AutotuneError as exc:
        if debug:
            raise
        err_console.print(f"error: {exc}", highlight=False)
        sys.exit(exc.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort):
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        err_console.print(
            f"error: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''} "
            "(rerun with --debug for the traceback)",
            highlight=False,
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
