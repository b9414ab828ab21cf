"""`autotune studies`, `autotune show` and `autotune resume`: the store, read and continued."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from autotune.cli._options import (
    DebugOpt,
    FormatOpt,
    StorageOpt,
    StoredStudyOpt,
    StoreRetryOpt,
    StudyArg,
    apply_store_retry,
    run_option,
    study_named,
)


def studies_command(storage: StorageOpt = None, output_format: FormatOpt = "table") -> None:
    """List the studies in a store: model, hardware, trials measured / budget, best tokens/s, state."""
    from rich.table import Table

    from autotune.answer.race import best_trial
    from autotune.cli._render import emit
    from autotune.options import RunConfig
    from autotune.progress import format_rate
    from autotune.records import read_study
    from autotune.store.session import StudyStore, study_names
    from autotune.store.storage import open_storage
    from autotune.store.trials import measured_count, orphaned_trials, running_trials
    from autotune.view import console

    config = RunConfig(storage=storage)
    store = open_storage(config.storage_url)
    names = study_names(store)
    if not names and output_format == "table":
        console.print(f"no studies in {config.storage_display}", highlight=False)
        return
    table = Table(title=f"Studies in {config.storage_display}", title_justify="left")
    for column in ("study", "model", "seq len", "hardware", "measured / budget", "best tok/s", "state"):
        table.add_column(column)
    rows = []
    for name in names:
        study = StudyStore.load(store, name)
        record = read_study(study)
        workload, device = record.workload, record.device
        budget = record.run_config.get("trials")
        done = measured_count(study)
        best = best_trial(study)
        # a trial left running by a process that is gone is not the study running
        running = len(running_trials(study)) > len(orphaned_trials(study))
        state = "running" if running else ("done" if budget is not None and done >= budget else "incomplete")
        rows.append(
            {
                "study": name,
                "model": workload.get("model"),
                "seq_len": workload.get("seq_len"),
                "device": device.get("name") if device else None,
                "device_count": device.get("count", 1) if device else None,
                "measured": done,
                "budget": budget,
                "best_tokens_per_s": best.tokens_per_s if best else None,
                "state": state,
            }
        )
        table.add_row(
            name,
            str(workload.get("model", "-")),
            str(workload.get("seq_len", "-")),
            f"{device.get('name', '-')} x{device.get('count', 1)}" if device else "-",
            f"{done} / {budget if budget is not None else '-'}",
            format_rate(best.tokens_per_s) if best else "-",
            state,
        )
    if output_format != "table":
        emit({"storage": config.storage_display, "studies": rows}, output_format)
        return
    console.print(table)


# `show`'s rows by default: a study of thousands of trials printed whole is slow to print and to read.
SHOW_ROWS = 50


def show_command(
    study_argument: StudyArg = None,
    study: StoredStudyOpt = None,
    storage: StorageOpt = None,
    feasible: Annotated[bool, typer.Option("--feasible", help="Only feasible completed trials.")] = False,
    failed: Annotated[
        bool, typer.Option("--failed", help="Only trials that failed, were skipped or infeasible.")
    ] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="Show at most this many rows, best first; 0 shows all.")
    ] = SHOW_ROWS,
    output_format: FormatOpt = "table",
) -> None:
    """Show a study's trials, best first (knob values, tokens/s, samples/s, peak memory, state,
    reason), then its answer as the search gave it and where the search's time went. A trial left
    running by a process that is gone is listed as interrupted (owner gone)."""
    study = study_named("show", study, study_argument)
    from autotune.answer.choices import same_as_baseline
    from autotune.answer.decide import study_answer
    from autotune.answer.race import best_trial
    from autotune.driver.result import SearchResult
    from autotune.errors import UsageError
    from autotune.options import RunConfig
    from autotune.records import read_study
    from autotune.store.session import StudyStore
    from autotune.store.trials import orphaned_records, ranked_trials
    from autotune.view import console, print_answer, time_breakdown_table, trials_table

    if feasible and failed:
        raise UsageError("--feasible and --failed exclude each other", "pass one of them")
    config = RunConfig(storage=storage)
    loaded = StudyStore.open(config.storage_url, study)
    everything = ranked_trials(loaded)
    # a trial still RUNNING whose owner is gone is listed as interrupted; the store is not written
    trials = everything + orphaned_records(loaded)
    if feasible:
        trials = [t for t in trials if t.state == "COMPLETE" and t.is_feasible]
    if failed:
        trials = [t for t in trials if t.state != "COMPLETE" or not t.is_feasible]
    record = read_study(loaded)
    remeasured = record.remeasured_tokens_per_s()
    itself = [t.number for t in trials if same_as_baseline(record, t)]
    if output_format != "table":
        from autotune.cli._render import emit

        shown = trials[:limit] if limit else trials
        answer = study_answer(loaded) if everything else None
        emit(
            {
                "study": study,
                "trials": [_trial_facts(t, remeasured, itself) for t in shown],
                "more_trials": len(trials) - len(shown),
                "answer": answer.to_dict() if answer is not None else None,
                "time_breakdown": record.time_breakdown,
            },
            output_format,
        )
        return
    console.print(
        trials_table(
            trials,
            f"Trials of {study} ({len(trials)})",
            limit=limit,
            remeasured=remeasured,
            baseline_like=itself,
        )
    )
    for trial in trials[:limit] if limit else trials:
        if trial.message and trial.state != "COMPLETE":
            console.print(f"  #{trial.number} {trial.reason}: {trial.message}", highlight=False, markup=False)
    if limit and len(trials) > limit:
        hidden = len(trials) - limit
        console.print(f"  {hidden} more trials not shown (--limit 0 shows them all)", highlight=False)
    if everything:
        result = SearchResult(loaded, config, everything, best_trial(loaded), 0, study_answer(loaded))
        print_answer(console, result, time_line=False, config_json=False)
    if breakdown := record.time_breakdown:
        console.print(time_breakdown_table(breakdown))


def _trial_facts(trial: Any, remeasured: dict[int, float], baseline_like: list[int]) -> dict[str, Any]:
    """A trial as `show --format json|yaml` lists it: its knobs, the search window's figures, the
    re-measured median where it was a finalist, and how it ended."""
    from autotune.store import outcomes

    orphaned = trial.state == "RUNNING" and trial.reason == outcomes.INTERRUPTED
    return {
        "number": trial.number,
        "params": dict(trial.params),
        "state": "INTERRUPTED" if orphaned else trial.state,
        "reason": trial.reason,
        "message": trial.message,
        "feasible": trial.is_feasible if trial.state == "COMPLETE" else None,
        "tokens_per_s": trial.tokens_per_s,
        "remeasured_tokens_per_s": remeasured.get(trial.number),
        "samples_per_s": trial.measurement.samples_per_s,
        "peak_memory_bytes": trial.peak_memory_bytes,
        "reused_from": trial.duplicate_of if trial.reused else None,
        "same_as_baseline": trial.number in baseline_like,
    }


def resume_command(
    study_argument: StudyArg = None,
    study: StoredStudyOpt = None,
    storage: StorageOpt = None,
    trials: Annotated[
        int | None, run_option("trials", "A new total budget.", show_default="the stored one")
    ] = None,
    allow_mismatch: Annotated[list[str] | None, run_option("allow_mismatch")] = None,
    store_retry_s: StoreRetryOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Continue a stored study with the run configuration it was started with."""
    study = study_named("resume", study, study_argument)
    apply_store_retry(store_retry_s)
    from autotune.options import RunConfig
    from autotune.store.resumable import stored_run_config

    url = RunConfig(storage=storage).storage_url
    # What the store alone refuses is refused before the training stack's imports (seconds).
    _, _, config = stored_run_config(study, url, trials=trials, allow_mismatch=tuple(allow_mismatch or ()))
    from autotune.driver.search import search
    from autotune.view import RichReporter

    with RichReporter() as reporter:
        search(config, reporter=reporter, debug=debug)
