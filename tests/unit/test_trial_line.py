"""What a finished trial's line in the search's output says (`autotune.view.trial_line`)."""

from __future__ import annotations

from autotune.records import TrialRecord, trial_record
from autotune.view import trial_line

PARAMS = {"per_device_train_batch_size": 8, "torch_compile": "inductor"}


def _measured(**attrs: object) -> TrialRecord:
    figures = {"tokens_per_s": 20e3, "samples_per_s": 150.0, "peak_memory_bytes": 600 * 2**20}
    return trial_record(3, PARAMS, "COMPLETE", {**figures, "rel_ci_halfwidth": 0.02, **attrs})


def test_a_compiled_trial_says_its_compile_time_and_cache_verdict() -> None:
    line = trial_line(_measured(compile_s=12.34, compile_cache="hit"))
    assert "compile 12.3 s (cache hit)" in line and line.endswith("[green]ok[/]")
    assert "s (cache" not in trial_line(_measured(compile_s=0.0, compile_cache=None))


def test_a_configuration_known_not_to_run_is_not_run() -> None:
    stored = {"reason": "unused_parameters_known", "message": "the model has parameters without..."}
    known = trial_record(4, PARAMS, "PRUNED", stored)
    assert "[yellow]not run[/] [dim]unused_parameters_known: the model has" in trial_line(known)


def test_a_window_ended_at_the_promotion_line_says_why_it_is_short() -> None:
    behind = {"upper_tokens_per_s": 14e3, "reference_tokens_per_s": 30e3, "promote_ratio": 0.8, "steps": 5}
    line = trial_line(_measured(not_promoted=behind))
    assert "[green]ok[/]  [dim]window ended after 5 steps: clearly under 0.8x the best measured 30.0k" in line
    assert "window ended" not in trial_line(_measured())
