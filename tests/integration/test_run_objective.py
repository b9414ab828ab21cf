"""The user's run: a loss checked against the baseline's at equal tokens, and an objective that is
the predicted wall time of a run of --train-tokens (compilation paid once) instead of throughput."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

import autotune
from autotune.export.config import export_config
from tests.helpers import FAST, IN_PROCESS, DivergeLoss, SlowCompile, write_space

pytestmark = pytest.mark.timeout(300)
LOSS_WINDOWS = replace(FAST, min_measure_steps=6, measure_steps=8)


def test_a_diverging_configuration_is_loss_diverged_never_the_winner(tmp_path: Path) -> None:
    # The guard judges numerics (an optimizer here) at the baseline's effective batch.
    hook = DivergeLoss({"optim": "adafactor"})
    pickle.loads(pickle.dumps(hook))  # it reaches worker processes pickled, like `Fault`
    space = write_space(tmp_path, {"optim": ["adafactor", "adamw_torch_fused"]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'loss.db'}",
        seq_len=16,
        # Windows long enough for several paired steps (`autotune.store.objective.compare_losses`).
        **{**IN_PROCESS, "measure_baseline": True, "measure": LOSS_WINDOWS},
        callbacks=[hook],
        enqueue=[{"optim": "adafactor"}, {"optim": "adamw_torch_fused"}],
    )
    baseline = result.study.user_attrs["baseline"]
    assert baseline["loss_curve"] and baseline["tokens_per_step"] == 8 * 16
    by_optim = {t.params["optim"]: t for t in result.trials}
    diverged, healthy = by_optim["adafactor"], by_optim["adamw_torch_fused"]
    assert diverged.state == "PRUNED" and diverged.reason == "loss_diverged"
    assert diverged.attrs["feasible"] is False and diverged.attrs["loss_curve"]
    assert "worse than the baseline's at equal tokens" in (diverged.message or "")
    assert result.study.optuna_study.trials[diverged.number].constraints["loss_parity"] == 1.0
    # The healthy trial runs the baseline's configuration: the same samples, the same loss.
    assert healthy.state == "COMPLETE" and abs(healthy.attrs["loss_delta"]) < 0.05
    assert result.best is not None and result.best.number == healthy.number
    # The answer never hands back (nor names) the diverged trial. The healthy one ran the baseline's
    # own configuration: it is the baseline, not a contestant, so the answer keeps the defaults.
    answer = result.answer
    assert answer.keeps_defaults and answer.verdict.startswith("the defaults are the fastest measured")
    assert diverged.number not in {c.trial for c in (answer.choice, answer.alternative) if c is not None}
    expected = export_config(result.study, result.best)["expected"]
    assert expected["loss_delta"] == healthy.attrs["loss_delta"]


def _no_compile(model: Any, *args: Any, **kwargs: Any) -> Any:
    return model  # compiled trials are timed by `SlowCompile`, not by inductor


@pytest.mark.parametrize(
    ("train_tokens", "wins"),
    [
        (None, "eager"),  # on throughput, the (fake) compiled configuration is twice as fast
        (100, "off"),  # a run this short never earns back 3 s of compilation
    ],
)
def test_a_short_run_picks_no_compile_where_compile_wins_on_throughput(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train_tokens: int | None, wins: str
) -> None:
    monkeypatch.setattr(torch, "compile", _no_compile)
    space = write_space(tmp_path, {"torch_compile": ["off", "eager"]})
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=2,
        storage=f"sqlite:///{tmp_path / 'run.db'}",
        seq_len=16,
        **IN_PROCESS,
        train_tokens=train_tokens,
        callbacks=[SlowCompile(compile_s=3.0, slower_s=0.5)],
        enqueue=[{"torch_compile": "off"}, {"torch_compile": "eager"}],
    )
    by_value = {t.params["torch_compile"]: t for t in result.trials}
    compiled, plain = by_value["eager"], by_value["off"]
    assert compiled.tokens_per_s > 1.2 * plain.tokens_per_s  # compile wins on throughput
    assert compiled.attrs["warmup_excess_s"] > 2.0
    assert result.best is not None and result.best.params["torch_compile"] == wins
    # and the answer hands back the configuration that wins on the objective
    assert result.answer.choice is not None, result.answer.verdict
    assert result.answer.choice.params.get("torch_compile", "off") == wins, result.answer.verdict
    expected = export_config(result.study, result.best)["expected"]
    if train_tokens is None:
        # The objective stays throughput, and the answer says when compiling pays for itself.
        assert result.study.optuna_study.trials[compiled.number].value == pytest.approx(compiled.tokens_per_s)
        # 3 s more up front, 0.5 s less per step of 128 tokens: about 768 tokens
        assert 200 < expected["compile_payoff_tokens"] < 5_000
    else:
        assert expected["train_tokens"] == train_tokens
        assert expected["predicted_run_s"] == pytest.approx(
            plain.attrs["setup_s"] + plain.attrs["warmup_excess_s"] + train_tokens / plain.tokens_per_s
        )
        assert result.study.optuna_study.trials[plain.number].value == pytest.approx(
            train_tokens / expected["predicted_run_s"]
        )
