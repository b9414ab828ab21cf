"""The search seen through rich: the live view (`RichReporter`), a trial's line, the trials and
time tables, the answer. The CLI renders through it, and so may a script that calls
`autotune.search` or `autotune.tune` (``with autotune.RichReporter() as reporter:``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.answer.model import NO_TRIAL
from autotune.progress import (
    PHASE_NAMES,
    STAGE_NAMES,
    Reporter,
    SearchHeader,
    TrialSummary,
    describe_params,
    format_bytes,
    format_rate,
    format_value,
    short_name,
)
from autotune.store import outcomes

# A terminal's width where there is one; piped output (a file, grep, another program) is not
# wrapped: a table takes its natural width and a line stays one line.
PIPED_WIDTH = 1_000_000
console = Console(width=None if sys.stdout.isatty() else PIPED_WIDTH, soft_wrap=not sys.stdout.isatty())


def trial_line(t: TrialSummary) -> str:
    head = f"trial {t.number:>3}  {describe_params(t.params)}"
    if t.reason == outcomes.UNAVAILABLE:
        return f"{head}  [dim]skipped: {t.message}[/]"
    if t.reused:
        return f"{head}  [dim]{t.message}[/]"
    if t.reason in (outcomes.OOM_PREDICTED, outcomes.OVER_ESTIMATE, outcomes.UNUSED_PARAMETERS_KNOWN):
        return f"{head}  [yellow]not run[/] [dim]{t.reason}: {t.message}[/]"
    if t.state == "COMPLETE" or t.reason == outcomes.OVER_MEMORY_CAP:
        ci = f" ±{100 * t.rel_ci_halfwidth:.1f}%" if t.rel_ci_halfwidth is not None else ""
        verdict = "[green]ok[/]" if t.state == "COMPLETE" else "[red]over the memory cap[/]"
        if t.reason == outcomes.WHOLE_RUN_OVER_CAP:
            verdict = f"[red]whole run over the memory cap[/] [dim]{t.message}[/]"
        return (
            f"{head}  [bold]{format_rate(t.tokens_per_s)} tok/s[/]{ci}  "
            f"{format_rate(t.samples_per_s)} samples/s  "
            f"peak {format_bytes(t.peak_memory_bytes)}{_estimate_text(t)}{_compile_text(t)}  {verdict}"
            f"{_promotion_text(t)}"
        )
    return f"{head}  [yellow]{t.state.lower()}[/] [dim]{t.reason}: {t.message}[/]"


def _compile_text(t: TrialSummary) -> str:
    """How long a compiled trial compiled, and whether the study's compile cache served it."""
    cache = t.compile.cache
    if cache is None:
        return ""
    return f"  compile {float(t.compile.seconds or 0.0):.1f} s (cache {cache})"


def _promotion_text(t: TrialSummary) -> str:
    """A window that ended at the promotion line (`MeasureSettings.promote_ratio`): why it is short."""
    behind = t.screening.not_promoted
    if not behind:
        return ""
    best = format_rate(behind["reference_tokens_per_s"])
    return (
        f"  [dim]window ended after {behind['steps']} steps: clearly under "
        f"{behind['promote_ratio']:g}x the best measured {best} tok/s[/]"
    )


def _estimate_text(t: TrialSummary) -> str:
    estimate, error = t.memory.estimate_bytes, t.memory.estimate_error
    if estimate is None or error is None:
        return ""
    source = t.memory.estimated_from_trials
    trials = f" from trial{'s' if len(source) > 1 else ''} {', '.join(map(str, source))}" if source else ""
    return f" (est. {format_bytes(estimate)}{trials}, {100 * error:+.0f}%)"


def estimate_summary(trials: list[TrialSummary]) -> str | None:
    """Mean and worst relative error of the memory estimate over trials that measured a peak, and
    over those of them estimated from earlier trials' peaks."""
    measured = [t for t in trials if t.memory.estimate_error is not None and not t.reused]
    if not measured:
        return None

    def errors(group: list[TrialSummary]) -> tuple[float, float]:
        values = [abs(float(t.memory.estimate_error or 0.0)) for t in group]
        return 100 * sum(values) / len(values), 100 * max(values)

    mean, worst = errors(measured)
    text = (
        f"memory estimate vs measured peak over {len(measured)} trials: mean |error| {mean:.1f}%, "
        f"worst {worst:.1f}%"
    )
    from_peaks = [t for t in measured if t.memory.estimated_from_trials]
    if from_peaks and len(from_peaks) < len(measured):
        mean, worst = errors(from_peaks)
        text += f" ({len(from_peaks)} from earlier trials' peaks: mean {mean:.1f}%, worst {worst:.1f}%)"
    return text


