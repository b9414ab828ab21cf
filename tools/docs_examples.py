"""Re-take the manual's example outputs: run each example and replace its block in the pages.

An example's output block in README.md or docs/**/*.md sits between two HTML comments, and is
never edited by hand:

    <!-- example: NAME -->
    ```text
    $ the command as a user types it
    what it printed (trimmed the same way every time)
    ```
    <!-- /example -->

`EXAMPLES` says what each NAME runs. ``make docs-examples`` (``python tools/docs_examples.py``)
runs them all in a fresh temporary folder, in order (the export examples read the store the
search example wrote), and rewrites every block; ``--only NAME`` re-takes some. A command that
fails stops the script before any page is written. The figures in the outputs are this machine's
at the time: the benchmarks (benchmarks/RESULTS.md) are where figures are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 1800  # one command; a search of the examples takes minutes on 2 cores

Trim = Callable[[str], str]


def _whole(output: str) -> str:
    return output


@dataclass(frozen=True)
class Command:
    """One command of an example.

    Attributes:
        shown: the command as the page shows it after ``$ `` ("" : run, not shown).
        script: what runs, by bash, in the examples' temporary folder; ``{repo}`` is the checkout.
        trim: what of its output (stdout and stderr together) the page shows.
        exit_code: the exit status it must end with (an example of an error ends with one).
    """

    shown: str
    script: str
    trim: Trim = _whole
    exit_code: int = 0


@dataclass(frozen=True)
class Example:
    """A block of the manual: its commands, run in order, each shown with its trimmed output."""

    name: str
    commands: tuple[Command, ...]
    lang: str = "text"
    prompt: bool = field(default=True)  # "$ command" lines before each output


# --- trimming: the same lines every time ----------------------------------------------------------


def keep(prefixes: Iterable[str], *, elide: str = "...") -> Trim:
    """Keep the lines that start with one of `prefixes`; one `elide` line where lines were left out
    between kept ones."""
    starts = tuple(prefixes)

    def trim(output: str) -> str:
        kept: list[str] = []
        dropped = False
        for line in output.splitlines():
            if line.startswith(starts):
                if dropped and kept and elide:
                    kept.append(elide)
                kept.append(line)
                dropped = False
            else:
                dropped = True
        return "\n".join(kept)

    return trim


def from_line(prefix: str) -> Trim:
    """From the first line that starts with `prefix` to the end."""

    def trim(output: str) -> str:
        lines = output.splitlines()
        first = next((i for i, line in enumerate(lines) if line.startswith(prefix)), 0)
        return "\n".join(lines[first:])

    return trim


def until_line(prefix: str, *, then: str = "") -> Trim:
    """Up to the first line that starts with `prefix` (that line included), then `then`."""

    def trim(output: str) -> str:
        lines = output.splitlines()
        last = next((i for i, line in enumerate(lines) if line.startswith(prefix)), len(lines) - 1)
        return "\n".join([*lines[: last + 1], *([then] if then else [])])

    return trim


def json_key(key: str, *, comment: str, fields: tuple[str, ...] = ()) -> Trim:
    """The value of `key` in the JSON the command printed, on one line after a comment line; with
    `fields`, only those of it, then ``...``."""

    def trim(output: str) -> str:
        lines = output.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("{"))  # after any notes
        value = json.loads("\n".join(lines[first:]))[key]
        if not fields:
            return f"{comment}\n{json.dumps(value)}"
        shown = json.dumps({field: value[field] for field in fields if field in value})
        return f"{comment}\n{shown[:-1]}, ...}}"

    return trim


def nothing(output: str) -> str:
    """Run for its effect (a file the next command reads): nothing shown."""
    return ""


def elide_rows(head: int, tail: int) -> Trim:
    """A rich table's body rows (lines starting with a vertical bar): the first `head` and the last
    `tail`, one elided row between them."""

    def trim(output: str) -> str:
        lines = output.splitlines()
        rows = [i for i, line in enumerate(lines) if line.startswith("│")]
        if len(rows) <= head + tail + 1:
            return output
        cut = set(rows[head : len(rows) - tail])
        kept = [line for i, line in enumerate(lines) if i not in cut]
        kept.insert(rows[head], "│ ... │")
        return "\n".join(kept)

    return trim


def _summary(output: str, *, header: tuple[str, ...] = (), trials: int | None = None) -> list[str]:
    """A search's story in a few lines: the `header` lines named, the baseline, the measured trials
    (the first `trials` of them), then the answer and what it changes in the training math."""
    lines = output.splitlines()
    head = [line for line in lines if header and line.startswith(header)]
    baseline = [line for line in lines if line.startswith("baseline:")][:1]
    measured = [line for line in lines if line.startswith("trial ") and "its result is reused" not in line]
    start = next((i for i, line in enumerate(lines) if line.startswith("answer:")), len(lines))
    answer = [line for line in lines[start:] if line.startswith(("answer:", "use:", "expected:"))]
    changes: list[str] = []
    for line in lines[start:]:
        starts = line.startswith("changes the training math")
        if starts or (changes and line.startswith("  ") and len(changes) < 4):
            changes.append(line)
        elif changes:
            break
    return [*head, *baseline, *measured[:trials], "...", *answer, *changes]


def search_short(output: str) -> str:
    """A search in at most 25 lines with its command (README): the baseline, the measured trials
    (at most 12), then the answer and what it changes in the training math."""
    return "\n".join(_summary(output, trials=12))


def search_summary(output: str) -> str:
    """A search with its model and data lines, every measured trial and the answer."""
    return "\n".join(_summary(output, header=("model ", "  dataset")))


# --- the examples ----------------------------------------------------------------------------------

MAKE_RUN = "autotune search --model tiny-gpt2 --space quick --trials 8"  # the Makefile's RUN_ARGS
SEARCH = Command(MAKE_RUN, MAKE_RUN)
LORA = "autotune search --model tiny-llama --peft lora --space quick --trials 6 --storage sqlite:///lora.db"
STUDY = "tiny-gpt2-quick-seq128"
OWN_DATA = (
    "autotune search --model ./my-model --dataset corpus.txt --seq-len 32 --trials 3 --measure-steps 10 "
    "--finalists 0"
)
# Space files the examples write (printf's format: \\n is a newline).
BATCH_CKPT = (
    "knobs:\\n  per_device_train_batch_size: [4, 8, 16, 32]\\n  activation_checkpointing: [false, true]\\n"
)
MODEL_AND_TEXT = (
    "from pathlib import Path; from tests.local_models import write_model, write_text; "
    'write_model(Path("my-model")); write_text(Path("corpus.txt"), 200)'
)
MEMORY = (
    "autotune search --model tiny-gpt2 --space batch-ckpt.yaml --seq-len 128 --trials 6 --seed 1 "
    "--no-baseline --finalists 0 --storage sqlite:///memory.db"
)
CAPPED = "autotune search --space cpu --trials 8 --memory-cap 700MiB --storage sqlite:///capped.db"
COMPILE = 'knobs:\\n  per_device_train_batch_size: [8, 16]\\n  torch_compile: ["off", inductor]\\n'
SHORT_RUN = (
    "autotune search --space compile.yaml --trials 4 --study short-run --train-tokens 2000000 "
    "--price-per-hour 2.50 --storage sqlite:///runs.db"
)
LONG_RUN = SHORT_RUN.replace("short-run --train-tokens 2000000", "long-run --train-tokens 2000000000")
RUN_LINES = ("trial ", "after ", "answer:", "use:", "expected:", "predicted run", "search time")
RAY = (
    "autotune search --model tiny-gpt2 --seq-len 16 --space batch.yaml --trials 2 --storage sqlite:///ray.db "
    "--study ray-demo --backend ray --measure-steps 5 --finalist-rounds 1"
)

EXAMPLES: tuple[Example, ...] = (
    Example("search", (SEARCH,)),
    Example("search-short", (Command(MAKE_RUN, MAKE_RUN, search_short),)),
    Example(
        "lora",
        (
            Command(
                LORA,
                LORA,
                keep(("baseline:", "trial ", "answer:", "use:", "expected:", "parameters:", "whole run:")),
            ),
            Command(
                "autotune export --study tiny-llama-quick-seq128 --storage sqlite:///lora.db --format json",
                "autotune export --study tiny-llama-quick-seq128 --storage sqlite:///lora.db --format json",
                json_key(
                    "peft",
                    comment='# its "peft" in part, as LoraConfig(**exported["peft"]) takes it:',
                    fields=("peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules"),
                ),
            ),
        ),
    ),
    Example(
        "export-yaml",
        (
            Command(
                f"autotune export --study {STUDY} --format yaml",
                f"autotune export --study {STUDY} --format yaml",
                until_line("expected:", then="  ...   # its figures, the verdict's rule, the whole run"),
            ),
        ),
    ),
    Example(
        "export-flags",
        (
            Command(
                f"autotune export --study {STUDY} --format flags -o flags.txt 2>expected.txt",
                f"autotune export --study {STUDY} --format flags -o flags.txt 2>expected.txt",
            ),
            Command("cat flags.txt", "cat flags.txt"),
        ),
    ),
    Example(
        "use-export",
        (
            Command("", f"autotune export --study {STUDY} --format json -o best.json", nothing),
            Command("python use_export.py best.json", "python {repo}/examples/use_export.py best.json"),
        ),
    ),
    Example("use-export-code", (Command("", "cat {repo}/examples/use_export.py"),), lang="python"),
    Example("tune", (Command("", "python {repo}/examples/tune_my_trainer.py", from_line("answer:")),)),
    Example(
        "own-data",
        (
            Command(
                "",
                f"PYTHONPATH={{repo}} python -c '{MODEL_AND_TEXT}'",
            ),
            Command(
                OWN_DATA,
                f"{OWN_DATA} --storage sqlite:///own.db",
                search_summary,
            ),
        ),
    ),
    Example(
        "memory-estimate",
        (
            Command("", f"printf '{BATCH_CKPT}' > batch-ckpt.yaml"),
            Command(MEMORY, MEMORY, keep(("trial ", "memory estimate vs"))),
        ),
    ),
    Example("capped", (Command(CAPPED, CAPPED),)),
    Example(
        "train-tokens",
        (
            Command("", f"printf '{COMPILE}' > compile.yaml"),
            *(Command(run, run, keep(RUN_LINES)) for run in (SHORT_RUN, LONG_RUN)),
        ),
    ),
    Example(
        "ray",
        (
            Command("", "printf 'knobs:\\n  per_device_train_batch_size: [1, 2]\\n' > batch.yaml"),
            Command(RAY, RAY, keep(("baseline:", "running trials on", "trial ", "re-measuring", "answer:"))),
        ),
    ),
    Example(
        "estimate",
        (
            Command(
                "autotune estimate --space quick --seq-len 512 --memory-cap 600MiB",
                "autotune estimate --space quick --seq-len 512 --memory-cap 600MiB",
                elide_rows(4, 7),
            ),
        ),
    ),
    Example(
        "password",
        (
            Command(
                "autotune studies --storage postgresql://me:SECRET@127.0.0.1:1/autotune",
                "autotune studies --storage postgresql://me:SECRET@127.0.0.1:1/autotune",
                exit_code=1,
            ),
        ),
    ),
)
BY_NAME = {example.name: example for example in EXAMPLES}


# --- running and replacing -------------------------------------------------------------------------


def run_command(script: str, folder: Path, *, repo: Path = ROOT, exit_code: int = 0) -> str:
    """Run one command's `script` in `folder`; its output (stdout and stderr together), with
    `folder` spelled as ``.``.

    Raises:
        RuntimeError: the command ended with another status than `exit_code`.
        subprocess.TimeoutExpired: it ran past `TIMEOUT_S`.
    """
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "150"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        # In braces: the script's own redirections (2>FILE) come before the one that merges the rest.
        ["bash", "-c", f"{{ {script.replace('{repo}', str(repo))} ; }} 2>&1"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != exit_code:
        raise RuntimeError(f"{script!r} exited {done.returncode}: {done.stdout[-2000:]}")
    return done.stdout.replace(str(folder.resolve()), ".").replace(str(folder), ".")


def render(example: Example, outputs: Mapping[str, str]) -> str:
    """An example's block: each command (``$ `` and as shown) and its output, fenced."""
    lines: list[str] = []
    for command in example.commands:
        if command.shown and example.prompt:
            lines.append(f"$ {command.shown}")
        if outputs[command.script]:
            lines.append(outputs[command.script])
    body = "\n".join(lines)
    return f"```{example.lang}\n{body}\n```\n"


