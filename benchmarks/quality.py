"""How good the found configuration is, end to end, and what the search cost (items 2 and 3).

For each CPU preset: a real search (not replayed) over the benchmark space with a fixed trial
budget, timed phase by phase; then, in the same process and in interleaved rounds (A B C D A B C
D ...), the configurations a user would otherwise train with:

- ``defaults``: the Transformers defaults (`TrainingArguments()` with its batch size of 8);
- ``auto_find_batch_size``: what `auto_find_batch_size=True` trains at, starting from a batch of
  64: it halves the batch only on an out-of-memory error, so it is the largest power-of-two
  fraction of 64 that runs (measured here: a configuration that fails halves it again);
- ``grid_best``: the best configuration of the exhaustive grid (``benchmarks/data``), if measured;
- ``autotune``: the search's winner.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.config import RunConfig
from autotune.driver.search import search
from autotune.progress import Reporter, TrialSummary, describe_params
from benchmarks.grid import SPACE, grid_path
from benchmarks.harness import Bench
from benchmarks.replay import load_table
from benchmarks.report import fill, k, measured_on, table

HERE = Path(__file__).resolve().parent

AUTO_FIND_START = 64


class PhaseClock(Reporter):
    """Times a search's phases from its events: baseline, trials (and their set-up, warm-up and
    window), the gaps between trials (sampling, storage), finalist re-measurement."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.marks: list[tuple[str, float]] = []
        self.trials: list[dict[str, Any]] = []
        self._trial_start: float | None = None

    def _mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter()))

    def on_search_start(self, header: dict[str, Any]) -> None:
        self._mark("search_start")

    def on_note(self, text: str) -> None:
        if text.startswith("measuring the baseline"):
            self._mark("baseline_start")
        elif text.startswith("baseline:") or text.startswith("the baseline failed"):
            self._mark("baseline_end")
        elif text.startswith("re-measuring"):
            self._mark("finalists_start")

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        self._trial_start = time.perf_counter()

    def on_trial_end(self, trial: TrialSummary) -> None:
        if self._trial_start is None or trial.number < 0:
            return
        attrs = trial.attrs
        self.trials.append(
            {
                "number": trial.number,
                "wall_s": time.perf_counter() - self._trial_start,
                "trained": bool(attrs.get("trained", True)),
                "warmup_s": float(attrs.get("warmup_s") or 0.0),
                "compile_s": float(attrs.get("warmup_excess_s") or 0.0),
                "window_s": float(attrs.get("window_s") or 0.0),
                "reason": trial.reason,
            }
        )
        self._trial_start = None

    def on_search_end(self, result: Any) -> None:
        self._mark("search_end")

    def breakdown(self) -> dict[str, float]:
        """Seconds per phase; they add up to the search's wall time."""
        at = dict(self.marks)
        total = at["search_end"] - self.started
        baseline = at.get("baseline_end", 0.0) - at.get("baseline_start", 0.0)
        finalists = at["search_end"] - at["finalists_start"] if "finalists_start" in at else 0.0
        trained = [t for t in self.trials if t["trained"]]
        window = sum(t["window_s"] for t in trained)
        compile_s = sum(t["compile_s"] for t in trained)
        warmup = sum(t["warmup_s"] for t in trained) - compile_s
        trial_wall = sum(t["wall_s"] for t in self.trials)
        setup = sum(t["wall_s"] for t in trained) - window - compile_s - warmup
        skipped = trial_wall - sum(t["wall_s"] for t in trained)
        return {
            "total_s": total,
            "baseline_s": baseline,
            "trials_window_s": window,
            "trials_warmup_s": warmup,
            "trials_compile_s": compile_s,
            "trials_setup_s": setup,
            "skipped_trials_s": skipped,
            "finalists_s": finalists,
            "between_trials_s": total - baseline - trial_wall - finalists,
            "trained_trials": len(trained),
            "skipped_trials": len(self.trials) - len(trained),
        }


