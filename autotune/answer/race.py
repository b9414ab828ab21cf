"""The finalists' race as their stored rounds left it (`race_of`): the leader, its re-measured median,
its lead over the runner-up and its speedup over the defaults, read from the rounds' one model
(`rounds_fit`), never stored beside them; and the best measured trial (`best_trial`), the leader
where the rounds ran. What the study hands back is its answer (`autotune.answer.decide`), which
may be the defaults."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.answer.instrument import rounds_fit
from autotune.measure.stats import Speedup
from autotune.progress import describe_params
from autotune.records import BASELINE, StudyRecord, TrialRecord, read_study
from autotune.store.trials import rankable, ranked_trials

if TYPE_CHECKING:
    from autotune.store.session import StudyStore

# What the race says when the leader's lead over the runner-up is within the rounds' noise.
TIE = "within the noise: either is as good"


@dataclass(frozen=True)
class Race:
    """The finalists' rounds as they ended.

    Attributes:
        leader: the trial the rounds put first (the first stored: by their model's levels, by
            median score where they could not be fitted).
        median_tokens_per_s: the leader's median re-measured tokens/s.
        runner_up: the trial placed second (None: one trial was re-measured).
        lead: the leader's score over the runner-up's, paired (None: not comparable).
        speedup: the leader's score over the defaults', paired (None: the baseline was not
            re-measured, or not comparable).
    """

    leader: int
    median_tokens_per_s: float | None
    runner_up: int | None = None
    lead: Speedup | None = None
    speedup: Speedup | None = None

    @property
    def tied(self) -> bool:
        """Whether the lead over the runner-up is within the noise."""
        return self.lead is not None and not self.lead.decided(1.0)

    def describe(self, params: dict[str, Any]) -> str:
        """The race in words, the leader named by its knob values `params`: ``bs=8 ...: 1.04x the
        runner-up (trial 3, 95% interval 0.98-1.10x over 4 rounds), within the noise: ...``."""
        text = describe_params(params)
        lead = self.lead
        if lead is not None and self.runner_up is not None:
            interval = f"95% interval {lead.low:.2f}-{lead.high:.2f}x over {lead.rounds} rounds"
            text += f": {lead.ratio:.2f}x the runner-up (trial {self.runner_up}, {interval})"
            if self.tied:
                text += f", {TIE}"
        return text


def race_of(record: StudyRecord) -> Race | None:
    """The race of a study's stored finalists' rounds; None where no trial was re-measured."""
    finalists = {f.number: f for f in record.finalists}
    fit = rounds_fit(finalists, record.rounds_looks, record.rounds_look)
    # stored fastest first, by the rounds' model (else by median score) as they ended
    trials = [f.number for f in record.finalists if f.number >= 0 and f.tokens_per_s]
    if not trials:
        return None
    leader = trials[0]
    runner_up = trials[1] if len(trials) > 1 else None
    tokens = finalists[leader].tokens_per_s
    return Race(
        leader=leader,
        median_tokens_per_s=statistics.median(tokens) if tokens else None,
        runner_up=runner_up,
        lead=fit.ratio(leader, runner_up) if fit is not None and runner_up is not None else None,
        speedup=fit.ratio(leader, BASELINE) if fit is not None and BASELINE in finalists else None,
    )


def race_text(record: StudyRecord, trial: TrialRecord | None) -> str | None:
    """The race in words when `trial` is its leader (None otherwise, or without rounds)."""
    race = race_of(record)
    if race is None or trial is None or trial.number != race.leader:
        return None
    return race.describe(trial.params)


def best_trial(study: StudyStore) -> TrialRecord | None:
    """The best measured feasible trial: the one the finalists' rounds put first when they ran,
    else the completed trial with the highest measured score. Never an infeasible trial. What the
    study hands back is its answer, which may be the defaults."""
    ranked = ranked_trials(study)
    race = race_of(read_study(study))
    if race is not None:
        for summary in ranked:
            if summary.number == race.leader and rankable(summary):
                return summary
    return ranked[0] if ranked and rankable(ranked[0]) else None
