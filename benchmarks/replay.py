"""Search cost on a replayed grid (item 1 of the benchmark issue).

Every configuration of the benchmark space was measured (`grid.py`, repeated). Search strategies
are replayed against that table without training: a trial "measures" a configuration by drawing
one of its measured repeats (so strategies see the real noise), and a configuration whose measured
peak is over the cap, or that failed, is infeasible. Judged on the table's mean of each
configuration ("true" throughput), per strategy and over many seeds:

- trials until the best configuration found so far is within 3% of the grid optimum;
- regret (how far the best found is below the optimum) after 10, 20 and 40 trials.

Strategies: random search (optuna's `RandomSampler`, repeats allowed), the grid in product order,
optuna's default `TPESampler` (an infeasible configuration is a pruned trial), and autotune's own
search: the driver's loop (`_search_until_budget`) over optuna studies whose trials go through
autotune's pre-checks (duplicates reuse the stored result, a configuration needing at least the
memory of one that did not fit is predicted out of memory, a memory estimate clearly over the cap
is skipped) and carry autotune's constraints. Only trials that trained count as trials.
"""

from __future__ import annotations

import contextlib
import csv
import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna

from autotune.config import RunConfig
from autotune.driver.stopping import stop_reason
from autotune.driver.supervisor import Supervisor
from autotune.executors.inprocess import InProcessExecutor
from autotune.plan.resolved import Plan
from autotune.progress import Reporter
from autotune.space import SearchSpace, load_space
from autotune.study.outcomes import (
    DUPLICATE,
    OVER_MEMORY_CAP,
    constraint_values,
    memory_violation,
)
from autotune.study.owner import OWNER_ATTR
from autotune.study.store import FINISHED
from autotune.trial.feasibility import as_past, precheck
from benchmarks.grid import KNOBS, SPACE, config_key, grid_path
from benchmarks.report import fill, k, measured_on, mib, pct, table

HERE = Path(__file__).resolve().parent

STRATEGIES = ("random", "grid", "tpe", "autotune")
# autotune's answer is its finalists' winner: the best three re-measured in interleaved rounds.
ANSWERS = ("random", "grid", "tpe", "autotune", "autotune+finalists")
WITHIN = 0.03
WITHIN_LOOSE = 0.10  # also reported: on CPU one window varies by more than 3%
FINALISTS, FINALIST_ROUNDS = 3, 3
REGRET_AT = (10, 20, 40)
MAX_TRIALS = 128  # trained trials per replay; a strategy that has not got within 3% by then is censored


@dataclass
class Config:
    """One configuration of the grid, as the replay sees it."""

    key: str
    params: dict[str, Any]
    samples: list[float]  # measured tokens/s of each repeat (empty: it failed)
    memory_bytes: int | None  # peak, corrected to a fresh process (see `load_table`)
    estimate_bytes: int | None
    reason: str | None  # why it failed, when it did

    @property
    def true_tokens_per_s(self) -> float | None:
        """The configuration's throughput: the median of its repeats (one disturbed pass does not
        move it)."""
        return statistics.median(self.samples) if self.samples else None


