"""The search's efficiency on replayed grids: autotune's sampler against random search and plain TPE.

    nice -n 10 python -m benchmarks.replay --measure   # measure the grids (30-40 min), then replay
    python -m benchmarks.replay                         # replay the stored grids (under a minute)

Measuring: every configuration of each grid in `GRIDS` is measured with the search's own trial code
(`benchmarks.harness.Bench`, the default measurement) twice, each pass in its own shuffled order,
and again (up to `MAX_PASSES` in all) where its two passes differ by more than `AGREE`.
Other jobs on a machine only slow a window down, so a configuration rests on its fastest pass and
the next where that one is within `AGREE` of it (`settled`): their mean is its figure, their spread
its noise. The grids, every pass and the
machine they were measured on, are stored in ``data/replay-grids.json``; ``--measure`` measures what
they lack (delete a grid there to measure it again).

Replaying trains nothing: a trial of a configuration observes one of its settled passes, drawn at
random; a configuration that failed, or whose peak is over the cap, is infeasible (a pruned trial).
Each strategy runs `SEEDS` times per grid, without a cap and under a cap that a third of the grid
is over:

- ``autotune``: `search_sampler` as a trial job uses it (a fresh sampler per trial, seeded by the
  run's seed plus the trials stored), with the search's pre-checks (a repeated configuration reuses
  its result and is no trial; one that needs at least the memory of one over the cap is predicted
  out of memory and skipped; one that cannot run here is skipped), screening (an observation under
  `SCREEN_RATIO` of the best so far is screened out, as its fastest step would be) and stop rule,
  every outcome written by the search's one writer (`record_outcome`). Not replayed: the baseline,
  the memory estimate's pre-check, the finalists' re-measurement.
- ``random``: optuna's ``RandomSampler(seed)``; ``plain TPE``: ``TPESampler(seed)``, optuna's
  defaults. Both train every proposal, repeats included.

Regret after n trials: 1 - the figure of the best configuration observed so far / the grid's best
figure (1 while nothing feasible was observed); its mean over the seeds is what the section shows.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.driver.stopping import stop_reason
from autotune.records import measured_record
from autotune.space import SearchSpace, load_space
from autotune.store.outcomes import (
    CANNOT_RUN,
    DUPLICATE,
    OVER_MEMORY_CAP,
    SCREENED_OUT,
    TrialOutcome,
    record_outcome,
)
from autotune.store.sampler import search_sampler
from autotune.store.session import StudyStore
from autotune.store.trials import FINISHED, summarize_trial
from autotune.trial.feasibility import as_past, precheck
from benchmarks.assemble import store
from benchmarks.report import fill, k, measured_on, mib, section, table

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "replay-grids.json"
# name: (model preset, space file under benchmarks/)
GRIDS: dict[str, tuple[str, str]] = {
    "tiny-gpt2": ("tiny-gpt2", "space_replay.yaml"),
    "tiny-llama, compiled": ("tiny-llama", "space_replay_compile.yaml"),
    "tiny-llama": ("tiny-llama", "space_replay.yaml"),
}
PASSES, MAX_PASSES = 2, 4
AGREE = 0.2  # a pass more than 20% below a configuration's fastest was disturbed
SEEDS = 30
REGRET_AT = (5, 10, 20)
CAPPED_SHARE = 1 / 3  # of the configurations over the capped case's cap
SCREEN_RATIO = 0.5  # the search's default --screen-ratio
COMPLETE, PRUNED = TrialState.COMPLETE, TrialState.PRUNED

Key = tuple[tuple[str, Any], ...]


def key_of(params: Mapping[str, Any]) -> Key:
    return tuple(sorted(params.items()))


def settled(passes: Sequence[float | None]) -> tuple[float, ...]:
    """The passes a configuration's figure rests on, fastest first: its fastest, and the next where
    it is within `AGREE` of it (further below, it was disturbed: other jobs only slow a window)."""
    fastest = sorted((p for p in passes if p is not None), reverse=True)[:2]
    return tuple(p for p in fastest if p >= (1 - AGREE) * fastest[0])


@dataclass(frozen=True)
class Config:
    """One configuration of a grid: its settled passes (tokens/s), its peak in a fresh process, and
    why it failed where it did."""

    params: dict[str, Any]
    samples: tuple[float, ...]
    memory_bytes: int | None
    reason: str | None = None

    @property
    def figure(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


@dataclass(frozen=True)
class Grid:
    """A measured grid: its space and every configuration of it."""

    space: SearchSpace
    configs: dict[Key, Config]

    def feasible(self, config: Config, cap: int | None) -> bool:
        if config.figure is None:
            return False
        return cap is None or (config.memory_bytes or 0) <= cap

    def best(self, cap: int | None) -> Config:
        feasible = [c for c in self.configs.values() if self.feasible(c, cap)]
        return max(feasible, key=lambda c: c.figure or 0.0)

    def observe(self, config: Config, cap: int | None, rng: random.Random) -> tuple[float | None, str | None]:
        """One trial of `config`: (one of its passes, drawn at random, or None; why not)."""
        if config.figure is None:
            return None, config.reason or "error"
        value = rng.choice(config.samples)
        return (value, None) if self.feasible(config, cap) else (None, OVER_MEMORY_CAP)

    def cap_excluding(self, share: float) -> int:
        """The measured peak that puts the share of configurations over it closest to `share`."""
        peaks = [c.memory_bytes for c in self.configs.values() if c.memory_bytes is not None]
        return min(sorted(set(peaks)), key=lambda cap: abs(sum(p > cap for p in peaks) - share * len(peaks)))

    def noise(self) -> float:
        """One measurement's relative standard deviation: the median of the configurations' own
        (from their two passes), over the median of a chi distribution with one degree of freedom
        (0.6745), so that one configuration's unlucky pair does not set it."""
        pairs = [c.samples for c in self.configs.values() if len(c.samples) == 2]
        spreads = [statistics.stdev(p) / statistics.fmean(p) for p in pairs]
        return statistics.median(spreads) / 0.6745 if spreads else 0.0