def auto_find_batch_size(bench: Bench, defaults: dict[str, Any], start: int) -> tuple[dict[str, Any], int]:
    """The batch `auto_find_batch_size` would train at from `start`: halve while it fails with an
    out-of-memory error. Returns the configuration and how many halvings it took."""
    batch, halvings = start, 0
    while batch >= 1:
        params = {**defaults, "per_device_train_batch_size": batch}
        measured = bench.measure(params, verbatim=True)
        if measured.reason != "oom":
            return params, halvings
        batch, halvings = batch // 2, halvings + 1
    raise RuntimeError("no batch size fits")


def run(
    model: str, trials: int, rounds: int, space: str = SPACE, storage_dir: str | None = None
) -> dict[str, Any]:
    """Search `model` over `space` with `trials` trials, then compare the contenders over `rounds`
    interleaved rounds."""
    with tempfile.TemporaryDirectory(prefix="autotune-bench-", dir=storage_dir) as scratch:
        clock = PhaseClock()
        result = search(
            RunConfig(model=model, space=space, trials=trials, storage=f"sqlite:///{scratch}/bench.db"),
            reporter=clock,
        )
        cost = clock.breakdown()
        time_breakdown = result.study.user_attrs.get("time_breakdown")
        if result.best is None:
            raise RuntimeError(f"{model}: the search found no feasible configuration")
        winner = dict(result.best.params)
        best_trial_index = _trials_to_best(result)
        halvings, rows = compare(model, space, winner, rounds)
    return {
        "model": model,
        "trials": trials,
        "rounds": rounds,
        "auto_find_halvings": halvings,
        "search_wall_s": cost["total_s"],
        "trials_to_best": best_trial_index,
        # what the search told its user: its answer (the defaults, or a trial) and that answer's
        # speedup over the baseline (1.0 when it keeps the defaults), and the speedup it stated for
        # its best measured configuration (the answer, or the alternative named beside the defaults)
        "verdict": result.verdict,
        "rule": result.answer.rule,
        "answer_trial": result.answer.choice.trial if result.answer.choice is not None else None,
        "speedup_reported": result.speedup_over_baseline,
        "best_speedup_reported": _best_speedup(result),
        "cost": cost,
        # the study's own accounting (what `autotune show` prints): finalists' windows count as measured
        "time_breakdown": time_breakdown,
        "trial_times": clock.trials,
        "contenders": rows,
    }


def compare(
    model: str, space: str, winner: dict[str, Any], rounds: int
) -> tuple[int, dict[str, dict[str, Any]]]:
    """The defaults, `auto_find_batch_size`, the search's `winner` (and the grid's best where the
    space has a measured grid) in `rounds` interleaved rounds. The winner is measured as its
    values (verbatim): a batch the ladder added is not among the space file's listed sizes.
    Returns how many halvings auto_find_batch_size took, and a row per contender.

    Raises:
        RuntimeError: a contender that never measured (its reason named).
    """
    with Bench(model, space) as bench:
        defaults = bench.baseline()
        auto_params, halvings = auto_find_batch_size(bench, defaults, AUTO_FIND_START)
        contenders: dict[str, tuple[dict[str, Any], bool]] = {
            "defaults": (defaults, True),
            "auto_find_batch_size": (auto_params, True),
            "autotune": (winner, True),
        }
        if space == SPACE and grid_path(model).exists():
            table = load_table(model)
            best_key = table.best(None)
            contenders["grid_best"] = (table.configs[best_key].params, False)
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        growth: dict[str, list[int]] = {name: [] for name in contenders}
        peaks: dict[str, list[int]] = {name: [] for name in contenders}
        failures: dict[str, str] = {}
        for _ in range(rounds):
            for name, (params, verbatim) in contenders.items():
                measured = bench.measure(params, verbatim=verbatim)
                if measured.tokens_per_s is not None:
                    samples[name].append(measured.tokens_per_s)
                else:
                    failures[name] = f"{measured.reason}: {measured.message}"
                if measured.peak_memory_bytes:
                    peaks[name].append(measured.peak_memory_bytes)
                    if measured.rss_start_bytes:
                        growth[name].append(measured.peak_memory_bytes - measured.rss_start_bytes)
    never = {name: why for name, why in failures.items() if not samples[name]}
    if never:
        raise RuntimeError(f"{model}: contenders never measured: {never}")
    rows = {}
    reference = statistics.median(samples["defaults"])
    for name, (params, _) in contenders.items():
        values = samples[name]
        rows[name] = {
            "params": params,
            "median_tokens_per_s": statistics.median(values),
            "min_tokens_per_s": min(values),
            "max_tokens_per_s": max(values),
            "samples": values,
            "over_defaults": statistics.median(values) / reference,
            "peak_memory_bytes": statistics.median(peaks[name]) if peaks[name] else None,
            "trial_memory_growth_bytes": statistics.median(growth[name]) if growth[name] else None,
        }
    return halvings, rows


