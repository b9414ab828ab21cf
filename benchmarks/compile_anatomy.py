"""Where a cold inductor compile goes on CPU: how many C++ compiler runs, and what each one pays.

    python -m benchmarks.compile_anatomy [--model tiny-gpt2 --model tiny-llama] [--repeats 3]

Per preset, two real trials on one fresh store: ``torch_compile: inductor`` at batch 8, then 16,
each a cold compile. Inductor's C++ compiler (``CXX``) is a logging wrapper around the real one, so
every run is counted and timed (the kernels, and torch's precompiled header). Then the first
kernel's command line is timed again ``--repeats`` times: as inductor ran it, without the
precompiled header, and on an empty file with and without it (what a run costs before any code).
Results: ``results/compile_anatomy.json`` and its section (`render`).
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

from benchmarks import report
from benchmarks.assemble import store
from benchmarks.report import fill, section, table

HERE = Path(__file__).resolve().parent

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
    from benchmarks.compile_cache import compiled_trial

    start = time.perf_counter()
    recorded = compiled_trial(model, folder, f"bs{batch}", batch)
    return {"batch": batch, "search_wall_s": time.perf_counter() - start, **recorded}


def timed(command: list[str], repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    stats = report.summary(times)
    return {f"{key}_s": stats[key] for key in ("median", "min", "max")}


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


def render(data: dict[str, Any]) -> str:
    trials, one_run, findings = [], [], []
    for model, rows in data["presets"].items():
        for row in rows["trials"]:
            c = row["compiler"]
            header = f"{c['header_runs']} ({c['header_s']:.1f} s)" if c["header_runs"] else "0"
            trials.append(
                [
                    model,
                    row["batch"],
                    f"{float(row['compile_s'] or 0):.1f} s",
                    row["compile_cache"],
                    c["kernel_runs"],
                    f"{c['kernel_s']:.1f} s",
                    f"{c['kernel_median_s']:.2f} s",
                    header,
                ]
            )
        one, later = rows["one_run"], rows["trials"][-1]
        one_run.append([model, *(f"{one[key]['median_s']:.2f} s" for key in TIMED)])
        compiler_s = later["compiler"]["kernel_s"]
        findings.append(
            fill(
                "compile_anatomy",
                "finding",
                model=model,
                runs=later["compiler"]["kernel_runs"],
                compiler_s=compiler_s,
                threads=data["compile_threads"],
                per_thread=compiler_s / data["compile_threads"],
                compile_s=float(later["compile_s"] or 0),
                one=one["kernel"]["median_s"],
                fixed=one["empty_with_header"]["median_s"] / one["kernel"]["median_s"],
                without=one["kernel_without_header"]["median_s"],
            )
        )
    headers = [
        "preset",
        "batch",
        "compile (dynamo's timer)",
        "cache",
        "compiler runs",
        "their time",
        "median run",
    ]
    one_headers = ["preset", "kernel", "kernel, no precompiled header", "empty file", "empty file, no header"]
    return section(
        "compile_anatomy",
        compiler=data["compiler"],
        compile_threads=data["compile_threads"],
        repeats=data["repeats"],
        trials=table([*headers, "header builds"], trials),
        one_run=table(one_headers, one_run),
        findings="\n".join(findings),
        **data["machine"],
    )


def main() -> None:
    from benchmarks.harness import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
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
    store("compile_anatomy", data)


if __name__ == "__main__":
    main()