@dataclass
class Table:
    """A workload's measured grid."""

    model: str
    configs: dict[str, Config]
    process_baseline_bytes: int

    def feasible(self, key: str, cap: int | None) -> bool:
        config = self.configs[key]
        if config.reason or not config.samples:
            return False
        return cap is None or (config.memory_bytes or 0) <= cap

    def best(self, cap: int | None) -> str:
        """The fastest feasible configuration under `cap`."""
        feasible = (k for k in self.configs if self.feasible(k, cap))
        return max(feasible, key=lambda k: self.configs[k].true_tokens_per_s or 0.0)

    def optimum(self, cap: int | None) -> float:
        return self.configs[self.best(cap)].true_tokens_per_s or 0.0

    def noise(self, cap: int | None, within: float = 0.03) -> dict[str, float]:
        """How well the table itself knows each configuration: the spread of one window (relative
        standard deviation, robust to a disturbed repeat, over the configurations measured more than
        once), the standard
        error of a configuration's figure from its repeats, and how many feasible configurations
        cannot be told apart (95%) from the band within `within` of the optimum: those a
        strategy's "within 3%" may land on or miss by the table's noise alone."""
        # Robust to a disturbed repeat: the median of the configurations' own relative standard
        # deviations, scaled by the median of a chi distribution (a pooled variance is dominated by
        # the few configurations with one disturbed window).
        deviations, repeats = [], []
        for config in self.configs.values():
            if len(config.samples) > 1:
                deviations.append(statistics.stdev(config.samples) / statistics.fmean(config.samples))
                repeats.append(len(config.samples))
        freedom = statistics.median(repeats) - 1 if repeats else 1
        chi_median = 0.6745 if freedom == 1 else (1 - 2 / (9 * freedom)) ** 1.5  # Wilson-Hilferty
        spread = statistics.median(deviations) / chi_median if deviations else 0.0
        n = statistics.median(repeats) if repeats else 1
        error = spread / math.sqrt(n)
        band = (1 - within) * self.optimum(cap)
        # the difference of two figures, each known to `error`, at 95%
        reach = 1 + 1.96 * error * math.sqrt(2)
        plausible = sum(
            1
            for key, config in self.configs.items()
            if self.feasible(key, cap) and (config.true_tokens_per_s or 0.0) * reach >= band
        )
        return {"window_spread": spread, "repeats": n, "figure_error": error, "plausible_within": plausible}

    def cap_excluding(self, share: float) -> int:
        """The cap (one of the measured peaks) that puts the share of configurations that ran over it
        closest to `share`."""
        peaks = [c.memory_bytes for c in self.configs.values() if c.memory_bytes is not None]
        target = share * len(peaks)
        return min(sorted(set(peaks)), key=lambda cap: abs(sum(p > cap for p in peaks) - target))


def _number(text: str) -> float | None:
    return float(text) if text not in ("", "None") else None


def load_table(model: str, path: Path | None = None) -> Table:
    """Read ``grid-<model>.csv``.

    On CPU the peak is the process's RSS high-water mark, and a process's resident set grows as
    compiled kernels accumulate over the grid's trials; each row therefore also holds the RSS when
    its trial began. A configuration's memory is its growth over that start (median over repeats)
    plus the RSS of the process at its first trial: what it would peak at in a fresh search
    process. The memory estimate is corrected the same way.
    """
    rows = list(csv.DictReader((path or grid_path(model)).open(newline="")))
    if not rows:
        raise SystemExit(f"{path or grid_path(model)} is empty: run `make bench-grid`")
    starts = [int(float(r["rss_start_bytes"])) for r in rows if _number(r["rss_start_bytes"])]
    baseline = min(starts)
    by_key: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_key.setdefault(row["config"], []).append(row)
    configs = {}
    for key, measured in by_key.items():
        ran = [r for r in measured if not r["reason"]]
        growth = [
            float(r["peak_memory_bytes"]) - float(r["rss_start_bytes"])
            for r in ran
            if _number(r["peak_memory_bytes"]) and _number(r["rss_start_bytes"])
        ]
        estimates = [
            float(r["estimate_bytes"]) - float(r["estimate_baseline_bytes"])
            for r in measured
            if _number(r["estimate_bytes"]) and _number(r["estimate_baseline_bytes"])
        ]
        params = {k: _parse(k, measured[0][k]) for k in KNOBS}
        configs[key] = Config(
            key=key,
            params=params,
            samples=[float(r["tokens_per_s"]) for r in ran],
            memory_bytes=int(baseline + statistics.median(growth)) if growth else None,
            estimate_bytes=int(baseline + statistics.median(estimates)) if estimates else None,
            reason=None if ran else (measured[0]["reason"] or "error"),
        )
    return Table(model, configs, baseline)


def _parse(knob: str, text: str) -> Any:
    if knob == "per_device_train_batch_size":
        return int(text)
    if knob == "activation_checkpointing":
        return text == "True"
    return text


# -- the strategies -----------------------------------------------------------------------------


@dataclass
class Replay:
    """What one strategy did with one seed: the trained trials in order, and what it cost."""

    observed: list[tuple[str, float | None]] = field(default_factory=list)  # (config, tokens/s)
    proposals: int = 0  # every configuration the strategy looked at, trained or not


class Enough(Exception):
    """The replay has seen all its score needs: later trials change none of the figures."""


