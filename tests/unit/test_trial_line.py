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
