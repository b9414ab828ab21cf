"""Write ``benchmarks/RESULTS.md`` from the sections, in a fixed order: ``python -m benchmarks.assemble``.

Each entry of `ORDER` is a section. One a benchmark measured is rendered from its stored
``results/NAME.json`` by the module that measured it (``render``, or ``render_NAME`` where a module
writes several results; its ``claims``/``claims_NAME``, where it has them, are the bullets of the
summary at the top). One no benchmark produces is the hand-written ``sections/NAME.md``, which also
stands in for a benchmark whose JSON does not exist yet. An entry with neither is left out, so a
benchmark can be listed here before it has run. A benchmark stores its results through `store`,
which writes RESULTS.md again.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import report

HERE = Path(__file__).resolve().parent
SECTIONS = HERE / "sections"
OUT = HERE / "RESULTS.md"
# (results name, module that measured it); a None module: a hand-written section.
ORDER: tuple[tuple[str, str | None], ...] = (
    ("screening", "screening"),
    ("screening_heldout", "screening"),
    ("memory_estimate", "memory_estimate"),
    ("replay", "replay"),
    ("ladder_quality", "ladder_quality"),
    ("fresh_contenders", "fresh_contenders"),
    ("decisions", "decisions"),
    ("decisions_notes", None),
    ("process_noise", "process_noise"),
    ("layout_noise", "layout_noise"),
    ("aa_check", "aa_check"),
    ("ab_check", "ab_check"),
    ("answer", None),
    ("loss_parity_pretrained", None),
    ("compile_anatomy", "compile_anatomy"),
    ("compile_cache", "compile_cache"),
    ("ddp_knobs", "ddp_knobs"),
    ("finalists_cost", "finalists_cost"),
    ("finalists_cost_notes", None),
    ("gpu_first_run", None),
    ("gpu_second_run", None),
    ("lora", "lora"),
    ("padding", "padding"),
    ("reliability", None),
    ("pool_load", "pool_load"),
    ("large_store", "large_store"),
    ("hook_tests", "hook_tests"),
    ("screening_noise", None),
    ("gpu", "gpu"),
)


def _function(module: str | None, name: str, kind: str) -> Callable[[dict[str, Any]], Any] | None:
    """`kind` (render, claims) of the module that measured results `name`."""
    if module is None:
        return None
    try:
        found = importlib.import_module(f"benchmarks.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"benchmarks.{module}":
            raise
        return None  # listed before it exists
    return getattr(found, kind if name == module else f"{kind}_{name}", None)


def parts() -> list[tuple[str, str, list[str]]]:
    """(name, section text, claims) of every section there is, in `ORDER`."""
    out = []
    for name, module in ORDER:
        data = report.load(name) if module else None
        render = _function(module, name, "render") if data is not None else None
        if data is not None and render is not None:
            claims = _function(module, name, "claims")
            out.append((name, render(data), list(claims(data)) if claims else []))
        elif (SECTIONS / f"{name}.md").exists():
            out.append((name, (SECTIONS / f"{name}.md").read_text(), []))
    return out


def assemble() -> str:
    sections = parts()
    claims = [f"- {claim}" for _, _, found in sections for claim in found]
    head = report.fill("assemble", "head", claims="\n".join(claims))
    return "\n".join([head, *(text for _, text, _ in sections)]).rstrip() + "\n"


def store(name: str, data: dict[str, Any], indent: int = 2) -> None:
    """Write ``results/NAME.json`` and RESULTS.md with the section it renders."""
    report.RESULTS.mkdir(exist_ok=True)
    (report.RESULTS / f"{name}.json").write_text(json.dumps(data, indent=indent, default=str) + "\n")
    print(f"wrote {report.RESULTS / name}.json and {write()}")


def write() -> Path:
    OUT.write_text(assemble())
    return OUT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where RESULTS.md is not up to date")
    args = parser.parse_args()
    text = assemble()
    if args.check:
        raise SystemExit(
            0 if OUT.read_text() == text else "RESULTS.md is stale: python -m benchmarks.assemble"
        )
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
