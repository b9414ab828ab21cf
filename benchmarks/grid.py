"""Measure every configuration of the benchmark space for a workload, with the search's own
measurement code, repeated in shuffled order to capture noise (``make bench-grid``).

Rows are appended to ``benchmarks/data/grid-<model>.csv`` as they are measured, so an interrupted
run continues where it stopped. `replay.py` replays search strategies against these tables.

    python -m benchmarks.grid --model tiny-gpt2 --repeats 2
"""

from __future__ import annotations

import argparse
import csv
import random
import time
from pathlib import Path

from benchmarks.harness import Bench

HERE = Path(__file__).resolve().parent

SPACE = str(HERE / "space.yaml")
DATA = HERE / "data"
KNOBS = (
    "per_device_train_batch_size",
    "precision",
    "optim",
    "torch_compile",
    "attn_implementation",
    "activation_checkpointing",
)
COLUMNS = (
    "model",
    "repeat",
    "config",
    *KNOBS,
    "tokens_per_s",
    "peak_memory_bytes",
    "rss_start_bytes",
    "estimate_bytes",
    "estimate_baseline_bytes",
    "wall_s",
    "warmup_s",
    "window_s",
    "rel_ci_halfwidth",
    "reason",
)


def config_key(params: dict[str, object]) -> str:
    """A stable name for a configuration: its knob values joined."""
    return "|".join(str(params[k]) for k in KNOBS)


def grid_path(model: str) -> Path:
    return DATA / f"grid-{model}.csv"


def measured_rows(path: Path) -> set[tuple[int, str]]:
    if not path.exists():
        return set()
    with path.open(newline="") as handle:
        return {(int(row["repeat"]), row["config"]) for row in csv.DictReader(handle)}


def run(model: str, repeats: int, fresh: bool) -> Path:
    path = grid_path(model)
    DATA.mkdir(parents=True, exist_ok=True)
    if fresh and path.exists():
        path.unlink()
    done = measured_rows(path)
    with Bench(model, SPACE) as bench:
        _measure_grid(bench, path, done, repeats)
    return path


def _measure_grid(bench: Bench, path: Path, done: set[tuple[int, str]], repeats: int) -> None:
    model = bench.plan.config.model
    grid = bench.grid()
    new_file = not path.exists()
    started = time.perf_counter()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new_file:
            writer.writeheader()
        for repeat in range(repeats):
            order = list(grid)
            random.Random(repeat).shuffle(order)  # a different order each pass: noise, not drift
            for index, params in enumerate(order):
                key = config_key(params)
                if (repeat, key) in done:
                    continue
                estimate = bench.estimate_bytes(params)
                measured = bench.measure(params)
                writer.writerow(
                    {
                        "model": model,
                        "repeat": repeat,
                        "config": key,
                        **{k: params[k] for k in KNOBS},
                        "tokens_per_s": measured.tokens_per_s,
                        "peak_memory_bytes": measured.peak_memory_bytes,
                        "rss_start_bytes": measured.rss_start_bytes,
                        "estimate_bytes": estimate,
                        "estimate_baseline_bytes": bench.trainer.estimator.baseline_bytes,
                        "wall_s": round(measured.wall_s, 4),
                        "warmup_s": round(measured.warmup_s, 4),
                        "window_s": round(measured.window_s, 4),
                        "rel_ci_halfwidth": measured.rel_ci_halfwidth,
                        "reason": measured.reason or "",
                    }
                )
                handle.flush()
                elapsed = time.perf_counter() - started
                rate = "-" if measured.tokens_per_s is None else f"{measured.tokens_per_s:,.0f}"
                print(
                    f"[{elapsed:6.0f}s] {model} pass {repeat + 1}/{repeats} {index + 1}/{len(order)} "
                    f"{key}: {rate} tok/s {measured.reason or ''}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="preset(s) to measure")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="start over instead of continuing")
    args = parser.parse_args()
    for model in args.model:
        print(f"wrote {run(model, args.repeats, args.fresh)}")


if __name__ == "__main__":
    main()
