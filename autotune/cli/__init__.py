"""The `autotune` command line: wiring only. Each command lives in its own module."""

from __future__ import annotations

import contextlib
import gc
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import typer
from typer.core import TyperCommand

from autotune.cli import _estimate, _export, _inspect, _knobs, _report, _search, _worker
from autotune.cli._render import print_error
from autotune.errors import AutotuneError, first_line
from autotune.options import command_line_text

app = typer.Typer(
    name="autotune",
    help="Find the fastest way to train a Hugging Face model on this hardware, by measuring.",
    no_args_is_help=True,
    add_completion=True,
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


class _Command(TyperCommand):
    """A command whose usage line leaves out its hidden parameters: a deprecated argument (the
    study named without ``--study``) still works, and is not offered."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # click's Context
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if not getattr(param, "hidden", False):
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


app.command("search")(_search.search_command)
app.command("knobs")(_knobs.knobs_command)
app.command("estimate")(_estimate.estimate_command)
app.command("studies")(_inspect.studies_command)
app.command("show", cls=_Command)(_inspect.show_command)
app.command("resume", cls=_Command)(_inspect.resume_command)
app.command("worker", cls=_Command)(_worker.worker_command)
app.command("export", cls=_Command)(_export.export_command)
app.command("report", cls=_Command)(_report.report_command)


def _is_usage_error(exc: BaseException) -> bool:
    # typer vendors its own click, whose exceptions are not the `click` package's: recognise a
    # usage error by what both define (a message formatter and exit code 2).
    return hasattr(exc, "format_message") and getattr(exc, "exit_code", None) == 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, `kill`, systemd and container runtimes send), raised in the main
    thread like Ctrl-C's KeyboardInterrupt, so that everything that cleans up after Ctrl-C
    (workers and rank sessions ended, the running trial recorded ``interrupted``, temporary
    folders removed) also runs after SIGTERM."""


_received: list[int] = []  # the signal that interrupted the command (typer turns it into 130)


def _interrupt(number: int, frame: FrameType | None) -> None:
    # The first signal interrupts; more during the (bounded) clean-up must not cut it short.
    _received.append(number)
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)
    retry = sys.modules.get("autotune.store.retry")  # loaded once a store is: nothing to bound before
    if retry is not None:
        retry.end_retries_within()  # the clean-up's store calls: bounded from the signal on
    raise Terminated() if number == signal.SIGTERM else KeyboardInterrupt()


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise (see `Terminated`) while a command runs; the handlers it found
    are put back after (`main` may run in a caller's process, such as a test's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    if saved[signal.SIGINT] is signal.default_int_handler:  # not ignored by whoever started us
        signal.signal(signal.SIGINT, _interrupt)
    if saved[signal.SIGTERM] is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every error into one line and an exit code.

    SIGINT (Ctrl-C) and SIGTERM end a command the same way, its clean-up included; the exit code
    is 130 after SIGINT and 143 after SIGTERM (128 + the signal, as a shell reports them)."""
    _received.clear()
    with _signals_interrupt():
        code = _run(list(sys.argv[1:] if argv is None else argv))
    if code == 130 and _received[:1] == [signal.SIGTERM]:
        code = 143
    if code in (130, 143):
        print_error("terminated" if code == 143 else "interrupted")
    if argv is None:  # this process's own command line (not a caller's, such as a test's): it ends
        # The interpreter's last garbage collection walks every object the run left (torch's and
        # transformers' included): seconds on a loaded machine, after the command's last line.
        # Nothing there needs collecting, so none is walked.
        gc.freeze()
    sys.exit(code)


def _run(args: list[str]) -> int:
    """Run the app; the exit code. Errors are one line (exit 1, 2, or the error's own code); a
    library error names run options by their fields (``train_steps``), printed as their flags."""
    debug = "--debug" in args
    try:
        code = app(args=args, prog_name="autotune", standalone_mode=False)
    except AutotuneError as exc:
        if debug:
            raise
        print_error(f"error: {command_line_text(exc)}")  # the options it names, as flags
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return 143 if isinstance(exc, Terminated) else 130
    except Exception as exc:
        if _is_usage_error(exc):
            ctx = getattr(exc, "ctx", None)
            command = ctx.command_path if ctx is not None else "autotune"
            print_error(f"error: {exc.format_message()} (see '{command} --help')")  # type: ignore[attr-defined]
            return 2
        if debug:
            raise
        text = first_line(exc, empty="")
        print_error(f"error: {type(exc).__name__}: {text} (rerun with --debug for the traceback)")
        return 1
    return code if isinstance(code, int) else 0