class Evaluator:
    """Measures configurations from the table, with a repeat drawn at random each time.

    Args:
        stop_early: end the replay (raise `Enough`) once the pick is within 3% of the optimum and
            the last regret budget is reached.
    """

    def __init__(self, table: Table, cap: int | None, seed: int, stop_early: bool = False) -> None:
        self.table, self.cap = table, cap
        self.rng = random.Random(seed)
        self.replay = Replay()
        self.stop_early = stop_early
        self.seed = seed

    def measure(self, params: Mapping[str, Any]) -> tuple[float | None, int | None, str | None]:
        """One training trial: (tokens/s or None, memory, failure reason)."""
        config = self.table.configs[config_key(dict(params))]
        if config.reason or not config.samples:
            self._record(config.key, None)
            return None, None, config.reason or "error"
        value = self.rng.choice(config.samples)
        feasible = self.cap is None or (config.memory_bytes or 0) <= self.cap
        self._record(config.key, value if feasible else None)
        return value, config.memory_bytes, None

    def _record(self, key: str, value: float | None) -> None:
        self.replay.observed.append((key, value))
        seen = len(self.replay.observed)
        if self.stop_early and seen >= max(REGRET_AT) and seen % 8 == 0:
            scores = [
                score(self.table, self.cap, self.replay, self.seed if f else None) for f in (False, True)
            ]
            if all(s["trials_to_within"] and s["trials_to_within_loose"] for s in scores):
                raise Enough


def _quiet_study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    return optuna.create_study(direction="maximize", sampler=sampler)


def replay_random(space: SearchSpace, evaluator: Evaluator, seed: int, budget: int) -> Replay:
    study = _quiet_study(optuna.samplers.RandomSampler(seed=seed))
    _plain_optimize(study, space, evaluator, budget)
    return evaluator.replay


def replay_tpe(space: SearchSpace, evaluator: Evaluator, seed: int, budget: int) -> Replay:
    study = _quiet_study(optuna.samplers.TPESampler(seed=seed))
    _plain_optimize(study, space, evaluator, budget)
    return evaluator.replay


def _plain_optimize(study: optuna.Study, space: SearchSpace, evaluator: Evaluator, budget: int) -> None:
    """What a user does with optuna alone: every proposal trains; one that fails (out of memory,
    over the cap) is a pruned trial."""

    def objective(trial: optuna.Trial) -> float:
        evaluator.replay.proposals += 1
        value, memory, reason = evaluator.measure(space.suggest(trial))
        if value is None or memory_violation(memory, evaluator.cap) > 0:
            raise optuna.TrialPruned(reason or "over the memory cap")
        return value

    study.optimize(objective, n_trials=budget)


def replay_grid(space: SearchSpace, evaluator: Evaluator, seed: int, budget: int) -> Replay:
    for params in space.grid()[:budget]:
        evaluator.replay.proposals += 1
        evaluator.measure(params)
    return evaluator.replay


class _TableTrainer:
    """Stands in for `AutotuneTrainer` under the search's own loop (the supervisor over the
    in-process executor): the same pre-checks, constraints and trial accounting, with measurements
    drawn from the table instead of trained."""

    def __init__(self, space: SearchSpace, evaluator: Evaluator) -> None:
        self.space, self.evaluator = space, evaluator
        self.job_id: str | None = None
        self.measurement = SimpleNamespace(job_started_s=None)  # what run_on stamps a job's start on

    def owner_attrs(self) -> dict[str, Any]:
        return {"job": self.job_id}

    def hyperparameter_search(self, **kwargs: Any) -> None:
        study = optuna.create_study(
            storage=kwargs["storage"],
            study_name=kwargs["study_name"],
            load_if_exists=True,
            sampler=kwargs["sampler"],
            direction="maximize",
        )
        study.optimize(self._objective, n_trials=kwargs["n_trials"])

    def _objective(self, trial: optuna.Trial) -> float:
        evaluator = self.evaluator
        evaluator.replay.proposals += 1
        values = self.space.suggest(trial)
        trial.set_user_attr(OWNER_ATTR, self.owner_attrs())
        finished = trial.study.get_trials(deepcopy=False, states=FINISHED)
        estimate = evaluator.table.configs[config_key(values)].estimate_bytes
        skip = precheck(trial.params, [as_past(t) for t in finished], lambda: estimate, evaluator.cap)
        if skip is not None and skip[0] == DUPLICATE and skip[1] is not None:
            source = next(t for t in finished if t.number == skip[1].number)
            for name, value in source.constraints.items():
                trial.set_constraint(name, value)
            trial.set_user_attr("trained", False)
            trial.set_user_attr("reason", DUPLICATE)
            if source.state == optuna.trial.TrialState.COMPLETE and source.value is not None:
                return source.value
            raise optuna.TrialPruned(DUPLICATE)
        if skip is not None:
            self._finish(trial, skip[0], None)
            trial.set_user_attr("trained", False)
            raise optuna.TrialPruned(skip[0])
        value, memory, reason = evaluator.measure(values)
        over = memory_violation(memory, evaluator.cap) > 0
        self._finish(trial, reason or (OVER_MEMORY_CAP if over else None), memory)
        if value is None or over:
            raise optuna.TrialPruned(reason or OVER_MEMORY_CAP)
        return value

    def _finish(self, trial: optuna.Trial, reason: str | None, memory: int | None) -> None:
        for name, value in constraint_values(reason, memory, self.evaluator.cap).items():
            trial.set_constraint(name, value)
        if reason is not None:
            trial.set_user_attr("reason", reason)


