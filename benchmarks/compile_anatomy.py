"""Where a cold inductor compile goes on CPU: how many C++ compiler runs, and what each one pays.

    python benchmarks/compile_anatomy.py [--model tiny-gpt2 --model tiny-llama] [--repeats 3]

Per preset, two real trials on one fresh store (so one study compile cache, next to the store):
``torch_compile: inductor`` at batch 8, then at batch 16, each a configuration the cache has not
seen (a cold compile, as every new compiled configuration of a search is). The C++ compiler that
inductor runs (``CXX``) is a logging wrapper around the real one, so every run is counted and
timed: the kernels' compiles, and the build of torch's precompiled header (once per machine and
set of flags, kept in inductor's global folder). Then the first kernel's own command line is timed
again, ``--repeats`` times each: as inductor ran it, without the precompiled header, and with the
kernel replaced by an empty file (with and without the header): what one compiler run costs
before any kernel code.

Results go to ``benchmarks/results/compile_anatomy.json`` and ``benchmarks/sections/compile_anatomy.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "compile_anatomy.json"
SECTION = HERE / "sections" / "compile_anatomy.md"
BATCHES = (8, 16)
TIMED = ("kernel", "kernel_without_header", "empty_with_header", "empty_without_header")
# The wrapper: the real compiler's exit status, and one JSON line per run in the log.
WRAPPER = """#!{python}
import json, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call([{compiler!r}, *sys.argv[1:]])
with open({log!r}, "a") as log:
    log.write(json.dumps({{"s": time.perf_counter() - start, "args": sys.argv[1:]}}) + "\\n")
sys.exit(code)
"""


def compiler_runs(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def is_kernel(run: dict[str, Any]) -> bool:
    """A compile of inductor's C++ code cache (`<hash>.main.cpp` into a shared object)."""
    return any(arg.endswith("main.cpp") for arg in run["args"])


def is_header(run: dict[str, Any]) -> bool:
    """The precompiled header's build, or the preprocessing that keys it."""
    return "c++-header" in run["args"] or "-E" in run["args"]


def kernel_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if is_kernel(r)]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Compiler runs by kind: kernels, the header's build, and the rest (version and ISA checks)."""
    kernels = [r["s"] for r in runs if is_kernel(r)]
    headers = [r["s"] for r in runs if is_header(r) and not is_kernel(r)]
    other = [r["s"] for r in runs if not is_kernel(r) and not is_header(r)]
    return {
        "kernel_runs": len(kernels),
        "kernel_s": sum(kernels),
        "kernel_median_s": statistics.median(kernels) if kernels else None,
        "header_runs": len(headers),
        "header_s": sum(headers),
        "other_runs": len(other),
        "other_s": sum(other),
    }


def trial(model: str, batch: int, folder: Path) -> dict[str, Any]:
    """A compiled trial at `batch` (`compile_cache.compiled_trial`), with its search's wall time."""
    from compile_cache import compiled_trial

    start = time.perf_counter()
    recorded = compiled_trial(model, folder, f"bs{batch}", batch)
    return {"batch": batch, "search_wall_s": time.perf_counter() - start, **recorded}