def trials_table(
    trials: list[TrialSummary],
    title: str,
    limit: int | None = 10,
    remeasured: Mapping[int, float] | None = None,
    baseline_like: Collection[int] = (),
) -> Table:
    """The trials, one row each: their knobs, the search window's figures and, for the finalists
    (`remeasured`: trial number -> re-measured median tokens/s), the re-measured figure beside
    it. The re-measured trials come first, in the order their re-measurement put them. Trials in
    `baseline_like` ran the baseline's own configuration: their state says so. A RUNNING trial read
    as interrupted (`autotune.store.trials.orphaned_records`) says its owner is gone."""
    remeasured = dict(remeasured or {})
    first = sorted((t for t in trials if t.number in remeasured), key=lambda t: -remeasured[t.number])
    trials = [*first, *(t for t in trials if t.number not in remeasured)]
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    knob_names = list(dict.fromkeys(k for t in trials for k in t.params))
    for name in knob_names:
        table.add_column(short_name(name))
    table.add_column("tok/s", justify="right")
    table.add_column("±", justify="right")
    if remeasured:
        table.add_column("re-measured", justify="right")
    table.add_column("samples/s", justify="right")
    table.add_column("peak mem", justify="right")
    with_mfu = any(t.measurement.mfu is not None for t in trials)
    if with_mfu:
        table.add_column("MFU", justify="right")
    table.add_column("state")
    for t in trials[:limit] if limit else trials:
        if t.reused:
            state = f"reused #{t.duplicate_of}"
        elif t.state == "RUNNING" and t.reason == outcomes.INTERRUPTED:  # a listing's orphaned trial
            state = "interrupted (owner gone)"
        else:
            state = "ok" if t.state == "COMPLETE" else f"{t.state.lower()} ({t.reason})"
            if t.number in baseline_like:
                state += " (= baseline)"
        table.add_row(
            str(t.number),
            *(format_value(t.params.get(k, "-")) for k in knob_names),
            format_rate(t.tokens_per_s),
            f"{100 * t.rel_ci_halfwidth:.1f}%" if t.rel_ci_halfwidth is not None else "-",
            *([format_rate(remeasured.get(t.number))] if remeasured else []),
            format_rate(t.samples_per_s),
            format_bytes(t.peak_memory_bytes),
            *([_percent(t.measurement.mfu)] if with_mfu else []),
            state,
        )
    return table


