"""The manual's generated pages, written from what the code declares: one command regenerates them.

- docs/reference/cli.md: every command of the typer app, its usage, help and options, as
  ``--help`` gives them (`cli_markdown`);
- docs/reference/knobs.md: the knob catalogue (`autotune.cli._knobs.knobs_markdown`, also
  ``autotune knobs --format markdown``);
- docs/reference/options.md: every run option, by group (`autotune.options.reference`).

``python -m autotune.cli.reference`` rewrites them in the checkout; ``--check`` only says which are
stale (exit 1); ``--out DIR`` writes them under DIR instead (the tests compare that with the
committed pages). It lives in ``cli/`` because the CLI page reads the typer app, and nothing outside
``cli/`` imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from autotune.options import REGENERATE, table_cell

ROOT = Path(__file__).resolve().parents[2]


def cli_markdown() -> str:
    """docs/reference/cli.md: each command's usage, help and options, grouped as ``--help`` groups
    them (``autotune search``'s by the run options' groups)."""
    import typer.core
    import typer.main
    from rich.markup import render

    from autotune.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)  # an app of several commands
    root = group.make_context("autotune", [], resilient_parsing=True)
    lines = [
        "# Command reference",
        "",
        f"<!-- Generated from the typer app in autotune/cli/ by `{REGENERATE}`: edit the commands "
        "and the option declarations there. -->",
        "",
        "Every command and option of `autotune`, as `autotune COMMAND --help` prints them. The run",
        "options of `autotune search` are also listed with their types and defaults in the",
        "[run option reference](options.md).",
        "",
        "```",
        "autotune [--version] COMMAND [OPTIONS] [ARGS]",
        "```",
    ]
    for name in group.list_commands(root):
        command = group.commands[name]
        if command.hidden:
            continue
        ctx = command.make_context(name, [], parent=root, resilient_parsing=True)
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        lines += ["", f"## autotune {name}", "", "```", usage, "```", ""]
        lines += [render(command.help or "").plain.replace("\n", " "), ""]
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or getattr(param, "hidden", False):
                continue
            panel = getattr(param, "rich_help_panel", None) or (
                "Arguments" if param.param_type_name == "argument" else "Options"
            )
            panels.setdefault(panel, []).append((record[0], _meaning(record[1])))
        for panel, rows in panels.items():
            lines += [f"### {panel}" if len(panels) > 1 else "", "", "| option | meaning |", "|---|---|"]
            lines += [f"| `{table_cell(flags)}` | {table_cell(meaning)} |" for flags, meaning in rows]
            lines.append("")
        while lines[-1] == "":
            lines.pop()
    return "\n".join(_squeeze(lines)) + "\n"


def _meaning(text: str) -> str:
    """An option's help record as text: its help is rich markup (escaped brackets), the
    ``[default: ...; env var: ...]`` click appends after two spaces is not."""
    from rich.markup import render

    help_part, sep, extra = text.rpartition("  [")
    if not sep or not extra.endswith("]"):
        return render(text).plain
    return f"{render(help_part).plain} [{extra}"


def _squeeze(lines: list[str]) -> list[str]:
    """No two blank lines in a row (a command with one panel has no panel heading)."""
    out: list[str] = []
    for line in lines:
        if line == "" and out and out[-1] == "":
            continue
        out.append(line)
    return out


def _knobs() -> str:
    from autotune.cli._knobs import knobs_markdown

    return knobs_markdown()


def _options() -> str:
    from autotune.options import reference

    return reference()


PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/cli.md": cli_markdown,
    "docs/reference/knobs.md": _knobs,
    "docs/reference/options.md": _options,
}
"""Each generated page, by its path in the checkout, and what writes it."""


def generate() -> dict[str, str]:
    """Every generated page's text, by its path in the checkout."""
    return {path: write() for path, write in PAGES.items()}


def stale(root: Path = ROOT) -> list[str]:
    """The generated pages under `root` that differ from what the code generates now (or are
    missing)."""
    found = []
    for path, text in generate().items():
        page = root / path
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            found.append(path)
    return found


def write(root: Path = ROOT) -> list[str]:
    """Write every generated page under `root`; their paths."""
    for path, text in generate().items():
        page = root / path
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text, encoding="utf-8")
    return list(PAGES)


def main(argv: list[str] | None = None) -> int:
    """``[--check] [--out DIR]``: write the pages (under DIR, default the checkout), or with
    ``--check`` only say which are stale."""
    args: list[str] = list(sys.argv[1:] if argv is None else argv)
    root = ROOT
    if "--out" in args:  # written under another folder (the tests' temporary one)
        root = Path(args[args.index("--out") + 1])
    if "--check" in args:
        found = stale(root)
        for path in found:
            print(f"{path} is stale: run `{REGENERATE}` and commit it")
        if not found:
            print(f"{len(PAGES)} generated pages are current")
        return 1 if found else 0
    for path in write(root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
