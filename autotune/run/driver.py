"""`search()`: one call from a run configuration to a finished study.

cli -> config -> plan (space, workload, hardware) -> driver (Trainer.hyperparameter_search, optuna) -> store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from autotune.config import RunConfig
from autotune.errors import StoreError
from autotune.measure.callback import ThroughputCallback
from autotune.measure.memory import frozen_heap
from autotune.measure.ranks import distributed, from_rank_zero, is_rank_zero
from autotune.measure.stats import rank_finalists, verdict
from autotune.progress import Reporter, TrialSummary, describe_params
from autotune.run.plan import (
    Plan,
    base_training_args,
    baseline_values,
    data_notes,
    plan_search,
    trial_world_size,
)
from autotune.study.fingerprint import check_resume, fingerprint
from autotune.study.store import (
    FINISHED,
    best_trial,
    fail_interrupted_trials,
    measured_count,
    ranked_trials,
    speedup_over_baseline,
)


@dataclass
class SearchResult:
    """What a search leaves behind.

    Attributes:
        study: the optuna study (in the store, readable by optuna's CLI and dashboard).
        config: the run configuration used.
        trials: every finished trial of the study, best first.
        best: the best completed trial, or None if none completed.
        ran: how many trials this call measured (0 when the budget was already spent).
    """

    study: optuna.Study
    config: RunConfig
    trials: list[TrialSummary]
    best: TrialSummary | None
    ran: int

    @property
    def speedup_over_baseline(self) -> float | None:
        """The winner's throughput over the baseline's (see `autotune.study.store.speedup_over_baseline`)."""
        compared = speedup_over_baseline(self.study, self.best) if self.best is not None else None
        return compared[0] if compared else None

    @property
    def verdict(self) -> str | None:
        """How sure the answer is, when the finalists were re-measured."""
        winner = self.study.user_attrs.get("winner")
        return winner["verdict"] if winner and self.best and winner["number"] == self.best.number else None

    def best_config(self) -> dict[str, Any]:
        """The best trial as ``{"training_args": {...}, "model_kwargs": {...}}``."""
        if self.best is None:
            return {}
        return {
            "training_args": dict(self.best.attrs.get("training_args", {})),
            "model_kwargs": dict(self.best.attrs.get("model_kwargs", {})),
        }


def search(
    config: RunConfig | None = None,
    *,
    reporter: Reporter | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    enqueue: Sequence[Mapping[str, Any]] = (),
    debug: bool = False,
    **overrides: Any,
) -> SearchResult:
    """Run (or continue) a throughput search and return the study's result.

    Args:
        config: the run configuration; keyword `overrides` replace its fields
            (``search(model="tiny-llama", trials=4)`` works without a config).
        reporter: receives progress events; the default prints nothing.
        callbacks: extra Trainer callbacks added to every trial.
        enqueue: knob values to run first (optuna `enqueue_trial`), e.g. a baseline.
        debug: keep tracebacks of failed trials in their user attrs.

    Raises:
        UsageError: a bad space, model, flag value or storage URL.
        StoreError: the store cannot be opened, or the study is not a throughput study.
    """
    config = dataclasses.replace(config or RunConfig(), **overrides)
    reporter = reporter or Reporter()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun / accelerate launch
        from autotune.run.group import search_in_group

        return search_in_group(config, reporter, callbacks, enqueue, debug)
    from autotune.run.launcher import start_forkserver_for

    start_forkserver_for(config)  # its imports overlap this process's planning
    plan = plan_search(config)
    with quiet_libraries():
        study, done_before, remaining = open_study(plan, reporter, enqueue)
        if remaining:
            _run_trials(plan, study, remaining, reporter, callbacks, debug)
    return finish(study, config, done_before, reporter)


def open_study(
    plan: Plan, reporter: Reporter, enqueue: Sequence[Mapping[str, Any]] = ()
) -> tuple[optuna.Study, int, int]:
    """Create (or continue) the plan's study: describe it, check its fingerprint, fail the trials
    of dead processes, tell the reporter. Returns the study, the measured trials it holds and how
    many more the budget asks for.

    Raises:
        UsageError: the stored study was measured differently.
        StoreError: the study is not a throughput study.
    """
    study = optuna.create_study(
        storage=plan.storage, study_name=plan.study_name, direction="maximize", load_if_exists=True
    )
    _check_direction(study)
    current = fingerprint(plan)
    stored = study.user_attrs.get("fingerprint")
    if stored is None:
        _describe_study(study, plan, current)
    else:
        for field in check_resume(plan.study_name, stored, current, plan.config.allow_mismatch):
            reporter.on_note(f"continuing although {field} differs (--allow-mismatch {field})")
    interrupted = fail_interrupted_trials(study)
    if interrupted:
        reporter.on_note(f"trial(s) {', '.join(map(str, interrupted))} were interrupted: marked failed")
    done_before = measured_count(study)
    remaining = max(0, plan.config.trials - done_before)
    reporter.on_search_start(_header(plan, done_before, remaining))
    if remaining:
        for params in enqueue:
            study.enqueue_trial(dict(params), skip_if_exists=True)
    return study, done_before, remaining


def finish(study: optuna.Study, config: RunConfig, done_before: int, reporter: Reporter) -> SearchResult:
    """The search's result, told to the reporter."""
    ranked = ranked_trials(study)
    result = SearchResult(study, config, ranked, best_trial(study), measured_count(study) - done_before)
    reporter.on_search_end(result)
    return result


def _run_trials(
    plan: Plan,
    study: optuna.Study,
    budget: int,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback],
    debug: bool,
) -> None:
    """Run trials until `budget` more are measured, then re-measure the best few to pick the winner.

    Trials that need no training (unavailable here, duplicates, predicted out of memory) cost
    milliseconds and do not count against the budget, so trials are asked for until the budget is
    met; a sampler that keeps proposing only those is stopped after a bound (`_stop_reason`).
    By default every trial and measurement runs in a fresh worker process (`Supervisor`);
    ``isolation="none"`` runs them in this process; ``backend="ray"`` runs the trials in Ray actors.
    """
    target = measured_count(study) + budget
    if plan.config.isolation == "none":
        _run_in_process(plan, study, target, reporter, callbacks, debug)
        return
    from autotune.run.supervisor import Supervisor

    if plan.config.backend == "ray":  # imported first: a missing Ray is said before any measurement
        from autotune.run.ray_search import run_ray_trials

    with Supervisor(plan, reporter, callbacks, debug, plan.config.workers) as supervisor:
        if len(supervisor.slots) > 1 and not plan.hardware.cuda:
            reporter.on_note(
                f"{len(supervisor.slots)} workers share this CPU's cores and memory bandwidth: "
                "each trial measures its share of the machine"
            )
        if plan.config.measure_baseline and "baseline" not in study.user_attrs:
            _measure_baseline(supervisor.measure, plan, study, reporter)
        if plan.config.backend == "ray":  # trials in Ray actors; baseline and finalists as ever
            run_ray_trials(plan, study, target, reporter, callbacks, debug, _stop_reason(plan, study, target))
        else:
            supervisor.run_search(target, _stop_reason(plan, study, target))
        _remeasure_finalists(supervisor.measure, plan, study, reporter)