def load_grid(stored: Mapping[str, Any]) -> Grid:
    """A grid from its stored passes. On CPU a trial's peak is its process's resident set, which
    grows as the grid's trials leave compiled kernels behind: a configuration's memory is its
    median growth during its trials over the smallest start, what it would peak at in a fresh
    process."""
    rows = stored["configs"]
    start = min(s for row in rows for s in row["rss_start_bytes"] if s)
    configs = {}
    for row in rows:
        growth = [
            p - s for p, s in zip(row["peak_memory_bytes"], row["rss_start_bytes"], strict=True) if p and s
        ]
        samples = settled(row["tokens_per_s"])
        memory = int(start + statistics.median(growth)) if growth else None
        configs[key_of(row["params"])] = Config(row["params"], samples, memory, row["reason"])
    return Grid(load_space(HERE / stored["space"]), configs)


# -- the strategies -------------------------------------------------------------------------------

Observed = list[tuple[Config, float | None]]  # each trained trial: its configuration, its value or None


def replay_autotune(grid: Grid, cap: int | None, seed: int, budget: int) -> Observed:
    """autotune's loop of trial jobs on one worker, the study in memory (see the module docstring)."""
    study = optuna.create_study(direction="maximize")
    stop = stop_reason(SimpleNamespace(space=grid.space), StudyStore(study), budget)  # type: ignore[arg-type]
    rng, observed = random.Random(seed), []
    while len(observed) < budget and stop() is None:
        # seeded as `autotune.trial.entry` seeds it: the run's seed plus the trials stored
        study.sampler = search_sampler(seed + len(study.get_trials(deepcopy=False)))
        trial = study.ask()
        config = grid.configs[key_of(grid.space.suggest(trial))]
        finished = study.get_trials(deepcopy=False, states=FINISHED)
        skip = precheck(trial.params, [as_past(summarize_trial(t)) for t in finished], lambda: None, cap)
        if config.reason in CANNOT_RUN:
            skip = (str(config.reason), None)
        if skip is not None:
            _skip(study, trial, skip, finished, cap)
            continue
        value, reason = grid.observe(config, cap, rng)
        best = max((t.value for t in finished if t.state == COMPLETE and t.value is not None), default=None)
        if value is not None and best is not None and value < SCREEN_RATIO * best:
            value, reason = None, SCREENED_OUT
        observed.append((config, value))
        record = measured_record({"tokens_per_s": value, "peak_memory_bytes": config.memory_bytes})
        record_outcome(
            trial, TrialOutcome("COMPLETE" if reason is None else "PRUNED", reason, record=record), cap
        )
        _tell(study, trial, value)
    return observed