def _best_speedup(result: Any) -> float | None:
    """The speedup over the baseline the search stated for its best measured configuration: the
    answer's, or when the answer keeps the defaults, that of the alternative it names."""
    answer = result.answer
    best = answer.alternative if answer.keeps_defaults else answer.choice
    return best.speedup.value if best is not None and best.speedup is not None else None


def _trials_to_best(result: Any) -> int | None:
    """How many trained trials the search ran until it first measured its winner."""
    if result.best is None:
        return None
    trained = 0
    for trial in sorted(result.trials, key=lambda t: t.number):
        if trial.attrs.get("trained", True):
            trained += 1
        if trial.number == result.best.number:
            return trained
    return None


def superseded(quality: dict[str, Any] | None) -> str:
    """A warning on results measured against the old baseline (``adamw_torch``, where
    `TrainingArguments()` picks ``adamw_torch_fused`` with torch 2.13 and transformers 5.23)."""
    presets = (quality or {}).get("presets") or {}
    runs = presets.values() if isinstance(presets, dict) else presets  # by model (bench.py) or a list
    defaults = [((run.get("contenders") or {}).get("defaults") or {}).get("params") or {} for run in runs]
    return fill("quality", "superseded") if any(d.get("optim") == "adamw_torch" for d in defaults) else ""


def render(data: dict[str, Any]) -> str:
    presets = []
    for model, run in data["presets"].items():
        rows = [
            [
                name,
                k(row["median_tokens_per_s"]),
                f"{k(row['min_tokens_per_s'])}-{k(row['max_tokens_per_s'])}",
                "-" if row["over_defaults"] is None else f"{row['over_defaults']:.2f}x",
                f"`{describe_params(row['params'])}`",
            ]
            for name, row in run["contenders"].items()
        ]
        presets.append(
            fill(
                "quality",
                "preset",
                model=model,
                trials=run["cost"]["trained_trials"],
                search_s=run["search_wall_s"],
                best=run["trials_to_best"],
                table=table(["contender", "median tok/s", "min-max", "x defaults", "configuration"], rows),
                verdict=run["verdict"] or "-",
            )
        )
    fields = {"measured_on": measured_on(data), "superseded": superseded(data)}
    return fill("quality", "section", presets="\n\n".join(presets), **fields) + "\n"


def claims(data: dict[str, Any]) -> list[str]:
    if superseded(data):  # a claim against the old baseline is not one to make
        return []
    out = []
    for model, run in data["presets"].items():
        rows = run["contenders"]
        ours = rows["autotune"]["median_tokens_per_s"] or 0.0
        auto = rows["auto_find_batch_size"]["median_tokens_per_s"]
        grid = rows.get("grid_best", {}).get("median_tokens_per_s")
        out.append(
            fill(
                "quality",
                "claim",
                model=model,
                over_defaults=rows["autotune"]["over_defaults"],
                vs_auto=fill("quality", "vs_auto", ratio=ours / auto) if auto else "",
                vs_grid=fill("quality", "vs_grid", share=100 * ours / grid) if grid else "",
                trials=run["cost"]["trained_trials"],
                faster_auto=fill("quality", "faster_auto") if auto and auto > ours else "",
            )
        )
    return out