def _run_in_process(
    plan: Plan,
    study: optuna.Study,
    target: int,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback],
    debug: bool,
) -> None:
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="autotune-", dir=plan.config.output_dir) as scratch,
    ):
        trainer = build_trainer(plan, scratch, reporter, callbacks, debug)
        stack.enter_context(frozen_heap())
        # Under a launcher every rank runs this: what is read from the study is rank 0's reading.
        if from_rank_zero(plan.config.measure_baseline and "baseline" not in study.user_attrs):
            _measure_baseline(trainer.measure_config, plan, study, reporter)
        _search_until_budget(trainer, plan, study, target, reporter)
        _remeasure_finalists(trainer.measure_config, plan, study, reporter)


Measure = Callable[..., dict[str, Any]]  # (params, number, verbatim=...) -> measurements


def build_trainer(
    plan: Plan,
    output_dir: str,
    reporter: Reporter,
    callbacks: Sequence[TrainerCallback] = (),
    debug: bool = False,
) -> Any:
    """The `AutotuneTrainer` that runs a plan's trials (and benchmarks' measurements)."""
    from autotune.run.trainer import AutotuneTrainer  # imports Trainer machinery only when trials run

    return AutotuneTrainer(
        plan=plan,
        base_args=base_training_args(plan, output_dir),
        measurement=ThroughputCallback(plan.config.measure, plan.workload.seq_len, reporter),
        reporter=reporter,
        callbacks=callbacks,
        debug=debug,
    )


