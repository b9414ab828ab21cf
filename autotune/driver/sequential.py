"""The finalists' rounds as a sequential plan: what the rounds so far hold (`Rounds`), what the
next ones would cost (`Pace`, `planned_rounds`, `within_budget`) and which contestants
the next round measures (`next_round`), for the questions still open (`autotune.driver.questions`).

A question stays open while the rounds' model (`autotune.measure.rounds`) cannot yet place its
ratio on one side of its threshold; more rounds are spent on it only while the budget left could
decide it. The interval an answer states is measured on while it is wider than `CLAIM_HALF_WIDTH`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.driver.questions import Question, could_decide, precision_of, questions_of
from autotune.measure.looks import look_level
from autotune.measure.rounds import RoundsFit, cells_of, fit_rounds
from autotune.measure.stats import t_quantile
from autotune.options import MeasureSettings
from autotune.progress import Reporter
from autotune.records import (
    BASELINE,
    BASELINE_AGAIN,
    FinalistRecord,
    TrialRecord,
)

# The finalists' share of a whole search at most: their budget is this share of the search they
# end (so FINALISTS_SHARE / (1 - FINALISTS_SHARE) of the time spent before them).
FINALISTS_SHARE = 0.30
# The part of the finalists' budget the rounds keep back: what their measurements do not time
# (choosing the finalists, storing the rounds) and the spread of a measurement's cost past the most
# it has cost so far, by which a round the budget just paid for ended past it (an A/A search's
# finalists took 30.1% of the search on an Intel Xeon, benchmarks/RESULTS.md "Decisions").
BUDGET_RESERVE = 0.05
# The warm-up of a round's configuration that compiles nothing: its first step (a fresh process's
# first kernels, allocations and optimizer state) and one more, or the first alone where the
# search's own steps after its first ran at their steady pace (`pace_of`). The search measured it
# already; only compilation needs its steps watched until they stop falling.
ROUND_EAGER_WARMUP_STEPS = 2
# A search's warm-up steps after its first ran "at their steady pace" within this share of it.
STEADY_TOLERANCE = 0.05
# A round's window holds at least this many steps (at most the search's own minimum): what decides
# is the spread across rounds, most of it between processes, so a round buys more with one more
# process per contestant than with longer windows (`sized_rounds`).
ROUND_MIN_STEPS = 2


def finalists_budget_s(spent_s: float) -> float:
    """The finalists' budget after `spent_s` seconds of search: `FINALISTS_SHARE` of the whole,
    however short the search (its first round runs whatever the budget; a search of a few seconds
    gets few rounds, and its answer says how few)."""
    return FINALISTS_SHARE / (1 - FINALISTS_SHARE) * spent_s


def warming_window(settings: MeasureSettings) -> dict[str, Any]:
    """The baseline's first, warming measurement: the steps that warm the process and the machine,
    no more (its figure is said, not stored)."""
    return {
        "min_measure_steps": min(settings.min_measure_steps, ROUND_MIN_STEPS),
        "measure_steps": min(settings.measure_steps, ROUND_MIN_STEPS),
        "max_seconds": settings.max_seconds / 3,
    }


def round_window(
    settings: MeasureSettings,
    pace: Pace,
    fit: RoundsFit | None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """The measurement settings of one finalists' round measurement (`Job.window`): a window of a
    number of steps fixed before it starts, the steps that buy the most precision per second the
    measurement costs (`Pace.steps`, against the rounds' pooled noise where there is one), fewer
    where the finalists' budget leaves fewer window seconds per measurement (`seconds`), never
    under `ROUND_MIN_STEPS`, and never over a third of the search's window.

    The count is fixed, not a stopping rule: a window that may end once its steps agree ends more
    often on a run of fast steps (step times have a floor and a long tail of slow ones), and one cut
    by the seconds left may hold a single step right after the warm-up: one step's noise, and
    nothing of the steady state a user's run spends its time in. The search's `max_seconds` bounds
    it still. A configuration that compiles nothing warms up for its `Pace.warmup_steps`: the
    search has seen it settle."""
    steps = pace.steps(settings, None if fit is None else fit.noise)
    if seconds is not None and pace.step_s > 0:
        steps = max(_least_steps(settings), min(steps, int(seconds / pace.step_s)))
    return {
        "min_measure_steps": steps,
        "measure_steps": steps,
        "max_seconds": settings.max_seconds,
        "eager_settle_steps": min(settings.settle_steps, pace.warmup_steps),
    }


def _least_steps(settings: MeasureSettings) -> int:
    """The fewest steps a round's window holds: `ROUND_MIN_STEPS`, or the search's whole window
    where that is shorter."""
    return max(1, min(ROUND_MIN_STEPS, settings.measure_steps))


def _most_steps(settings: MeasureSettings) -> int:
    """The most steps a round's window holds: a third of the search's window (at least its minimum)."""
    return max(_least_steps(settings), settings.min_measure_steps, math.ceil(settings.measure_steps / 3))


@dataclass(frozen=True)
class Pace:
    """How a configuration runs, from its search window, for planning its rounds' measurements:
    its steady step's seconds (`step_s`), one step's relative spread in throughput (`spread`; None:
    not known), what a measurement of it pays besides its window (`fixed_s`: its set-up, its
    warm-up and starting its process), and the warm-up steps of a round's measurement where it
    compiles nothing (`warmup_steps`)."""

    step_s: float
    spread: float | None
    fixed_s: float
    warmup_steps: int = ROUND_EAGER_WARMUP_STEPS

    def steps(self, settings: MeasureSettings, noise: float | None = None) -> int:
        """The window's steps that make a measurement most precise per second it costs. A
        measurement's variance is the noise between processes plus one step's over the steps
        (``noise^2 + spread^2 / n``), its cost the fixed part plus the steps (``fixed_s + n x
        step_s``); their product is least at ``n = (spread / noise) x sqrt(fixed_s / step_s)``.
        `noise`: the rounds' pooled noise of one measurement (it holds some of the window's own,
        so it asks for no more steps than needed); None, before the rounds have one: taken as
        one step's spread. Between the round's least and most steps (the least where the spread
        or the step is not known)."""
        least, most = _least_steps(settings), _most_steps(settings)
        if not self.spread or self.step_s <= 0:
            return least
        between = noise if noise and noise > 0 else self.spread
        best = self.spread / between * math.sqrt(self.fixed_s / self.step_s)
        return max(least, min(most, math.ceil(best)))

    def cost(self, settings: MeasureSettings) -> float:
        """The wall seconds of one measurement whose window is sized before the rounds have a
        noise figure."""
        return self.fixed_s + self.steps(settings) * self.step_s


# The rounds end here whatever the budget (a search without one: the Python API's own callers).
MAX_ROUNDS = 12
# What starting a measurement's process costs beyond its own set-up and steps (the executor, the
# store), before the rounds have timed one.
PROCESS_START_S = 0.15


@dataclass
class Rounds:
    """The rounds so far: each contestant's scores, positions, throughput and peaks by round, what
    each measurement cost (wall seconds), and the cells the fit left out as disturbed."""

    contestants: dict[int, tuple[dict[str, Any], bool]]  # number -> (params, verbatim)
    looks: int = 1  # the looks the intervals hold over together (`autotune.measure.rounds.look_level`)
    look: int = 1  # the look the last fit is (the first after the rounds asked for)
    scores: dict[int, dict[int, float]] = field(default_factory=dict)
    positions: dict[int, dict[int, int]] = field(default_factory=dict)
    throughput: dict[int, dict[int, float]] = field(default_factory=dict)
    peaks: dict[int, dict[int, int | None]] = field(default_factory=dict)
    costs: dict[int, list[float]] = field(default_factory=dict)
    fit: RoundsFit | None = None

    def add(
        self, number: int, round_number: int, position: int, measured: TrialRecord, score_: float
    ) -> None:
        self.scores.setdefault(number, {})[round_number] = score_
        self.positions.setdefault(number, {})[round_number] = position
        self.throughput.setdefault(number, {})[round_number] = measured.tokens_per_s or 0.0
        self.peaks.setdefault(number, {})[round_number] = measured.peak_memory_bytes

    def refit(self) -> RoundsFit | None:
        self.fit = fit_rounds(cells_of(self.scores, self.positions), looks=self.looks, look=self.look)
        return self.fit

    def records(self) -> list[FinalistRecord]:
        """What the study keeps of each contestant, the fastest first (by the rounds' model, else
        by median score): its rounds, scores, positions, throughput, peaks."""
        measured = [n for n in self.contestants if self.scores.get(n)]
        order = [n for n in (self.fit.ranked() if self.fit is not None else by_median(self.scores)) if n >= 0]
        out = []
        for number in [*order, *(n for n in measured if n not in order)]:
            rounds = sorted(self.scores.get(number, {}))
            out.append(
                FinalistRecord(
                    number=number,
                    tokens_per_s=[self.throughput[number][r] for r in rounds],
                    rounds=rounds,
                    scores=[self.scores[number][r] for r in rounds],
                    peaks=[self.peaks[number][r] for r in rounds],
                    positions=[self.positions[number][r] for r in rounds],
                )
            )
        return out


def by_median(scores: dict[int, dict[int, float]]) -> list[int]:
    return sorted(scores, key=lambda n: -statistics.median(scores[n].values()))


# -- what the rounds cost --------------------------------------------------------------------------


def pace_of(record: TrialRecord, settings: MeasureSettings) -> Pace:
    """A configuration's `Pace` from its search window: its steady step, the spread of its steps,
    and its set-up and warm-up as a round's fresh process pays them again (a round's warm-up steps
    where it compiled nothing, `eager_warmup_steps`, and the excess its search warm-up took over
    steady steps), with starting its process."""
    measured = record.measurement
    step_s = measured.step_time_median_s or measured.step_time_mean_s
    if not step_s and measured.tokens_per_step and record.tokens_per_s:
        step_s = measured.tokens_per_step / record.tokens_per_s
    step_s = step_s or 0.0
    # a round's warm-up steps: its fresh process's first step (a data-loader worker's start, the
    # first kernels, as the search's first step took them), then steady ones; without a first step
    # on record, every step of the search's warm-up beyond steady ones
    steps = eager_warmup_steps(record, step_s)
    eager = min(settings.settle_steps, steps)
    if measured.first_step_s is not None and eager >= 1:
        warmup_s = measured.first_step_s + (eager - 1) * step_s
    else:
        warmup_s = eager * step_s + (measured.warmup_excess_s or 0.0)
    if record.compile.seconds:
        warmup_s = max(warmup_s, measured.warmup_s or 0.0)
    ci, count = measured.rel_ci_halfwidth, measured.measured_steps
    spread = None
    if ci and count and count > 1 and math.isfinite(ci):
        spread = ci * math.sqrt(count) / t_quantile(0.975, count - 1)  # one step's relative spread
    return Pace(step_s, spread, (measured.setup_s or 0.0) + warmup_s + PROCESS_START_S, steps)


def eager_warmup_steps(record: TrialRecord, step_s: float) -> int:
    """The warm-up steps of a round's measurement of `record`'s configuration where it compiles
    nothing: its first step alone where the search's warm-up steps after the first ran at their
    steady pace (within `STEADY_TOLERANCE` of `step_s`, on average), else `ROUND_EAGER_WARMUP_STEPS`
    (a second step still paying for allocations or a data-loader worker's first batches, or a
    warm-up not on record)."""
    measured = record.measurement
    count, first, total = measured.warmup_steps, measured.first_step_s, measured.warmup_s
    if not count or count < 2 or first is None or total is None or step_s <= 0:
        return ROUND_EAGER_WARMUP_STEPS
    later = (total - first) / (count - 1)
    return 1 if later <= step_s * (1 + STEADY_TOLERANCE) else ROUND_EAGER_WARMUP_STEPS


def measurement_cost(number: int, rounds: Rounds, predicted: dict[int, float]) -> float:
    """One measurement of `number`: the most its rounds took (a round that costs more than the
    mean would overrun the budget), else its prediction."""
    spent = rounds.costs.get(number)
    return max(spent) if spent else predicted.get(number, PROCESS_START_S)


def fitting(
    contestants: dict[int, tuple[dict[str, Any], bool]],
    predicted: dict[int, float],
    first_rounds: int,
    budget_s: float | None,
    reporter: Reporter,
    keep: set[int] | frozenset[int] = frozenset(),
) -> dict[int, tuple[dict[str, Any], bool]]:
    """The contestants whose `first_rounds` rounds, and one more round of the best trial and the
    baseline's pair, the budget pays for: the finalists in their order, the last ones left out
    while those rounds would not fit (the runner-up only while the rounds asked for alone would
    not). A third round of the leader against the baseline decides
    more than a second of several finalists: its contrast is measured once more, and its noise's
    degrees of freedom grow as much. The runner-up goes last: without it the rounds cannot undo
    the search window's luck of its leader (a neighbour's load, a cold cache). The best trial and
    the baseline's pair always stay, and so do the trials of `keep` (the best that keeps the
    training math, beside a leader that changes it: the answer's comparison needs it)."""
    if budget_s is None:
        return contestants
    kept = dict(contestants)
    trials = [n for n in kept if n >= 0]
    # the kept ones move to the front, after the best trial: the others are left out first
    trials = trials[:1] + [n for n in trials[1:] if n in keep] + [n for n in trials[1:] if n not in keep]
    least = sum(predicted.get(n, PROCESS_START_S) for n in cheapest_round(kept))

    def cost(reserve: float) -> float:
        return first_rounds * sum(predicted.get(n, PROCESS_START_S) for n in kept) + reserve

    # the third and later finalists while the rounds and one more round of the leader would not
    # fit; the runner-up only while the rounds alone would not
    def droppable() -> bool:
        return bool(trials) and trials[-1] not in keep and trials[-1] != trials[0]

    while droppable() and (
        (len(trials) > 2 and cost(least) > budget_s) or (len(trials) == 2 and cost(0.0) > budget_s)
    ):
        dropped = trials.pop()
        del kept[dropped]
        reporter.on_note(
            f"trial {dropped} is left out of the rounds: the finalists' budget ({budget_s:.0f} s, "
            f"{100 * FINALISTS_SHARE:.0f}% of the search) pays for the rounds of fewer"
        )
    return kept