def replay_autotune(space: SearchSpace, evaluator: Evaluator, seed: int, budget: int) -> Replay:
    config = RunConfig(space=SPACE, trials=budget, seed=seed, memory_cap=None)
    plan = Plan(
        config=config,
        space=space,
        workload=None,  # type: ignore[arg-type]  # the loop never builds a model
        hardware=None,  # type: ignore[arg-type]
        model=None,  # type: ignore[arg-type]
        base_args={},
        study_name="replay",
        storage=optuna.storages.InMemoryStorage(),
        cap_bytes=evaluator.cap,
    )
    study = optuna.create_study(storage=plan.storage, study_name=plan.study_name, direction="maximize")
    trainer: Any = _TableTrainer(space, evaluator)
    with InProcessExecutor(plan, study, Reporter(), trainer=trainer) as executor:
        Supervisor(plan, study, executor, Reporter()).run_search(budget, stop_reason(plan, study, budget))
    return evaluator.replay


REPLAYS: dict[str, Callable[[SearchSpace, Evaluator, int, int], Replay]] = {
    "random": replay_random,
    "grid": replay_grid,
    "tpe": replay_tpe,
    "autotune": replay_autotune,
}


# -- scoring --------------------------------------------------------------------------------------


def best_so_far(table: Table, cap: int | None, observed: Iterable[tuple[str, float | None]]) -> list[float]:
    """After each trial, the true throughput of the configuration the strategy would pick (its best
    observed feasible one); 0 while none is feasible."""
    curve, best_key, best_seen = [], None, -math.inf
    for key, value in observed:
        if value is not None and table.feasible(key, cap) and value > best_seen:
            best_key, best_seen = key, value
        curve.append(table.configs[best_key].true_tokens_per_s or 0.0 if best_key else 0.0)
    return curve


def finalists_curve(
    table: Table, cap: int | None, observed: list[tuple[str, float | None]], seed: int
) -> list[float]:
    """After each trial, the true throughput of what a search stopped there would answer: its best
    `FINALISTS` configurations (by their trial's window) each measured `FINALIST_ROUNDS` times more
    (repeats drawn from the table), the best median winning; 0 while none is feasible."""
    curve = []
    best: dict[str, float] = {}
    for n, (key, value) in enumerate(observed, start=1):
        if value is not None and table.feasible(key, cap):
            best[key] = max(value, best.get(key, -math.inf))
        finalists = sorted(best, key=lambda k: -best[k])[:FINALISTS]
        if not finalists:
            curve.append(0.0)
            continue
        rng = random.Random(seed * 100_003 + n)
        medians = {
            k: statistics.median(rng.choice(table.configs[k].samples) for _ in range(FINALIST_ROUNDS))
            for k in finalists
        }
        winner = max(finalists, key=lambda k: medians[k])
        curve.append(table.configs[winner].true_tokens_per_s or 0.0)
    return curve


