"""The questions the finalists' rounds answer, read from the rounds' model
(`autotune.measure.rounds`): which trials are decided out (`decided_out`), which questions are
still open (`questions_of`), whether the rounds the budget leaves could decide one
(`could_decide`), and the precision asked of the interval an answer states (`precision_of`,
`CLAIM_HALF_WIDTH`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autotune.measure.rounds import RoundsFit
from autotune.measure.stats import MATH_GAIN, MIN_GAIN, Speedup, t_quantile
from autotune.records import BASELINE, BASELINE_AGAIN

# A speedup the answer claims is measured on while its interval is wider than this either side
# (in log terms: 1.15x) and the budget allows: a claim a user can hold the run to.
CLAIM_HALF_WIDTH = math.log(1.15)
# A fit whose noise is this share of its robust noise or more holds disturbed windows it kept: more
# rounds are judged by the robust noise (`could_decide`).
CONTAMINATED = 1 / 1.5


def contestant_name(number: int) -> str:
    return "the baseline" if number in (BASELINE, BASELINE_AGAIN) else f"trial {number}"


@dataclass(frozen=True)
class Question:
    """An open question of the rounds: who must be measured again to answer it, and in words."""

    members: tuple[int, ...]
    speedup: Speedup
    threshold: float
    text: str
    precision: bool = False  # measured on for a narrower stated interval, not for a decision

    @property
    def margin(self) -> float:
        return abs(math.log(self.speedup.ratio / self.threshold))


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


def could_decide(
    question: Question, fit: RoundsFit, extra_rounds: int, racing: int, level: float | None = None
) -> bool:
    """Whether `extra_rounds` more rounds of `racing` contestants could answer `question`, were its
    estimate and the noise to stay as measured: its standard error shrinks with the rounds it is
    measured in, and the degrees of freedom grow with the cells each round adds (less its round
    effect). A question measured at its line (two configurations alike) could not: it is not
    raced. An open question of precision: whether the interval would narrow to the width asked.
    `level`: the confidence level of the look those rounds end at (a later look's is stricter than
    this one's, `autotune.measure.looks`); None: the fit's own."""
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
    return question.margin > t_quantile(0.5 + (fit.level if level is None else level) / 2, df) * se


def precision_of(question: Question) -> Question | None:
    """An undecided question no affordable round could decide, kept for precision where it is the
    interval the answer states (a contestant over the baseline) and that interval is wider than
    `CLAIM_HALF_WIDTH`; None otherwise."""
    if BASELINE not in question.members or question.speedup.half_width <= CLAIM_HALF_WIDTH:
        return None
    text = f"{question.text}, and no round left could decide it: measured on while it is that wide"
    return replace(question, precision=True, text=text)
