"""What an answer claims: a winner that does not separate from the defaults is reported as a tie."""

from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune.cli import main
from autotune.study.export import expected_lines, export_config
from tests.helpers import FAST, FixedStepTime, write_space


def test_a_space_as_fast_as_the_baseline_answers_that_nothing_beat_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every configuration (the baseline's batch of 8 included) takes the same time per step.
    space = write_space(
        tmp_path, {"attn_implementation": ["eager", "sdpa"], "optim": ["adamw_torch", "adamw_torch_fused"]}
    )
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=3,
        storage=f"sqlite:///{tmp_path / 'tie.db'}",
        seq_len=16,
        measure=FAST,
        finalists=2,
        finalist_rounds=3,
        isolation="none",  # the step-time hook works the same in workers; this is faster
        callbacks=[FixedStepTime(0.3)],
    )
    winner = result.study.user_attrs["winner"]
    speedup = winner["speedup"]
    assert speedup["rounds"] >= 3
    assert not speedup["beats_baseline"]
    assert speedup["low"] <= 1 + 0.01 and speedup["ratio"] < 1.05
    assert "nothing beat the defaults measurably" in winner["verdict"]
    assert "keep them" in (result.verdict or "")
    # The answer still names the best measured configuration (the export exists), marked a tie.
    assert result.best is not None and result.best.number == winner["number"]
    config = export_config(result.study, result.best)
    assert config["expected"]["beats_baseline"] is False
    low, high = config["expected"]["speedup_interval"]
    assert low <= 1.01 <= high or high < 1.01
    assert any("nothing beat the defaults measurably" in line for line in expected_lines(config))
    # `autotune show` gives the same answer from the store: the tie, its interval, the loss delta.
    with pytest.raises(SystemExit) as exit_info:
        main(["show", result.study.study_name, "--storage", f"sqlite:///{tmp_path / 'tie.db'}"])
    out = capsys.readouterr().out
    assert exit_info.value.code in (0, None)
    assert f"best: trial {winner['number']}" in out
    assert f"re-measured: {winner['verdict']}" in " ".join(out.split())
    assert f"{speedup['low']:.2f}-{speedup['high']:.2f}x over {speedup['rounds']} rounds" in out
    assert "nothing beat the defaults measurably: keep them (what `autotune export` writes" in out
    assert "loss vs the baseline at equal tokens" in out
    assert '"training_args"' not in out  # the config is `autotune export`'s
