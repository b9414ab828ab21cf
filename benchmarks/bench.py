"""``make bench``: run the CPU benchmarks (items 1-5) and rewrite ``benchmarks/RESULTS.md``.

    python -m benchmarks.bench            # everything, about 45 minutes on 2 CPU cores
    python -m benchmarks.bench --only replay,noise
    python -m benchmarks.bench --only isolation   # item 5 (`make bench-isolation`)

The grid tables in ``benchmarks/data/`` are measured by ``make bench-grid`` (`grid.py`); this
script only reads them. Raw results go to ``benchmarks/results/<item>.json``; RESULTS.md is
written from all of them, so one item can be refreshed without re-running the others.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import isolation, noise, quality, replay
from benchmarks.grid import SPACE, grid_path
from benchmarks.harness import Bench, machine
from benchmarks.report import fill, load, measured_on, store, table

HERE = Path(__file__).resolve().parent

RESULTS = HERE / "results"
GRID_MODELS = ("tiny-gpt2", "tiny-llama")
PRESETS = ("tiny-gpt2", "tiny-llama", "tiny-bert")
ITEMS = ("replay", "quality", "cost", "noise", "isolation")
# Item 5: presets and their sequence lengths (None: the preset's own).
ISOLATION_PRESETS: dict[str, int | None] = {"tiny-gpt2": 256, "tiny-llama": None}


def process_start(runs: int = 3) -> dict[str, float]:
    """Seconds from launching a process to the CLI answering, and to the trial machinery loaded."""
    python = sys.executable
    autotune = str(Path(python).with_name("autotune"))
    timings: dict[str, list[float]] = {"cli_help_s": [], "import_trainer_s": []}
    for _ in range(runs):
        for name, command in (
            ("cli_help_s", [autotune, "--help"]),
            ("import_trainer_s", [python, "-c", "import autotune.trial.trainer"]),
        ):
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            timings[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in timings.items()}


def heap_freeze_saving(model: str, measurements: int = 5) -> dict[str, float]:
    """Per-measurement set-up time with the heap frozen (as searches run) and without."""
    out = {}
    for frozen in (False, True):
        with Bench(model, SPACE, freeze_heap=frozen) as bench:
            params = bench.baseline()
            bench.measure(params, verbatim=True)  # first one builds caches either way
            setups = [bench.measure(params, verbatim=True).setup_s for _ in range(measurements)]
        out["frozen_setup_s" if frozen else "unfrozen_setup_s"] = statistics.median(setups)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(ITEMS), help=f"comma-separated subset of {ITEMS}")
    parser.add_argument("--seeds", type=int, default=30, help="replay seeds per strategy")
    parser.add_argument("--trials", type=int, default=10, help="trial budget of the real searches")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved comparison rounds")
    parser.add_argument("--repeats", type=int, default=10, help="noise: repeats per configuration")
    parser.add_argument("--searches", type=int, default=10, help="noise: repeated searches")
    parser.add_argument(
        "--finalist-rounds", type=int, default=3, help="noise: re-measurement rounds of the repeated searches"
    )
    parser.add_argument("--iso-rounds", type=int, default=3, help="isolation: interleaved rounds per mode")
    parser.add_argument("--make-runs", type=int, default=3, help="isolation: `make run`s per mode")
    args = parser.parse_args()
    only = [item.strip() for item in args.only.split(",") if item.strip()]
    unknown = [item for item in only if item not in ITEMS]
    if unknown:
        parser.error(f"unknown item(s) {unknown}: choose from {', '.join(ITEMS)}")
    RESULTS.mkdir(exist_ok=True)
    missing = [m for m in GRID_MODELS if not grid_path(m).exists()]
    if missing and ("replay" in only or "noise" in only):
        sys.exit(f"no grid table for {', '.join(missing)}: run `make bench-grid` first")

    def save(item: str, data: dict[str, Any]) -> None:
        data = {"machine": machine(), "args": vars(args), **data}
        store(item, data, indent=1)

    if "replay" in only:
        started = time.perf_counter()
        print("[bench] item 1: replaying search strategies on the measured grids", flush=True)
        save("replay", {**replay.run(GRID_MODELS, seeds=args.seeds), "wall_s": time.perf_counter() - started})
    if "quality" in only or "cost" in only:
        runs = {}
        for model in PRESETS:
            print(f"[bench] items 2-3: searching {model} ({args.trials} trials) and comparing", flush=True)
            runs[model] = quality.run(model, args.trials, args.rounds)
        save("quality", {"presets": runs})
        print("[bench] item 3: process start and per-trial set-up", flush=True)
        save("cost", {"process_start": process_start(), "heap_freeze": heap_freeze_saving("tiny-gpt2")})
    if "noise" in only:
        print(f"[bench] item 4: {args.repeats} interleaved repeats, {args.searches} searches", flush=True)
        table = replay.load_table("tiny-gpt2")
        best = table.best(None)
        with Bench("tiny-gpt2", SPACE) as bench:
            defaults = bench.baseline()
        configs = {
            "defaults": defaults,
            "grid_best": table.configs[best].params,
            "bs32_bf16_eager": {
                **defaults,
                "per_device_train_batch_size": 32,
                "precision": "bf16",
                "attn_implementation": "eager",
            },
        }
        save(
            "noise",
            {
                "repeats": noise.repeats("tiny-gpt2", configs, args.repeats),
                "searches": noise.repeated_searches("tiny-gpt2", args.searches, args.finalist_rounds),
            },
        )
    if "isolation" in only:
        print("[bench] item 5: in-process vs isolated trials", flush=True)
        isolation.run(
            ISOLATION_PRESETS, args.iso_rounds, args.make_runs, save=lambda data: save("isolation", data)
        )


if __name__ == "__main__":
    main()


def render_cost(data: dict[str, Any]) -> str:
    """Item 3: the phases of item 2's searches (``results/quality.json``), process start, heap freeze."""
    found = load("quality")
    breakdown = ""
    if found is not None:
        headers = ["preset", "total", "baseline", "window", "warm-up", "compile", "set-up", "skipped trials"]
        headers += ["between trials", "finalists", "window share"]
        phases = ("baseline_s", "trials_window_s", "trials_warmup_s", "trials_compile_s", "trials_setup_s")
        rows = [
            [
                model,
                f"{c['total_s']:.0f} s",
                *(f"{c[p]:.1f} s" for p in phases),
                f"{c['skipped_trials_s']:.1f} s ({c['skipped_trials']})",
                f"{c['between_trials_s']:.1f} s",
                f"{c['finalists_s']:.1f} s",
                f"{100 * c['trials_window_s'] / c['total_s']:.0f}%",
            ]
            for model, c in ((model, run["cost"]) for model, run in found["presets"].items())
        ]
        breakdown = fill("bench", "breakdown", table=table(headers, rows))
    return (
        fill(
            "bench",
            "cost",
            measured_on=measured_on(data),
            superseded=quality.superseded(found),
            breakdown=breakdown,
            **data["process_start"],
            **data["heap_freeze"],
        )
        + "\n"
    )