def score(table: Table, cap: int | None, replay: Replay, finalists_seed: int | None = None) -> dict[str, Any]:
    """Trials to within 3% (and 10%) of the optimum, and regret after `REGRET_AT` trials, of the
    best single window, or with `finalists_seed` of the finalists' winner."""
    optimum = table.optimum(cap)
    if finalists_seed is None:
        curve = best_so_far(table, cap, replay.observed)
    else:
        curve = finalists_curve(table, cap, replay.observed, finalists_seed)

    def first_within(share: float) -> int | None:
        return next((i + 1 for i, v in enumerate(curve) if v >= (1 - share) * optimum), None)

    regret = {}
    for n in REGRET_AT:
        reached = curve[min(n, len(curve)) - 1] if curve else 0.0
        regret[n] = (optimum - reached) / optimum
    return {
        "trials_to_within": first_within(WITHIN),
        "trials_to_within_loose": first_within(WITHIN_LOOSE),
        "regret": regret,
        "trials": len(curve),
        "proposals": replay.proposals,
    }


def _one(args: tuple[str, str, int | None, int]) -> list[tuple[str, str, int | None, dict[str, Any]]]:
    model, strategy, cap, seed = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    table = load_table(model)
    space = load_space(SPACE).for_hardware(1, "replay")
    evaluator = Evaluator(table, cap, seed, stop_early=True)
    with contextlib.suppress(Enough):
        REPLAYS[strategy](space, evaluator, seed, MAX_TRIALS)
    scored = [(model, strategy, cap, score(table, cap, evaluator.replay))]
    if strategy == "autotune":
        scored.append((model, "autotune+finalists", cap, score(table, cap, evaluator.replay, seed)))
    return scored


def run(models: Iterable[str], seeds: int = 30, workers: int = 2) -> dict[str, Any]:
    """Replay every strategy for every model and cap (none, and one with a third of the grid over
    it) over `seeds` seeds; return the summary."""
    jobs, caps = [], {}
    for model in models:
        table = load_table(model)
        caps[model] = {"none": None, "third": table.cap_excluding(1 / 3)}
        for cap in caps[model].values():
            for strategy in STRATEGIES:
                jobs.extend((model, strategy, cap, seed) for seed in range(seeds))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = [row for rows in pool.map(_one, jobs, chunksize=4) for row in rows]
    summary: dict[str, Any] = {"seeds": seeds, "max_trials": MAX_TRIALS, "within": WITHIN, "workloads": {}}
    for model in models:
        table = load_table(model)
        ran = [c for c in table.configs.values() if not c.reason]
        for cap_name, cap in caps[model].items():
            rows = {}
            for answer in ANSWERS:
                scores = [r[3] for r in results if r[0] == model and r[1] == answer and r[2] == cap]
                rows[answer] = _aggregate(scores)
            summary["workloads"].setdefault(model, {"configs": len(table.configs), "ran": len(ran)})[
                cap_name
            ] = {
                "cap_bytes": cap,
                "infeasible": sum(1 for k in table.configs if not table.feasible(k, cap)),
                "within_3pct_configs": sum(
                    1
                    for k, c in table.configs.items()
                    if table.feasible(k, cap)
                    and (c.true_tokens_per_s or 0) >= (1 - WITHIN) * table.optimum(cap)
                ),
                "optimum_tokens_per_s": table.optimum(cap),
                "optimum_config": table.best(cap),
                "strategies": rows,
            }
    return summary


def _aggregate(scores: list[dict[str, Any]]) -> dict[str, Any]:
    reached = [s["trials_to_within"] for s in scores]
    censored = [MAX_TRIALS + 1 if r is None else r for r in reached]
    loose = [
        MAX_TRIALS + 1 if s["trials_to_within_loose"] is None else s["trials_to_within_loose"] for s in scores
    ]
    return {
        "median_trials_to_within": _quantile(censored, 0.5),
        "p90_trials_to_within": _quantile(censored, 0.9),
        "never_within": sum(r is None for r in reached),
        "median_trials_to_within_loose": _quantile(loose, 0.5),
        "p90_trials_to_within_loose": _quantile(loose, 0.9),
        "mean_regret": {n: statistics.fmean(s["regret"][n] for s in scores) for n in REGRET_AT},
        "median_regret": {n: statistics.median(s["regret"][n] for s in scores) for n in REGRET_AT},
        "mean_proposals_per_trial": statistics.fmean(s["proposals"] / max(1, s["trials"]) for s in scores),
    }