def _skip(
    study: optuna.Study, trial: optuna.Trial, skip: tuple[str, Any], finished: list[Any], cap: int | None
) -> None:
    """A trial that trains nothing: a duplicate takes its source's outcome, the rest are pruned."""
    reason, past = skip
    source = next((t for t in finished if past is not None and t.number == past.number), None)
    if reason == DUPLICATE and source is not None:
        state = "COMPLETE" if source.state == COMPLETE else "PRUNED"
        outcome = TrialOutcome(
            state, summarize_trial(source).reason, trained=False, constraints=source.constraints
        )
        record_outcome(trial, outcome, cap)
        _tell(study, trial, source.value if state == "COMPLETE" else None)
        return
    record_outcome(trial, TrialOutcome("PRUNED", reason, trained=False), cap)
    _tell(study, trial, None)


def _tell(study: optuna.Study, trial: optuna.Trial, value: float | None) -> None:
    study.tell(trial, state=PRUNED) if value is None else study.tell(trial, value)


def replay_optuna(
    sampler: optuna.samplers.BaseSampler, grid: Grid, cap: int | None, seed: int, budget: int
) -> Observed:
    """What a user does with optuna alone: every proposal trains; one that fails is a pruned trial."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    rng, observed = random.Random(seed), []
    for _ in range(budget):
        trial = study.ask()
        config = grid.configs[key_of(grid.space.suggest(trial))]
        value, _ = grid.observe(config, cap, rng)
        observed.append((config, value))
        _tell(study, trial, value)
    return observed


STRATEGIES: dict[str, Callable[[Grid, int | None, int, int], Observed]] = {
    "autotune": replay_autotune,
    "random": lambda g, c, s, b: replay_optuna(optuna.samplers.RandomSampler(seed=s), g, c, s, b),
    "plain TPE": lambda g, c, s, b: replay_optuna(optuna.samplers.TPESampler(seed=s), g, c, s, b),
}


def regrets(
    grid: Grid, cap: int | None, observed: Observed, at: Sequence[int] = REGRET_AT
) -> dict[str, float]:
    """Regret after each of `at` trials (a replay that ended sooner: its last)."""
    optimum = grid.best(cap).figure or 0.0
    curve, pick, seen = [], None, -math.inf
    for config, value in observed:
        if value is not None and value > seen:
            pick, seen = config, value
        curve.append(1.0 - (pick.figure or 0.0) / optimum if pick is not None else 1.0)
    return {str(n): curve[min(n, len(curve)) - 1] if curve else 1.0 for n in at}


def _case(job: tuple[Grid, int | None, str, int, Sequence[int]]) -> tuple[dict[str, list[float]], int]:
    """One strategy on one grid and cap, every seed: each regret's values over the seeds, and in how
    many seeds its trials never trained the grid's best configuration."""
    grid, cap, strategy, seeds, at = job
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    runs = [STRATEGIES[strategy](grid, cap, seed, max(at)) for seed in range(seeds)]
    scored = [regrets(grid, cap, run, at) for run in runs]
    best = grid.best(cap)
    missed = sum(all(config is not best for config, _ in run) for run in runs)
    return {n: [score[n] for score in scored] for n in scored[0]}, missed


def replay(
    grids: Mapping[str, Grid], seeds: int = SEEDS, workers: int = 2, at: Sequence[int] = REGRET_AT
) -> dict[str, Any]:
    """Every strategy on every grid, without a cap and capped: mean regret after each of `at` trials
    and its standard error over the seeds."""
    jobs, places = [], []
    for name, grid in grids.items():
        for case, cap in (("no cap", None), ("capped", grid.cap_excluding(CAPPED_SHARE))):
            for strategy in STRATEGIES:
                jobs.append((grid, cap, strategy, seeds, at))
                places.append((name, case, cap, strategy))
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_case, jobs))
    else:
        results = [_case(job) for job in jobs]
    out: dict[str, Any] = {}
    for (name, case, cap, strategy), (values, missed) in zip(places, results, strict=True):
        grid = grids[name]
        best = grid.best(cap)
        found = out.setdefault(name, {}).setdefault(case, {"cap_bytes": cap, "regret": {}, "missed": {}})
        found["missed"][strategy] = missed
        found["infeasible"] = sum(not grid.feasible(c, cap) for c in grid.configs.values())
        found["best"], found["best_tokens_per_s"] = best.params, best.figure
        found["regret"][strategy] = {
            n: {
                "mean": statistics.fmean(v),
                "se": statistics.stdev(v) / math.sqrt(len(v)) if len(v) > 1 else 0.0,
            }
            for n, v in values.items()
        }
    return out