def timed(command: list[str], repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def without_header(args: list[str]) -> list[str]:
    """The command line less inductor's `-include <precompiled header>`."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "-include":
            skip = True
            continue
        out.append(arg)
    return out


def one_compiler_run(compiler: str, run: dict[str, Any], folder: Path, repeats: int) -> dict[str, Any]:
    """The first kernel's compile as inductor ran it, without the precompiled header, and with the
    kernel replaced by an empty file (with and without the header), `repeats` times each."""
    args = list(run["args"])
    source = next(a for a in args if a.endswith("main.cpp"))
    out = args.index("-o")
    args[out + 1] = str(folder / "timed.so")
    empty = folder / "empty.cpp"
    empty.write_text('extern "C" void nothing() {}\n')
    emptied = [str(empty) if a == source else a for a in args]
    return {
        "command": shlex.join([compiler, *run["args"]]),
        "kernel": timed([compiler, *args], repeats),
        "kernel_without_header": timed([compiler, *without_header(args)], repeats),
        "empty_with_header": timed([compiler, *emptied], repeats),
        "empty_without_header": timed([compiler, *without_header(emptied)], repeats),
    }


def section(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [
        "## Where a cold compile goes (inductor on CPU)\n",
        f"`python benchmarks/compile_anatomy.py`, {m['date']}, commit {m['commit']}: {m['cpu']}, "
        f"{m['cores']} threads, torch {m['torch']}, {data['compiler']}; inductor's compile threads: "
        f"{data['compile_threads']}. Per preset, two real trials on one fresh store (one study "
        "compile cache): `torch_compile=inductor` at batch 8, then at batch 16, each a configuration "
        "the cache had not seen. Inductor's C++ compiler ran through a logging wrapper: *compiler "
        "runs* are the kernels' compiles (one shared object each), *their time* their sum over the "
        "compile threads; *header builds* are torch's precompiled header, built once per machine "
        "and set of flags.\n",
        "| preset | batch | compile (dynamo's timer) | cache | compiler runs | their time | "
        "median run | header builds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, rows in data["presets"].items():
        for row in rows["trials"]:
            c = row["compiler"]
            header = f"{c['header_runs']} ({c['header_s']:.1f} s)" if c["header_runs"] else "0"
            lines.append(
                f"| {model} | {row['batch']} | {float(row['compile_s'] or 0):.1f} s | {row['compile_cache']} "
                f"| {c['kernel_runs']} | {c['kernel_s']:.1f} s | {c['kernel_median_s']:.2f} s | {header} |"
            )
    lines.append("")
    lines.append(
        f"One compiler run, timed again ({data['repeats']} times each, medians): the first kernel "
        "of each preset's first trial, as inductor ran it and without its precompiled header, "
        "and an empty file with the same flags:\n"
    )
    lines.append("| preset | kernel | kernel, no precompiled header | empty file | empty file, no header |")
    lines.append("|---|---|---|---|---|")
    for model, rows in data["presets"].items():
        cells = (rows["one_run"][k]["median_s"] for k in TIMED)
        lines.append(f"| {model} | " + " | ".join(f"{value:.2f} s" for value in cells) + " |")
    lines.append("")
    for model, rows in data["presets"].items():
        one, later = rows["one_run"], rows["trials"][-1]
        fixed = one["empty_with_header"]["median_s"] / one["kernel"]["median_s"]
        compile_s, compiler_s = float(later["compile_s"] or 0), later["compiler"]["kernel_s"]
        lines.append(
            f"- {model}: a new compiled configuration ran the compiler {later['compiler']['kernel_runs']} "
            f"times: {compiler_s:.0f} s of compiler time over {data['compile_threads']} threads, "
            f"about {compiler_s / data['compile_threads']:.0f} s of its {compile_s:.0f} s compile "
            "(the rest is dynamo, AOTAutograd and inductor's own Python). "
            f"One run costs {one['kernel']['median_s']:.2f} s, of which {fixed:.0%} is what an empty "
            "file with the same flags and torch's header costs: the header, not the kernel's code. "
            "The precompiled header does not shorten it here (without it: "
            f"{one['kernel_without_header']['median_s']:.2f} s)."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(HERE))
    from harness import machine, write_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--resummarize", action="store_true", help="rewrite the section from the results")
    args = parser.parse_args()
    if args.resummarize:
        SECTION.write_text(section(json.loads(RESULTS.read_text())))
        print(SECTION.read_text())
        return
    models = args.model or ["tiny-gpt2", "tiny-llama"]
    compiler = os.environ.get("CXX") or shutil.which("g++") or "g++"
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()
    presets: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-compile-anatomy-") as temp:
        # One wrapper and log for the whole run, set before the first search: the workers' fork
        # server starts once per process and keeps the environment it started with.
        wrapper, log = Path(temp) / "cxx", Path(temp) / "cxx.jsonl"
        wrapper.write_text(WRAPPER.format(python=sys.executable, compiler=compiler, log=str(log)))
        wrapper.chmod(0o755)
        os.environ["CXX"] = str(wrapper)
        for model in models:
            folder = Path(temp) / model
            folder.mkdir()
            rows, first_runs = [], []
            for batch in BATCHES:
                seen = len(compiler_runs(log))
                row = trial(model, batch, folder)
                runs = compiler_runs(log)[seen:]
                row["compiler"] = summary(runs)
                rows.append(row)
                first_runs = first_runs or kernel_runs(runs)
                print(json.dumps({"model": model, **row}), flush=True)
            if not first_runs:
                raise RuntimeError(f"{model}: inductor ran no C++ compile through {wrapper}")
            timed_run = one_compiler_run(compiler, first_runs[0], folder, args.repeats)
            presets[model] = {"trials": rows, "one_run": timed_run}
            print(json.dumps({"model": model, "one_run": timed_run}), flush=True)
    import torch._inductor.config as inductor_config

    data = {
        "machine": machine(),
        "compiler": version[0] if version else compiler,
        "compile_threads": inductor_config.compile_threads,
        "repeats": args.repeats,
        "presets": presets,
    }
    write_section(data, RESULTS, SECTION, section)


if __name__ == "__main__":
    main()