def run_examples(examples: Iterable[Example], folder: Path, *, repo: Path = ROOT) -> dict[str, str]:
    """Run the examples' commands in order in `folder` (a command two examples share runs once);
    each example's block, by name."""
    outputs: dict[str, str] = {}
    blocks: dict[str, str] = {}
    for example in examples:
        for command in example.commands:
            if command.script not in outputs:
                print(f"running {command.script}", file=sys.stderr, flush=True)
                outputs[command.script] = run_command(
                    command.script, folder, repo=repo, exit_code=command.exit_code
                )
        trimmed = {
            c.script: "\n".join(line.rstrip() for line in c.trim(outputs[c.script]).splitlines()).strip("\n")
            for c in example.commands
        }
        blocks[example.name] = render(example, trimmed)
    return blocks


_BLOCK = re.compile(r"<!-- example: ([\w-]+) -->\n(.*?)<!-- /example -->", re.DOTALL)
_OPEN = re.compile(r"<!-- example: ([\w-]+) -->")


def names_in(markdown: str) -> list[str]:
    """The examples a page holds blocks of, in order.

    Raises:
        ValueError: a block opened and never closed.
    """
    closed = [m.group(1) for m in _BLOCK.finditer(markdown)]
    opened = _OPEN.findall(markdown)
    if opened != closed:
        unclosed = next(name for name in opened if opened.count(name) != closed.count(name))
        raise ValueError(f"the example block {unclosed!r} is not closed by <!-- /example -->")
    return closed


