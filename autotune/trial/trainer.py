"""`AutotuneTrainer`: the trial Trainer (`autotune.trial.runner.TrialRunner`) with the jobs a
worker runs outside the search: a configuration measured again (`measure_config`: a finalist, or
the baseline's values as given) and a whole run's steps checked once (`whole_run_check`). The class
for a user's own Trainer is composed over it in `autotune.trial.compose`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from transformers.trainer_utils import HPSearchBackend, default_compute_objective

from autotune.measure.ranks import distributed, gather
from autotune.records import WholeRunFindings, trial_attrs
from autotune.space.knobs import Value
from autotune.store.asked import fixed_trial
from autotune.trial import whole_run_steps
from autotune.trial.errors import (
    failure_reason,
    one_line,
)
from autotune.trial.runner import TrialRunner


class AutotuneTrainer(TrialRunner):
    """The trial Trainer with the measurement jobs outside the search (see the module docstring)."""

    def measure_config(
        self,
        params: dict[str, Value],
        number: int,
        verbatim: bool = False,
        window: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Measure a configuration outside the search: a finalist again (its params are a point of
        the space), or with `verbatim` any knob values at all (the baseline). `window` replaces
        measurement settings for this measurement alone (a finalists' round's shorter window).
        Returns its flat measured attrs (`autotune.records.trial_attrs`).

        Raises:
            Exception: whatever training raised; memory is released either way.
        """
        # As inside hyperparameter_search, so that _hp_search_setup makes the trial's Accelerator.
        self.hp_search_backend = HPSearchBackend.OPTUNA  # type: ignore[assignment]
        self.hp_space = self.space.hp_space
        if verbatim:
            self._verbatim_values = dict(params)
            self.hp_space = lambda trial: {}
        self.measurement.screen_against = None  # a measurement takes its full window
        settings = self.measurement.settings
        if window:
            self.measurement.settings = replace(settings, **window)
        try:
            return trial_attrs(self._measure(fixed_trial({} if verbatim else params, number)))
        finally:
            self.measurement.settings = settings
            self.hp_search_backend = None
            self._verbatim_values = None
            self._release()

    def whole_run_check(
        self, params: dict[str, Value], number: int, verbatim: bool = False
    ) -> WholeRunFindings:
        """Run a configuration once as a whole run does (`autotune.trial.whole_run_steps`): one optimizer
        step on the longest samples of the data, the Trainer's evaluation and checkpoint save at
        that step (into this process's scratch folder). Returns each step's peak (every rank's
        largest), the step that failed and why (out of memory, or an error), and the batches' sizes.

        Raises:
            Exception: what a step raised in a DDP group (a rank that failed alone cannot be waited
                for); memory is released either way.
        """
        self.hp_search_backend = HPSearchBackend.OPTUNA  # type: ignore[assignment]
        self.hp_space = self.space.hp_space
        # What the Trainer reports an evaluation to a search with (a fresh process never searched).
        self.compute_objective = getattr(self, "compute_objective", None) or default_compute_objective
        if verbatim:
            self._verbatim_values = dict(params)
            self.hp_space = lambda trial: {}
        steps = whole_run_steps.WholeRunSteps(self.measurement.meter)
        self._full_data, self._whole_run = self.train_dataset, steps
        self.pop_callback(self.measurement)  # no window, no screening: the check times nothing
        self.add_callback(steps)
        failure: tuple[str | None, str | None] = (None, None)
        trial: Any = fixed_trial({} if verbatim else params, number)
        if self._compiled_before:
            torch._dynamo.reset()  # drop the previous trial's graphs and guards
        try:
            super(TrialRunner, self).train(trial=trial)  # the stock loop, as a trial's `_measure` runs it
        except Exception as exc:
            steps.end()
            if distributed():
                raise
            failure = (failure_reason(exc), one_line(exc))
        finally:
            self.remove_callback(steps)
            self.callback_handler.callbacks.insert(0, self.measurement)
            self.train_dataset, self.eval_dataset = self._full_data, None
            self._whole_run = None
            self.hp_search_backend = None
            self._verbatim_values = None
            self._compiled_before = self._compiled_before or bool(self.args.torch_compile)
            self._release()
        return whole_run_steps.findings(steps, gather(steps.step_peaks), self.args, *failure)