def _percent(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def time_breakdown_table(breakdown: dict[str, Any]) -> Table:
    """A study's ``time_breakdown`` (`autotune.driver.accounting`): seconds and share per phase,
    then the wall-clock seconds of each stage."""
    slots = int(breakdown.get("slots", 1))
    wall_s = float(breakdown.get("wall_s", 0.0))
    share = float(breakdown.get("measured_share", 0.0))
    over = f" x {slots} slots" if slots > 1 else ""
    title = f"Time of the last search: {wall_s:.1f} s{over}, {100 * share:.0f}% of it measured"
    table = Table(title=title, title_justify="left")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    total_s = wall_s * slots
    for key, seconds in (breakdown.get("phases") or {}).items():
        percent = f"{100 * seconds / total_s:.0f}%" if total_s > 0 else "-"
        table.add_row(PHASE_NAMES.get(key, key), f"{seconds:.1f}", percent)
    for key, seconds in (breakdown.get("stages") or {}).items():
        table.add_row(f"[dim]stage: {STAGE_NAMES.get(key, key)}[/dim]", f"[dim]{seconds:.1f}[/dim]", "")
    return table


def no_feasible_trial_line(trials: Any) -> str:
    """What a search with no feasible trial answers: when screening stopped every trained trial
    against a faster reference (most often the baseline), that the defaults are the answer."""
    from autotune.store.outcomes import SCREENED_OUT

    trained = [t for t in trials if t.trained]
    screened = [t for t in trained if t.reason == SCREENED_OUT]
    if trained and len(screened) == len(trained):
        reference = max(float(t.screening.reference_tokens_per_s or 0) for t in screened)
        ratio = float(screened[0].screening.ratio or 0.5)
        return (
            f"[yellow]no feasible trial[/]: every trial was screened out, under {ratio:g}x the "
            f"{format_rate(reference)} tok/s already measured (the baseline's, when measured): keep the "
            "defaults, or search with --screen-ratio 0 to measure every trial in full"
        )
    return "[yellow]no feasible trial[/]: see the reasons above"


class RichReporter(Reporter):
    """The live view of a search (the CLI's, and a script's): a bar over trials, a bar over the
    running trial's steps, a line per trial, the answer at the end."""

    def __init__(self, out: Console | None = None) -> None:
        self.console = out or console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._trials_task: TaskID | None = None
        self._steps_task: TaskID | None = None
        self._trial_number = -1

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def on_search_start(self, header: SearchHeader) -> None:
        device = header.device
        device_text = (
            f"{device['name']} x{device['count']} ({format_bytes(device['memory_bytes'])})"
            if device["device"] == "cuda"
            else f"CPU ({format_bytes(device['memory_bytes'])} RAM)"
        )
        lines = [
            f"[bold]autotune[/] study [cyan]{header.study}[/] in {header.storage}",
            f"model {header.model} ({header.task}), seq len {header.seq_len}, space {header.space}",
            f"device {device_text}, memory cap {header.memory_cap or 'none'}",
            f"budget {header.budget} trials: {header.finished} done, {header.to_run} to run",
        ]
        lines += [f"  {note}" for note in header.space_notes]
        unavailable = header.not_searched
        if unavailable:
            lines.append(f"  not searched, cannot run here ({len(unavailable)}):")
            lines += [f"    {item}" for item in unavailable]
        for line in lines:
            self.console.print(line, highlight=False, markup=line.startswith("[bold]"))
        if header.to_run:
            self._trials_task = self.progress.add_task("trials", total=header.to_run)

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        if self._steps_task is not None:
            self.progress.remove_task(self._steps_task)
        self._trial_number = number
        self._steps_task = self.progress.add_task(f"trial {number} warm-up", total=None)

    def on_step(self, phase: str, step: int, step_s: float) -> None:
        if self._steps_task is None:
            return
        label = "warm-up" if phase == "warmup" else "measuring"
        self.progress.update(
            self._steps_task, description=f"trial {self._trial_number} {label}", completed=step
        )

    def on_remeasure(
        self, number: int, round_number: int, tokens_per_s: float | None, error: str | None
    ) -> None:
        if self._steps_task is not None:
            self.progress.remove_task(self._steps_task)
            self._steps_task = None
        result = f"{format_rate(tokens_per_s)} tok/s" if error is None else f"failed: {error}"
        who = "baseline" if number == -1 else "baseline again (A/A)" if number < 0 else f"trial {number}"
        self.console.print(f"  re-measure round {round_number}: {who}  {result}", highlight=False)

    def on_note(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def on_trial_end(self, trial: TrialSummary) -> None:
        if self._steps_task is not None:
            self.progress.remove_task(self._steps_task)
            self._steps_task = None
        if self._trials_task is not None:
            self.progress.advance(self._trials_task)
        self.console.print(trial_line(trial), highlight=False, soft_wrap=True)

    def on_search_end(self, result: Any) -> None:
        self.progress.stop()
        if not result.trials:
            self.console.print("no finished trials")
            return
        self.console.print()
        title = f"Top trials of {result.study.study_name}"
        table = trials_table(
            result.trials, title, remeasured=result.remeasured, baseline_like=result.baseline_like
        )
        self.console.print(table)
        print_answer(self.console, result)


def print_answer(out: Console, result: Any, *, time_line: bool = True, config_json: bool = True) -> None:
    """The study's `Answer` (``result.answer``): the memory estimate's error, the best measured
    trial and the finalists' race, then the answer as every ``autotune export`` format states it
    (its verdict, the configuration handed back, its figures with their intervals, the alternative
    beside it, its loss and predicted run, the search's time, its changes to the training math)
    and, with `config_json`, the config itself: what `autotune export --format json` writes. The
    end of a search and ``autotune show`` print the same answer."""
    from autotune.export.config import export_config
    from autotune.export.words import answer_lines

    summary = estimate_summary(result.trials)
    if summary:
        out.print(summary, highlight=False)
    best = result.best
    if best is not None:
        out.print(
            f"\n[bold]best measured[/]: trial {best.number} ({describe_params(best.params)}), "
            f"{format_rate(best.tokens_per_s)} tok/s in the search, "
            f"peak {format_bytes(best.peak_memory_bytes)}",
            highlight=False,
            soft_wrap=True,
        )
    race = result.race
    if race:
        out.print(f"[bold]re-measured[/]: {race}", highlight=False, soft_wrap=True)
    if result.answer.rule == NO_TRIAL:
        out.print(no_feasible_trial_line(result.trials), highlight=False, soft_wrap=True)
    if result.answer.choice is None:
        return
    config = export_config(result.study, result.answer)
    for line in answer_lines(config, time_line=time_line):
        bold = (
            line.split(":", 1)[0] if line.startswith(("answer:", "use:", "expected:", "alternative")) else ""
        )
        text = f"[bold]{escape(bold)}[/]{escape(line[len(bold) :])}" if bold else escape(line)
        out.print(text, highlight=False, soft_wrap=True)
    if config_json:
        pasted = {"training_args": config["training_args"], "model_kwargs": config["model_kwargs"]}
        if config.get("peft"):  # the adapter, as peft loads it (`LoraConfig(**...)`)
            pasted["peft"] = config["peft"]
        out.print_json(json.dumps(pasted))