def describe(grid: Grid, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the section says of a grid itself (`rows`: its stored passes): its size, its spread, its
    noise and how many configurations were measured again for a disturbed pass."""
    figures = [c.figure for c in grid.configs.values() if c.figure is not None]
    noise = grid.noise()
    resolution = 2 * noise  # twice the standard error of a difference of two means of two passes
    best = max(figures)
    return {
        "configs": len(grid.configs),
        "failed": sum(c.figure is None for c in grid.configs.values()),
        "knobs": list(grid.space.knobs),
        "passes": sum(len(row["tokens_per_s"]) for row in rows),
        "measured_again": sum(len(row["tokens_per_s"]) > PASSES for row in rows),
        "single_pass": sum(len(c.samples) == 1 for c in grid.configs.values()),
        "noise": noise,
        "resolution": resolution,
        "close": sum(f >= best * (1 - resolution) for f in figures) - 1,
        "slowest_share": min(figures) / best,
    }


# -- measuring -----------------------------------------------------------------------------------


def measure_grid(
    model: str, space: str, before: Mapping[str, Any] | None, save: Callable[[dict[str, Any]], None]
) -> None:
    """Every configuration of `space` (a file under benchmarks/) for `model`: what `before` (the
    stored grid) lacks, passes in shuffled order until each has `PASSES` that agree (`settled`).
    The grid goes to `save` after each measurement, so an interrupted run keeps what it measured."""
    from benchmarks.harness import Bench, machine

    began, here = time.monotonic(), machine()
    grid: dict[str, Any] = {"model": model, "space": space, "wall_s": 0.0, "machine": here, "configs": []}
    if before is not None:  # the first machine and date stay; the passes it lacked are measured now
        grid = {**before, "again": here["date"]}
    with Bench(model, str(HERE / space)) as bench:
        if not grid["configs"]:
            keys = ("tokens_per_s", "peak_memory_bytes", "rss_start_bytes")
            grid["configs"] = [
                {"params": p, **{k: [] for k in keys}, "reason": None} for p in bench.plan.space.grid()
            ]
        spent = grid["wall_s"]
        for index in range(MAX_PASSES):
            todo = [row for row in grid["configs"] if _wanted(row)]
            random.Random(index).shuffle(todo)  # a different order each pass: noise, not drift
            for done, row in enumerate(todo, start=1):
                measured = bench.measure(row["params"])
                row["tokens_per_s"].append(measured.tokens_per_s)
                row["peak_memory_bytes"].append(measured.peak_memory_bytes)
                row["rss_start_bytes"].append(measured.rss_start_bytes)
                row["reason"] = row["reason"] or measured.reason
                grid["wall_s"] = spent + time.monotonic() - began
                save(grid)
                rate = "-" if measured.tokens_per_s is None else f"{measured.tokens_per_s:,.0f}"
                print(
                    f"[{time.monotonic() - began:5.0f} s] {model} {done}/{len(todo)} "
                    f"{row['params']}: {rate} tok/s {measured.reason or ''}",
                    flush=True,
                )


def _wanted(row: Mapping[str, Any]) -> bool:
    """Whether a configuration needs another pass: fewer than `PASSES`, or (below `MAX_PASSES`) only
    one it can rest on (`settled`); a configuration that failed is not tried again."""
    passes = len(row["tokens_per_s"])
    if row["reason"] is not None or passes >= MAX_PASSES:
        return False
    return passes < PASSES or len(settled(row["tokens_per_s"])) < 2


# -- the section ---------------------------------------------------------------------------------


def _cell(regret: Mapping[str, float]) -> str:
    return f"{100 * regret['mean']:.1f}% ± {100 * regret['se']:.1f}"


def _versus(regret: Mapping[str, Mapping[str, Any]]) -> str:
    """Where autotune's mean regret is below or above each other strategy's by more than twice the
    standard error of the difference, in words."""
    words = []
    for other, label in (("random", "random search's"), ("plain TPE", "plain TPE's")):
        apart: dict[str, list[str]] = {"below": [], "above": []}
        for n, mine in regret["autotune"].items():
            theirs = regret[other][n]
            gap, margin = mine["mean"] - theirs["mean"], 2 * math.hypot(mine["se"], theirs["se"])
            if abs(gap) > margin:
                apart["below" if gap < 0 else "above"].append(n)
        said = [f"{side} {label} after {_listed(ns)}" for side, ns in apart.items() if ns]
        words.append(", ".join(said) or f"not separated from {label}")
    return "; ".join(words)


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def render(data: dict[str, Any]) -> str:
    parts = []
    for name, grid in data["grids"].items():
        rows = [
            [
                strategy,
                "none" if case["cap_bytes"] is None else mib(case["cap_bytes"]),
                *map(_cell, regret.values()),
                f"{case['missed'][strategy]}/{data['seeds']}",
            ]
            for case in grid["cases"].values()
            for strategy, regret in case["regret"].items()
        ]
        uncapped, capped = grid["cases"]["no cap"], grid["cases"]["capped"]
        fields = {
            **grid,
            "knobs": ", ".join(grid["knobs"]),
            "minutes": grid["wall_s"] / 60,
            "when": grid["machine"]["date"]
            + (f", some passes again {grid['again']}" if grid.get("again") else ""),
            "best": "; ".join(f"{knob}={value}" for knob, value in uncapped["best"].items()),
            "optimum": k(uncapped["best_tokens_per_s"]),
            "cap": mib(capped["cap_bytes"]),
            "infeasible": capped["infeasible"],
            "table": table(
                ["strategy", "cap", *(f"after {n}" for n in data["regret_at"]), "best never trained"], rows
            ),
        }
        parts.append(fill("replay", "grid", name=name, **fields))
    fields = {"seeds": data["seeds"], "last_seed": data["seeds"] - 1, "replay_s": data["replay_s"]}
    return section("replay", measured_on=measured_on(data), grids="\n\n".join(parts), **fields)


def claims(data: dict[str, Any]) -> list[str]:
    out = []
    for name, grid in data["grids"].items():
        for label, case in grid["cases"].items():
            regret = case["regret"]
            figures = {s: "/".join(f"{100 * r['mean']:.1f}%" for r in v.values()) for s, v in regret.items()}
            out.append(
                fill(
                    "replay",
                    "claim",
                    name=name,
                    label=label,
                    at="/".join(data["regret_at"]),
                    **{s.replace(" ", "_"): f for s, f in figures.items()},
                    versus=_versus(regret),
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--measure", nargs="*", metavar="GRID", help="measure these grids (none named: all) first"
    )
    parser.add_argument("--seeds", type=int, default=SEEDS)
    args = parser.parse_args()
    stored = json.loads(DATA.read_text()) if DATA.exists() else {}
    for name in (args.measure or GRIDS) if args.measure is not None else ():

        def save(grid: dict[str, Any], name: str = name) -> None:
            stored[name] = grid
            DATA.write_text(json.dumps(stored, indent=1) + "\n")

        measure_grid(*GRIDS[name], stored.get(name), save)
    began = time.monotonic()
    grids = {name: load_grid(stored[name]) for name in GRIDS if name in stored}
    results = replay(grids, args.seeds)
    store(
        "replay",
        {
            "machine": stored[next(iter(grids))]["machine"],
            "seeds": args.seeds,
            "regret_at": [str(n) for n in REGRET_AT],
            "replay_s": time.monotonic() - began,
            "grids": {
                name: {
                    **{
                        key: stored[name].get(key) for key in ("model", "space", "wall_s", "machine", "again")
                    },
                    **describe(grid, stored[name]["configs"]),
                    "cases": results[name],
                }
                for name, grid in grids.items()
            },
        },
    )


if __name__ == "__main__":
    main()