def planned_rounds(
    contestants: dict[int, Any], predicted: dict[int, float], first_rounds: int, budget_s: float | None
) -> int:
    """The most rounds the budget could pay for: the rounds asked for of every contestant, then
    rounds of the leader and the baseline's pair alone (`MAX_ROUNDS` at most). The rounds' first
    plan, from the measurements' predicted costs; `rounds_paid` counts them again from what the
    rounds asked for cost, before they are looked at."""
    if budget_s is None:
        return MAX_ROUNDS
    every = sum(predicted.get(n, PROCESS_START_S) for n in contestants)
    left = budget_s - first_rounds * every
    return max(first_rounds, rounds_paid(first_rounds, contestants, predicted, left))


def rounds_paid(done: int, contestants: Collection[int], costs: dict[int, float], left_s: float) -> int:
    """The most rounds there can be after `done` rounds with `left_s` seconds left: those, and as
    many as `left_s` pays for of the cheapest round there can be, the first trial of `contestants`
    and the baseline's pair at `costs` a measurement (`MAX_ROUNDS` at most). A bound the rounds
    cannot pass: their intervals hold over that many looks together, so a look it leaves out would
    widen them for nothing, and one past it would spend error that is not there."""
    smallest = sum(costs.get(n, PROCESS_START_S) for n in cheapest_round(contestants))
    extra = int(max(0.0, left_s) // smallest) if smallest > 0 else 0
    return max(done, min(MAX_ROUNDS, done + extra))


def cheapest_round(contestants: Collection[int]) -> list[int]:
    """Who the cheapest round there can be measures: the baseline's pair and the first trial of
    `contestants` (the best one, in the finalists' order)."""
    return [n for n in contestants if n < 0] + [n for n in contestants if n >= 0][:1]


def first_look(first_rounds: int, max_rounds: int) -> int:
    """The round the rounds are first looked at: after the rounds asked for, or after the last the
    budget pays for where that is only one more. A look one round before the last could end the
    rounds one round early at most, and it makes every interval stated at or after it wider (two
    looks' levels are 96.5% and 97.7%, one look's 95%): in a short search, the answer that look
    would state narrows more by waiting for the round than by stopping."""
    return max_rounds if max_rounds == first_rounds + 1 else first_rounds


def within_budget(
    racing: Sequence[int], rounds: Rounds, predicted: dict[int, float], left_s: float
) -> list[int] | None:
    """Who a round may measure with `left_s` seconds left, at what each measurement has cost so far:
    all of `racing`, else its best trial and the baseline's pair alone; None where not even those
    fit (the rounds end: what the rounds' measurements cost, not their predictions, is what a
    round spends)."""
    if sum(measurement_cost(n, rounds, predicted) for n in racing) <= left_s:
        return list(racing)
    trials = [n for n in racing if n >= 0]
    fit = rounds.fit
    if fit is not None:
        trials = sorted(trials, key=lambda n: -fit.levels.get(n, -math.inf))
    least = [n for n in racing if n < 0 or n == (trials[0] if trials else None)]
    if (
        len(least) < len(racing)
        and len(least) >= 2
        and sum(measurement_cost(n, rounds, predicted) for n in least) <= left_s
    ):
        return least
    return None


def sized_rounds(
    first_rounds: int,
    contestants: Collection[int],
    paces: dict[int, Pace],
    settings: MeasureSettings,
    budget_s: float | None,
) -> int:
    """The rounds the first rounds' windows are sized to leave room for: the rounds asked for (two
    at least), and one more where the budget pays for them at the least windows (`ROUND_MIN_STEPS`)
    with a round more of the best trial and the baseline's pair (as `within_budget` measures one
    that not every contestant fits). A third round gives the noise 6 or 7 degrees of freedom
    instead of 4 (t at 95% 2.45 or 2.36 against 2.78) and the leader's contrast with the baseline a
    third of its measurements more: its interval narrows by about 30%, where windows longer by
    the same seconds narrow only the part of the noise that is the window's own, not the spread
    between processes that most of it is."""
    asked = max(first_rounds, 2)
    if budget_s is None:
        return asked
    least = _least_steps(settings)
    cost = {n: paces[n].fixed_s + least * paces[n].step_s for n in contestants}
    third = asked * sum(cost.values()) + sum(cost[n] for n in cheapest_round(contestants))
    return asked + 1 if third <= budget_s else asked


def window_seconds(left: float, racing: Sequence[int], paces: dict[int, Pace]) -> float:
    """The window seconds each measurement of the next round may take where the budget leaves
    `left` seconds: what is left after the round's set-ups, warm-ups and process starts, shared
    out evenly."""
    fixed = sum(paces[n].fixed_s for n in racing)
    return max(0.0, (left - fixed) / max(1, len(racing)))


def next_round(
    rounds: Rounds,
    fit: RoundsFit,
    keeping: set[int],
    max_rounds: int,
    round_number: int,
    left_s: float | None,
    predicted: dict[int, float],
) -> tuple[list[int], str] | None:
    """Who the next round measures and why (the questions it serves), or None when the rounds end:
    every question is decided (or measured at its line, where no round could decide it, with the
    interval the answer states within `CLAIM_HALF_WIDTH`: such a question is measured on for that
    precision), or the time left would not pay for another round. A contestant still in the race
    whose disturbed window the fit left out is measured again with them."""
    with_baseline = BASELINE in rounds.scores
    questions = questions_of(fit, keeping, with_baseline)
    # a contestant whose disturbed window was left out, with the baseline's pair to place it by
    disturbed = {c.number for c in fit.excluded}
    if disturbed and with_baseline:
        disturbed |= {BASELINE, *([BASELINE_AGAIN] if BASELINE_AGAIN in rounds.scores else [])}
    racing = sorted({n for q in questions for n in q.members} | disturbed, key=_order)
    if not racing:
        return None
    cost = sum(measurement_cost(n, rounds, predicted) for n in racing)
    affordable = max_rounds - round_number
    if left_s is not None:
        affordable = min(affordable, int(left_s // cost) if cost > 0 else affordable)
    if affordable < 1:
        return None
    # judged at the level of the look the affordable rounds end at, not this one's
    level = look_level(rounds.looks, rounds.look + affordable)
    kept: list[Question] = []
    for question in questions:
        decidable = could_decide(question, fit, affordable, len(racing), level)
        held = question if decidable else precision_of(question)
        if held is not None:
            kept.append(held)
    racing = sorted({n for q in kept for n in q.members} | (disturbed & set(racing)), key=_order)
    if len(racing) < 2 or (not kept and not disturbed):
        return None
    why = "; ".join(q.text for q in kept) or "a disturbed window is measured again"
    return racing, why


def _order(number: int) -> tuple[int, int]:
    """Trials first, then the baseline and its pair (the rounds' order rotates anyway)."""
    return (number < 0, abs(number))