def replace_blocks(markdown: str, blocks: Mapping[str, str]) -> str:
    """`markdown` with the block of each example in `blocks` replaced by its new text; the blocks
    of other examples left as they are.

    Raises:
        ValueError: a block opened and never closed.
    """
    names_in(markdown)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in blocks:
            return match.group(0)
        return f"<!-- example: {name} -->\n{blocks[name]}<!-- /example -->"

    return _BLOCK.sub(replace, markdown)


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold example blocks: README.md and the manual."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), help="re-take this example")
    parser.add_argument("--list", action="store_true", help="list the examples and the pages holding them")
    args = parser.parse_args(argv)
    if args.list:
        for page in pages():
            for name in names_in(page.read_text(encoding="utf-8")):
                print(f"{name}: {page.relative_to(ROOT)}")
        return 0
    chosen = [example for example in EXAMPLES if not args.only or example.name in args.only]
    # The export examples read the search example's store: a subset still runs what it reads.
    needed = {"export-yaml", "export-flags", "use-export"} & {e.name for e in chosen}
    if needed and "search" not in {e.name for e in chosen}:
        chosen.insert(0, BY_NAME["search"])
    with tempfile.TemporaryDirectory(prefix="docs-examples-") as scratch:
        blocks = run_examples(chosen, Path(scratch))
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = replace_blocks(text, blocks)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