def _measure_baseline(measure: Measure, plan: Plan, study: optuna.Study, reporter: Reporter) -> None:
    """Measure the baseline once per study, before the search: the speedup is stated against it."""
    values = baseline_values(plan)
    reporter.on_note(f"measuring the baseline: {describe_params(values)}")
    try:
        measured = measure(values, -1, verbatim=True)
    except Exception as exc:  # a baseline that fails is a fact to report, not a reason to stop
        if distributed():
            raise  # unless one rank alone failed and the others wait for it: end the group
        study.set_user_attr("baseline", {"params": values, "error": f"{type(exc).__name__}: {exc}"[:300]})
        reporter.on_note(f"the baseline failed: {type(exc).__name__}: {exc}"[:300])
        return
    if not is_rank_zero():
        return
    study.set_user_attr(
        "baseline",
        {
            "params": values,
            "tokens_per_s": measured["tokens_per_s"],
            "samples_per_s": measured["samples_per_s"],
            "peak_memory_bytes": measured["peak_memory_bytes"],
            "rel_ci_halfwidth": measured["rel_ci_halfwidth"],
        },
    )
    peak_mib = measured["peak_memory_bytes"] / 2**20
    reporter.on_note(f"baseline: {measured['tokens_per_s'] / 1000:.1f}k tok/s, peak {peak_mib:.0f} MiB")


def _stop_reason(plan: Plan, study: optuna.Study, target: int) -> Callable[[], str | None]:
    """Why a search should start no more trials although its budget is not met, or None: the
    sampler keeps proposing trials that need no training, or every combination was tried."""
    max_skips = max(20, 5 * (target - measured_count(study)))
    skipped_before = _skipped_count(study)

    def reason() -> str | None:
        skipped = _skipped_count(study) - skipped_before
        if skipped >= max_skips:
            return f"stopped after {skipped} skipped trials: few combinations of this space run here"
        if distinct_params(study) >= plan.space.grid_size():
            return f"stopped: all {plan.space.grid_size()} combinations of the space were tried"
        return None

    return reason


def _search_until_budget(
    trainer: Any, plan: Plan, study: optuna.Study, target: int, reporter: Reporter
) -> None:
    stop = _stop_reason(plan, study, target)
    while True:
        # Rank 0 reads the study and decides; under a launcher the other ranks follow, one trial
        # at a time (the Trainer sends them each trial's values).
        decision: tuple[str, Any] = ("done", None)
        if is_rank_zero() and (missing := target - measured_count(study)) > 0:
            why = stop()
            seed = plan.config.seed + len(study.get_trials(deepcopy=False))
            decision = ("stop", why) if why is not None else ("run", (1 if distributed() else missing, seed))
        kind, detail = from_rank_zero(decision)
        if kind == "done":
            return
        if kind == "stop":
            reporter.on_note(detail)
            return
        with contextlib.suppress(optuna.TrialPruned):  # how a skipped trial ends on other ranks
            hyperparameter_search(trainer, plan, *detail)


BASELINE = -1  # the baseline's number among the finalists


def _remeasure_finalists(measure: Measure, plan: Plan, study: optuna.Study, reporter: Reporter) -> None:
    """Re-measure the best few trials, and the baseline, in interleaved rounds (A B C A B C ...)
    and declare the winner by median: a single window's luck (or a neighbour's noise) does not pick
    the answer, and the speedup over the baseline is measured under the same conditions."""
    candidates = [
        t for t in ranked_trials(study) if t.attrs.get("feasible") and "duplicate_of" not in t.attrs
    ]
    finalists = candidates[: plan.config.finalists]
    baseline = study.user_attrs.get("baseline") or {}
    contestants: dict[int, tuple[dict[str, Any], bool]] = {f.number: (f.params, False) for f in finalists}
    if baseline.get("tokens_per_s") and finalists:
        contestants[BASELINE] = (baseline["params"], True)
    contestants = from_rank_zero(contestants)  # every rank of a launched group measures the same
    if len(contestants) < 2:
        return
    rounds = plan.config.finalist_rounds
    named = ", ".join("the baseline" if n == BASELINE else str(n) for n in contestants)
    reporter.on_note(f"re-measuring trials {named} in {rounds} interleaved rounds")
    samples: dict[int, list[float]] = {number: [] for number in contestants}
    for round_number in range(1, rounds + 1):
        for number, (params, verbatim) in contestants.items():
            try:
                measured = measure(params, number, verbatim=verbatim)
            except Exception as exc:  # a finalist that fails now is reported, not fatal
                if distributed():
                    raise  # unless one rank alone failed and the others wait for it
                reporter.on_remeasure(number, round_number, None, f"{type(exc).__name__}: {exc}")
                continue
            samples[number].append(measured["tokens_per_s"])
            reporter.on_remeasure(number, round_number, measured["tokens_per_s"], None)
    ranked = rank_finalists(samples)
    trials_ranked = [f for f in ranked if f.number != BASELINE]
    if not trials_ranked or not is_rank_zero():
        return
    by_number = {f.number: f for f in finalists}
    winner = trials_ranked[0]
    text = verdict(trials_ranked, describe_params(by_number[winner.number].params))
    remeasured_baseline = next((f for f in ranked if f.number == BASELINE), None)
    if remeasured_baseline is not None:
        study.set_user_attr("baseline", {**baseline, "remeasured_median": remeasured_baseline.median})
        if remeasured_baseline.median >= winner.median:
            text += "; the baseline measured as fast or faster: keep it"
    study.set_user_attr("finalists", [f.to_dict() for f in ranked])
    study.set_user_attr(
        "winner", {"number": winner.number, "median_tokens_per_s": winner.median, "verdict": text}
    )


