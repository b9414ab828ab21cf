"""What a finished trial's line in the search's output says (`autotune.cli._render.trial_line`)."""

from __future__ import annotations

from autotune.cli._render import trial_line
from autotune.progress import TrialSummary

PARAMS = {"per_device_train_batch_size": 8, "torch_compile": "inductor"}


def _measured(**attrs: object) -> TrialSummary:
    return TrialSummary(3, PARAMS, "COMPLETE", 20e3, 150.0, 600 * 2**20, 0.02, attrs=dict(attrs))


def test_a_compiled_trial_says_its_compile_time_and_cache_verdict() -> None:
    line = trial_line(_measured(compile_s=12.34, compile_cache="hit"))
    assert "compile 12.3 s (cache hit)" in line and line.endswith("[green]ok[/]")
    assert "s (cache" not in trial_line(_measured(compile_s=0.0, compile_cache=None))


def test_a_configuration_known_not_to_run_is_not_run() -> None:
    known = TrialSummary(
        4, PARAMS, "PRUNED", reason="unused_parameters_known", message="the model has parameters without..."
    )
    assert "[yellow]not run[/] [dim]unused_parameters_known: the model has" in trial_line(known)


def test_a_window_ended_at_the_promotion_line_says_why_it_is_short() -> None:
    behind = {"upper_tokens_per_s": 14e3, "reference_tokens_per_s": 30e3, "promote_ratio": 0.8, "steps": 5}
    line = trial_line(_measured(not_promoted=behind))
    assert "[green]ok[/]  [dim]window ended after 5 steps: clearly under 0.8x the best measured 30.0k" in line
    assert "window ended" not in trial_line(_measured())