def _quantile(values: list[int], q: float) -> float:
    """The q-quantile by linear interpolation (`statistics.quantiles`' inclusive method)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _trials(value: float, cap: int) -> str:
    return f">{cap}" if value > cap else f"{value:g}"


def _label(model: str, case: dict[str, Any]) -> str:
    return f"{model}, " + ("no memory cap" if case["cap_bytes"] is None else f"cap {mib(case['cap_bytes'])}")


def _table_noise(model: str, cap_bytes: int | None) -> str:
    """What the grid's own repeats say about the 3% goal (computed from the committed table)."""
    try:
        noise = load_table(model).noise(cap_bytes)
    except (OSError, SystemExit):
        return ""
    return fill(
        "replay",
        "noise",
        window_spread=100 * noise["window_spread"],
        repeats=noise["repeats"],
        figure_error=100 * noise["figure_error"],
        plausible=noise["plausible_within"],
    )


def render(data: dict[str, Any]) -> str:
    cap, workloads = data["max_trials"], []
    headers = ["strategy", "trials to within 3%: median", "p90", "never", "trials to within 10%: median"]
    headers += ["p90", "mean regret @10", "@20", "@40"]
    for model, workload in data["workloads"].items():
        for case in (workload["none"], workload["third"]):
            rows = [
                [
                    name,
                    *(_trials(row[f"{q}_trials_to_within"], cap) for q in ("median", "p90")),
                    f"{row['never_within']}/{data['seeds']}",
                    *(_trials(row[f"{q}_trials_to_within_loose"], cap) for q in ("median", "p90")),
                    *(pct(row["mean_regret"][str(n)]) for n in REGRET_AT),
                ]
                for name, row in case["strategies"].items()
            ]
            workloads.append(
                fill(
                    "replay",
                    "workload",
                    label=_label(model, case),
                    infeasible=case["infeasible"],
                    configs=workload["configs"],
                    optimum=k(case["optimum_tokens_per_s"]),
                    optimum_config=case["optimum_config"],
                    within=case["within_3pct_configs"],
                    noise=_table_noise(model, case["cap_bytes"]),
                    table=table(headers, rows),
                )
            )
    fields = {"measured_on": measured_on(data), "seeds": data["seeds"], "cap": cap, "cap_plus": cap + 1}
    return fill("replay", "section", workloads="\n\n".join(workloads) + "\n", **fields) + "\n"


def claims(data: dict[str, Any]) -> list[str]:
    cap, out = data["max_trials"], []
    for model, workload in data["workloads"].items():
        for case in (workload["none"], workload["third"]):
            rows = case["strategies"]
            ours, rnd, tpe = rows["autotune+finalists"], rows["random"], rows["tpe"]

            def regret_at(ns: list[str], a: dict[str, Any], b: dict[str, Any]) -> str:
                return ", ".join(
                    f"{n} trials ({pct(a['mean_regret'][n])} vs {pct(b['mean_regret'][n])})" for n in ns
                )

            at = [str(n) for n in REGRET_AT]
            behind = [n for n in at if ours["mean_regret"][n] > tpe["mean_regret"][n]]
            worse = [n for n in at if ours["mean_regret"][n] > rnd["mean_regret"][n]]
            startup = fill("replay", "startup") if worse == ["10"] else ""
            out.append(
                fill(
                    "replay",
                    "claim",
                    label=_label(model, case),
                    ours=_trials(ours["median_trials_to_within"], cap),
                    ours_p90=_trials(ours["p90_trials_to_within"], cap),
                    ours_loose=_trials(ours["median_trials_to_within_loose"], cap),
                    random=_trials(rnd["median_trials_to_within"], cap),
                    tpe=_trials(tpe["median_trials_to_within"], cap),
                    behind_tpe=fill("replay", "behind_tpe", at=regret_at(behind, tpe, ours))
                    if behind
                    else "",
                    regret=fill("replay", "not_below_random", at=regret_at(worse, ours, rnd), startup=startup)
                    if worse
                    else fill("replay", "below_random"),
                )
            )
    return out
