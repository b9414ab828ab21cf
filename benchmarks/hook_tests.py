"""The tests whose outcome hangs on a throughput comparison, run again and again: each takes its
comparison from its own step-time hook (`tests.helpers.FixedStepTime`, `SlowParams`) or a fixed
machine probe, not from the machine's speed, so a loaded machine must not change its verdict.

    python -m benchmarks.hook_tests                  # 20 runs, the odd ones beside a busy process
    python -m benchmarks.hook_tests --runs 4         # a smoke run

Each run is one pytest process with the suite's own configuration (its conftest, its markers, its
timeouts) that runs the two tests in the order the full suite runs them. On the odd runs, busy
processes take half the machine's cores beside it (another job on the machine): each is started
here, bounded (it ends by itself after `HOG_S`), and ended by its pid when the run ends. A hog on
every core is another matter: torch's OpenMP threads then wait on descheduled ones at every step,
and a step's own work outgrows the time a hook sets it. Results: ``results/hook_tests.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.assemble import store
from benchmarks.harness import machine
from benchmarks.report import section, table

ROOT = Path(__file__).resolve().parents[1]
TESTS = (
    "tests/integration/test_screening.py::test_a_slowed_configuration_is_not_promoted_to_a_full_window[screening]",
    "tests/integration/test_search.py::test_the_baseline_is_remeasured_with_the_finalists",
)
HOG_S = 600.0  # a hog ends by itself after this, were it not ended by its pid
RUN_TIMEOUT_S = 900.0
HOG = f"import time\nend = time.time() + {HOG_S}\nwhile time.time() < end: pass"


def one_run(loaded: bool) -> dict[str, Any]:
    """One pytest process of the two tests, beside busy processes on half the cores if `loaded`."""
    count = max(1, (os.cpu_count() or 1) // 2) if loaded else 0
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]
    began = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *TESTS],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=30)
    outcomes = {}
    for line in done.stdout.splitlines():
        for test in TESTS:
            if line.endswith(test) and line.split()[0] in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
                outcomes[test] = line.split()[0].lower()
    return {
        "loaded": loaded,
        "seconds": time.perf_counter() - began,
        "returncode": done.returncode,
        "outcomes": {t: outcomes.get(t, "missing") for t in TESTS},
        "tail": done.stdout[-2000:] if done.returncode else "",
    }


def render(data: dict[str, Any]) -> str:
    rows = []
    for test in data["tests"]:
        for loaded in (False, True):
            runs = [r for r in data["runs"] if r["loaded"] is loaded]
            passed = sum(r["outcomes"][test] == "passed" for r in runs)
            rows.append([f"`{test.split('::')[1]}`", "busy" if loaded else "idle", f"{passed}/{len(runs)}"])
    seconds = [r["seconds"] for r in data["runs"]]
    return section(
        "hook_tests",
        machine=data["machine"],
        runs=len(data["runs"]),
        rows=table(["test", "machine", "passed"], rows),
        slowest=f"{max(seconds):.0f}" if seconds else "-",
        fastest=f"{min(seconds):.0f}" if seconds else "-",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    runs = []
    for index in range(1, args.runs + 1):
        run = one_run(loaded=index % 2 == 1)
        runs.append(run)
        kind = "busy" if run["loaded"] else "idle"
        print(f"[{index}/{args.runs}] {kind} {run['seconds']:.0f} s: {run['outcomes']}", flush=True)
    store("hook_tests", {"machine": machine(), "tests": list(TESTS), "runs": runs})


if __name__ == "__main__":
    main()