def distinct_params(study: optuna.Study) -> int:
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    return len({tuple(sorted(t.params.items())) for t in finished})


def _skipped_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False)) - measured_count(study)


def hyperparameter_search(trainer: Any, plan: Plan, n_trials: int, seed: int) -> None:
    """Run `n_trials` trials through the Trainer's own optuna search on the plan's study."""
    try:
        trainer.hyperparameter_search(
            hp_space=plan.space.hp_space,
            n_trials=n_trials,
            direction="maximize",
            backend="optuna",
            storage=plan.storage,
            study_name=plan.study_name,
            load_if_exists=True,
            # Seeded by the trials already stored, so a resumed study (or the next round) does
            # not replay the random start-up suggestions of the first.
            # constant_liar: trials running elsewhere (other workers) count as bad guesses, so
            # concurrent proposals spread out instead of repeating a running one.
            sampler=optuna.samplers.TPESampler(seed=seed, constant_liar=True),
        )
    except ValueError:
        # The Trainer asks the study for its best trial at the end, which raises when no trial
        # completed; every trial is already stored with its reason, so that is a result too.
        study = optuna.load_study(study_name=plan.study_name, storage=plan.storage)
        if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            raise


def _check_direction(study: optuna.Study) -> None:
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise StoreError(
            f"study {study.study_name!r} exists but minimizes its objective: it is not an autotune study",
            "pick another --study name",
        )


def _describe_study(study: optuna.Study, plan: Plan, fingerprint: dict[str, Any]) -> None:
    """Store what the study measures (once, at creation), for inspection, export and resume."""
    study.set_user_attr("fingerprint", fingerprint)
    study.set_user_attr("run_config", plan.config.to_dict())
    study.set_user_attr("workload", plan.workload.describe())
    study.set_user_attr("space", plan.space.describe())
    study.set_user_attr("memory_cap", plan.config.memory_cap)
    study.set_user_attr("base_args", plan.base_args)
    study.set_user_attr("device", plan.hardware.to_dict())
    study.set_user_attr("not_searched", plan.not_searched)


def _header(plan: Plan, done_before: int, remaining: int) -> dict[str, Any]:
    space = plan.space
    return {
        "model": plan.workload.name,
        "task": plan.workload.task,
        "seq_len": plan.workload.seq_len,
        "space": f"{space.name} ({len(space.knobs)} knobs, {space.grid_size()} combinations)",
        "space_notes": [*space.notes, *data_notes(plan, trial_world_size(plan.config))],
        "unavailable": plan.not_searched,
        "storage": plan.config.storage_display,
        "study": plan.study_name,
        "budget": plan.config.trials,
        "finished": done_before,
        "to_run": remaining,
        "device": plan.hardware.to_dict(),
        "memory_cap": plan.config.memory_cap,
    }


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence optuna's and transformers' per-trial INFO logs; reporters show trials instead."""
    optuna_level = optuna.logging.get_verbosity()
    hf_level = hf_logging.get_verbosity()
    optuna.logging.set_verbosity(logging.WARNING)
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        optuna.logging.set_verbosity(optuna_level)
        hf_logging.set_verbosity(hf_level)
