"""The finalists' rounds as a sequential plan: what the rounds so far hold (`Rounds`), what the
next ones would cost (`predicted_cost`, `planned_rounds`, `within_budget`), which questions are still
open (`questions_of`, `could_decide`) and which contestants the next round measures (`next_round`).

A question stays open while the rounds' model (`autotune.measure.rounds`) cannot yet place its
ratio on one side of its threshold; more rounds are spent on it only while the budget left could
decide it. A decided claim is measured on while its interval is wider than `CLAIM_HALF_WIDTH`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.measure.rounds import RoundsFit, cells_of, fit_rounds
from autotune.measure.stats import MATH_GAIN, MIN_GAIN, Speedup, t_quantile
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
# ... but at least this many seconds (two rounds of a tiny model's two best trials and the baseline).
LEAST_BUDGET_S = 10.0
# The warm-up of a round's configuration that compiles nothing: its first step (a fresh process's
# first kernels, allocations and optimizer state) and one more. The search measured it already;
# only compilation needs its steps watched until they stop falling.
ROUND_EAGER_WARMUP_STEPS = 2
# A round's window may end after this many steps (at most the search's own minimum) once its
# interval is as narrow as the round needs: what decides is the spread across rounds.
ROUND_MIN_STEPS = 3


def finalists_budget_s(spent_s: float) -> float:
    """The finalists' budget after `spent_s` seconds of search: `FINALISTS_SHARE` of the whole, and
    at least `LEAST_BUDGET_S` (a search of a few seconds, a demo's or a test's, still gets the
    rounds that tell its two best trials and the defaults apart)."""
    return max(LEAST_BUDGET_S, FINALISTS_SHARE / (1 - FINALISTS_SHARE) * spent_s)


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
    fit: RoundsFit | None,
    margin: float | None = None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """The measurement settings of a finalists' round (`Job.window`): as long as the round's
    question needs, not the search's. A window's noise well under the noise between measurements
    (its 95% half-width at most half the rounds' pooled noise, `FIRST_ROUND_CI` before there is
    one) adds little to it; an open question whose estimate lies far from its line (`margin`, in
    log terms) needs no more than a quarter of that margin; within the run's `target_rel_ci` and
    `ROUND_CI_CAP`. A third of the search's steps and seconds at most (at least its minimum
    window), fewer seconds where the finalists' budget leaves less per measurement (`seconds`),
    and it may end after `ROUND_MIN_STEPS` steps once as precise as that. A configuration that
    compiles nothing warms up for `ROUND_EAGER_WARMUP_STEPS`: the search has seen it settle."""
    needed = FIRST_ROUND_CI if fit is None else fit.noise / 2
    if margin is not None and math.isfinite(margin):
        needed = max(needed, margin / 4)
    max_seconds = settings.max_seconds / 3
    if seconds is not None:
        max_seconds = max(0.0, min(max_seconds, seconds))
    return {
        "min_measure_steps": min(settings.min_measure_steps, ROUND_MIN_STEPS),
        "measure_steps": max(settings.min_measure_steps, math.ceil(settings.measure_steps / 3)),
        "max_seconds": max_seconds,
        "target_rel_ci": min(ROUND_CI_CAP, max(settings.target_rel_ci, needed)),
        "eager_settle_steps": min(settings.settle_steps, ROUND_EAGER_WARMUP_STEPS),
    }


def contestant_name(number: int) -> str:
    return "the baseline" if number in (BASELINE, BASELINE_AGAIN) else f"trial {number}"


# A speedup the answer claims is measured on while its interval is wider than this either side
# (in log terms: 1.15x) and the budget allows: a claim a user can hold the run to.
CLAIM_HALF_WIDTH = math.log(1.15)
# The rounds end here whatever the budget (a search without one: the Python API's own callers).
MAX_ROUNDS = 12
# A round's window before the rounds have a noise figure: its 95% half-width.
FIRST_ROUND_CI = 0.05
ROUND_CI_CAP = 0.10  # ... and the loosest any round's window takes
# A fit whose noise is this share of its robust noise or more holds disturbed windows it kept: more
# rounds are judged by the robust noise (`could_decide`).
CONTAMINATED = 1 / 1.5
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


@dataclass(frozen=True)
class Question:
    """An open question of the rounds: who must be measured again to answer it, and in words."""

    members: tuple[int, ...]
    speedup: Speedup
    threshold: float
    text: str
    precision: bool = False  # decided; measured on for a narrower stated interval

    @property
    def margin(self) -> float:
        return abs(math.log(self.speedup.ratio / self.threshold))


def by_median(scores: dict[int, dict[int, float]]) -> list[int]:
    return sorted(scores, key=lambda n: -statistics.median(scores[n].values()))


# -- what the rounds cost --------------------------------------------------------------------------


def predicted_cost(record: TrialRecord, settings: MeasureSettings) -> float:
    """The wall seconds one round's measurement of a configuration is expected to take, from its
    search window: its set-up, its warm-up (a round's two steps where it compiled nothing, and the
    excess its search warm-up took over steady steps), the
    steps a round's first window needs to reach `FIRST_ROUND_CI` at the noise of its search
    window's steps (within the round's least and most steps), and starting its process."""
    measured = record.measurement
    step_s = measured.step_time_median_s or measured.step_time_mean_s
    if not step_s and measured.tokens_per_step and record.tokens_per_s:
        step_s = measured.tokens_per_step / record.tokens_per_s
    step_s = step_s or 0.0
    # a round's warm-up steps: its fresh process's first step (a data-loader worker's start, the
    # first kernels, as the search's first step took them), then steady ones; without a first step
    # on record, every step of the search's warm-up beyond steady ones
    eager = min(settings.settle_steps, ROUND_EAGER_WARMUP_STEPS)
    if measured.first_step_s is not None and eager >= 1:
        warmup_s = measured.first_step_s + (eager - 1) * step_s
    else:
        warmup_s = eager * step_s + (measured.warmup_excess_s or 0.0)
    if record.compile.seconds:
        warmup_s = max(warmup_s, measured.warmup_s or 0.0)
    window = round_window(settings, None)
    steps = float(window["min_measure_steps"])
    ci, count = measured.rel_ci_halfwidth, measured.measured_steps
    if ci and count and count > 1 and math.isfinite(ci):
        per_step = ci * math.sqrt(count) / t_quantile(0.975, count - 1)  # one step's relative spread
        needed = (1.96 * per_step / window["target_rel_ci"]) ** 2
        steps = min(float(window["measure_steps"]), max(steps, needed))
    return (measured.setup_s or 0.0) + warmup_s + steps * step_s + PROCESS_START_S


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
    least = sum(predicted.get(n, PROCESS_START_S) for n in [*trials[:1], *(n for n in kept if n < 0)])

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
    rounds of the leader and the baseline's pair alone (`MAX_ROUNDS` at most). Fixed before the
    first measurement: the rounds' intervals hold over that many looks together."""
    if budget_s is None:
        return MAX_ROUNDS
    every = sum(predicted.get(n, PROCESS_START_S) for n in contestants)
    least = [n for n in contestants if n < 0] + [n for n in contestants if n >= 0][:1]
    smallest = sum(predicted.get(n, PROCESS_START_S) for n in least)
    extra = int(max(0.0, budget_s - first_rounds * every) // smallest) if smallest > 0 else 0
    return max(first_rounds, min(MAX_ROUNDS, first_rounds + extra))


def within_budget(
    racing: Sequence[int], rounds: Rounds, predicted: dict[int, float], left_s: float
) -> list[int] | None:
    """Who a round may measure with `left_s` seconds left, at what each measurement has cost so far:
    all of `racing`, else its best trial and the baseline's pair alone; None where not even those
    fit (the rounds end: the first round's costs, not its predictions, are what a round spends)."""
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


def window_seconds(left: float, racing: Sequence[int], rounds: Rounds, predicted: dict[int, float]) -> float:
    """The window seconds each measurement of the next round may take where the budget leaves
    `left` seconds: what is left after the round's set-ups and warm-ups, shared out evenly."""
    fixed = sum(max(0.0, measurement_cost(n, rounds, predicted) - PROCESS_START_S) for n in racing)
    return max(0.0, (left - fixed) / max(1, len(racing))) + 0.1


# -- what the rounds answer --------------------------------------------------------------------------


def decided_out(fit: RoundsFit, keeping: set[int]) -> list[int]:
    """The trials decided slower than the leader: the interval of their ratio to it lies wholly
    below 1. They leave the rounds: no further round could make them the answer. The baseline and
    its A/A pair stay (every answer is stated against them), and so does the fastest trial that
    keeps the training math (`keeping`) while the leader changes it."""
    trials = [n for n in fit.ranked() if n >= 0]
    if len(trials) < 2:
        return []
    leader = trials[0]
    keeper = next((n for n in trials if n in keeping), None) if leader not in keeping else None
    out = []
    for number in trials[1:]:
        lead = fit.ratio(number, leader)
        if number != keeper and lead is not None and lead.rounds >= 2 and lead.high < 1:
            out.append(number)
    return out


def questions_of(fit: RoundsFit, keeping: set[int], with_baseline: bool) -> list[Question]:
    """The rounds' open questions: the leader's speedup over the baseline (undecided at
    1 + `MIN_GAIN`, or decided above it with an interval wider than `CLAIM_HALF_WIDTH`), its lead
    over the runner-up (undecided at 1), and where the leader changes the training math, its gain
    over the best that keeps it, the defaults included (undecided at 1 + `MATH_GAIN`). A question
    is open only on the side where deciding it changes the answer: while the leader measures no
    faster than the defaults they are the answer, decided or not, and the one question left is
    the precision of the interval stated beside them (the leader over the defaults, while wider
    than `CLAIM_HALF_WIDTH`); no math question while the change measures under its gain (the one
    that keeps the math is the answer, decided or not)."""
    trials = [n for n in fit.ranked() if n >= 0]
    if not trials:
        return []
    leader, found = trials[0], []
    baseline = [BASELINE, BASELINE_AGAIN] if with_baseline else []
    speedup = fit.ratio(leader, BASELINE) if with_baseline else None
    if speedup is not None and speedup.rounds >= 2 and speedup.ratio <= 1 + MIN_GAIN:
        # measured no faster than the defaults: they are the answer, decided or not; the interval
        # stated beside them (the best measured over the defaults) is measured on while wide
        if speedup.half_width <= CLAIM_HALF_WIDTH:
            return []
        text = f"the ratio of trial {leader} to the baseline is wide ({speedup.describe()})"
        return [Question((leader, *baseline), speedup, 1 + MIN_GAIN, text, precision=True)]
    if speedup is not None and speedup.rounds >= 2:
        if not speedup.decided(1 + MIN_GAIN):
            text = f"the speedup of trial {leader} over the baseline is not decided ({speedup.describe()})"
            found.append(Question((leader, *baseline), speedup, 1 + MIN_GAIN, text))
        elif speedup.beats_baseline and speedup.half_width > CLAIM_HALF_WIDTH:
            text = f"the speedup of trial {leader} over the baseline is wide ({speedup.describe()})"
            found.append(Question((leader, *baseline), speedup, 1 + MIN_GAIN, text, precision=True))
    lead = fit.ratio(leader, trials[1]) if len(trials) > 1 else None
    if lead is not None and lead.rounds >= 2 and not lead.decided(1.0):
        text = f"trial {leader}'s lead over trial {trials[1]} is not decided ({lead.describe()})"
        found.append(Question((leader, trials[1]), lead, 1.0, text))
    if leader not in keeping:
        keepers = [n for n in fit.ranked() if n in keeping or (n == BASELINE and with_baseline)]
        keeper = keepers[0] if keepers else None
        gain = fit.ratio(leader, keeper) if keeper is not None else None
        # measured under the gain a math change must make, the one that keeps it is the answer
        open_ = gain is not None and gain.rounds >= 2 and gain.ratio > 1 + MATH_GAIN
        if keeper is not None and gain is not None and open_ and not gain.decided(1 + MATH_GAIN):
            members = (leader, *(baseline if keeper == BASELINE else [keeper]))
            text = (
                f"trial {leader}'s gain over {contestant_name(keeper)}, which keeps the training math, "
                "is not decided"
            )
            found.append(Question(members, gain, 1 + MATH_GAIN, f"{text} ({gain.describe()})"))
    return found


def could_decide(question: Question, fit: RoundsFit, extra_rounds: int, racing: int) -> bool:
    """Whether `extra_rounds` more rounds of `racing` contestants could answer `question`, were its
    estimate and the noise to stay as measured: its standard error shrinks with the rounds it is
    measured in, and the degrees of freedom grow with the cells each round adds (less its round
    effect). A question measured at its line (two configurations alike) could not: it is not
    raced. An open question of precision: whether the interval would narrow to the width asked."""
    speedup = question.speedup
    if extra_rounds < 1 or not math.isfinite(speedup.se) or speedup.rounds < 1:
        return False
    if question.precision:
        return True  # every round narrows it; the question closes at the width asked
    # the noise judged robustly: a disturbed window the fit kept does not make a question hopeless
    robust = fit.robust_sigma / fit.sigma if fit.robust_sigma is not None and fit.sigma > 0 else 1.0
    noise = (robust if robust < CONTAMINATED else 1.0) * fit.scale * fit.sigma
    rounds = speedup.rounds + extra_rounds
    # the error now, shrinking with the rounds; or what a design balanced by then gives (a few
    # rounds of many contestants estimate a comparison less well than the same rounds will)
    se = min(
        noise / max(fit.scale * fit.sigma, 1e-12) * speedup.se * math.sqrt(speedup.rounds / rounds),
        noise * math.sqrt(2 / rounds),
    )
    df = max(1, fit.df + extra_rounds * max(0, racing - 1))
    return question.margin > t_quantile(0.5 + fit.level / 2, df) * se


def next_round(
    rounds: Rounds,
    fit: RoundsFit,
    keeping: set[int],
    max_rounds: int,
    round_number: int,
    left_s: float | None,
    predicted: dict[int, float],
) -> tuple[list[int], list[Question], str] | None:
    """Who the next round measures, the questions it serves and why, or None when the rounds end:
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
    kept: list[Question] = []
    for question in questions:
        held = question if could_decide(question, fit, affordable, len(racing)) else _precision_of(question)
        if held is not None:
            kept.append(held)
    racing = sorted({n for q in kept for n in q.members} | (disturbed & set(racing)), key=_order)
    if len(racing) < 2 or (not kept and not disturbed):
        return None
    why = "; ".join(q.text for q in kept) or "a disturbed window is measured again"
    return racing, kept, why


def _precision_of(question: Question) -> Question | None:
    """An undecided question no affordable round could decide, kept for precision where it is the
    interval the answer states (a contestant over the baseline) and that interval is wider than
    `CLAIM_HALF_WIDTH`; None otherwise."""
    if BASELINE not in question.members or question.speedup.half_width <= CLAIM_HALF_WIDTH:
        return None
    text = question.text.replace("is not decided", "is not decided, and wide")
    return replace(question, precision=True, text=text)


def _order(number: int) -> tuple[int, int]:
    """Trials first, then the baseline and its pair (the rounds' order rotates anyway)."""
    return (number < 0, abs(number))
