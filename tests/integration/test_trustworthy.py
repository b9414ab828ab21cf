"""Trustworthy trials: a memory cap on measured peaks, failures as results, no wasted trials, and a
winner chosen by interleaved re-measurement."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

import autotune
from autotune.driver.sequential import MAX_ROUNDS
from autotune.measure.peak import rss_bytes
from tests.helpers import FAST, FAST_RUN, IN_PROCESS, FakeOOM, KnobProbe, write_space


def test_fake_oom_larger_batches_are_predicted_not_trained(tmp_path: Path) -> None:
    space = write_space(tmp_path, {"per_device_train_batch_size": [2, 4, 8, 16]})
    probe = KnobProbe()
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=3,
        storage=f"sqlite:///{tmp_path / 'oom.db'}",
        seq_len=16,
        **IN_PROCESS,
        callbacks=[FakeOOM(threshold=8), probe],
        enqueue=[{"per_device_train_batch_size": b} for b in (8, 16, 2, 4)],
    )
    by_batch = {
        t.params["per_device_train_batch_size"]: t for t in result.trials if "duplicate_of" not in t.attrs
    }
    assert by_batch[8].reason == "oom" and by_batch[8].state == "PRUNED"
    assert by_batch[16].reason == "oom_predicted" and by_batch[16].state == "PRUNED"
    assert by_batch[16].attrs["dominated_by"] == by_batch[8].number
    assert by_batch[16].attrs["trained"] is False
    assert 16 not in [seen["batch_size"] for seen in probe.trials]  # never reached training
    frozen = {t.number: t for t in result.study.optuna_study.trials}
    assert frozen[by_batch[8].number].constraints["memory"] > 0
    assert frozen[by_batch[16].number].constraints["memory"] > 0
    assert result.best is not None and result.best.params["per_device_train_batch_size"] in (2, 4)
    assert result.best.attrs["feasible"] is True
    assert result.ran == 3  # 8 (failed), 2 and 4: the predicted 16 cost nothing


def test_real_cpu_memory_cap_makes_large_batches_infeasible(tmp_path: Path) -> None:
    # Measured, not faked: first measure the peaks of a batch of 1 and of 64 at sequence length
    # 256 (about 0.5 GiB and 1.5 GiB of RSS on tiny-gpt2), then search again under a cap a tenth
    # of the way down from the large peak: well within the estimate's safety margin, so the large
    # batch runs and its measured peak decides.
    space = write_space(tmp_path, {"per_device_train_batch_size": [1, 64]})
    common = dict(
        model="tiny-gpt2",
        space=space,
        trials=2,
        seq_len=256,
        **FAST_RUN,
    )
    enqueue = [{"per_device_train_batch_size": 64}, {"per_device_train_batch_size": 1}]
    free = autotune.search(storage=f"sqlite:///{tmp_path / 'free.db'}", enqueue=enqueue, **common)
    peaks = {t.params["per_device_train_batch_size"]: t.attrs["peak_memory_bytes"] for t in free.trials}
    cap = int(peaks[64] - 0.1 * (peaks[64] - peaks[1]))

    result = autotune.search(
        storage=f"sqlite:///{tmp_path / 'cap.db'}", memory_cap=f"{cap}B", enqueue=enqueue, **common
    )
    by_batch = {t.params["per_device_train_batch_size"]: t for t in result.trials}
    big, small = by_batch[64], by_batch[1]
    assert big.state == "PRUNED" and big.reason == "over_memory_cap", big.message
    assert big.attrs["peak_memory_bytes"] > cap
    assert big.attrs["tokens_per_s"] > 0  # stored with its measurements
    assert big.attrs["feasible"] is False
    assert result.study.optuna_study.trials[big.number].constraints["memory"] > 0
    assert small.state == "COMPLETE" and small.attrs["peak_memory_bytes"] <= cap
    assert result.best is not None and result.best.number == small.number
    # optuna's own best trial agrees: an infeasible trial has no value it could pick.
    assert result.study.optuna_study.best_trial.number == small.number


def test_repeated_trials_do_not_grow_baseline_memory(tmp_path: Path) -> None:
    knobs = {"per_device_train_batch_size": [1, 64], "attn_implementation": ["eager", "sdpa"]}
    space = write_space(tmp_path, {**knobs, "activation_checkpointing": [False, True]})
    order = [
        (64, "eager", False),
        (1, "eager", False),
        (64, "sdpa", True),
        (64, "sdpa", False),
        (64, "eager", True),
        (1, "sdpa", True),
    ]
    result = autotune.search(
        model="tiny-gpt2",
        space=space,
        trials=len(order),
        storage=f"sqlite:///{tmp_path / 'creep.db'}",
        seq_len=256,
        enqueue=[
            {"per_device_train_batch_size": b, "attn_implementation": a, "activation_checkpointing": c}
            for b, a, c in order
        ],
        **FAST_RUN,
    )
    trials = sorted(result.trials, key=lambda t: t.number)
    assert len(trials) == len(order)
    # Each batch-64 trial peaks about 1 GiB above its start; what it leaves behind must stay small.
    # What a trial's worker holds before any model (the estimate's baseline) must not grow:
    baselines = [t.attrs["memory_estimate"]["baseline_bytes"] for t in trials]
    assert max(baselines) - baselines[0] < 64 * 2**20, [b / 2**20 for b in baselines]
    # nor what it holds when training starts. Trials 0, 2, 3 and 4 are the first of their memory
    # kind and run the activation probe in their worker first, which leaves its one-time set-up
    # (20-70 MB, by machine) there; trials 1 and 5 read the probe's figure from the study, so the
    # same start after one batch-64 trial and after four says nothing was carried over.
    starts = [t.attrs["rss_start_bytes"] for t in trials]
    assert starts[5] - starts[1] < 64 * 2**20, [s / 2**20 for s in starts]


def test_nan_compile_error_and_timeout_are_recorded_and_the_search_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_compile = torch.compile

    def broken_compile(model: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "aot_eager":
            raise torch._dynamo.exc.BackendCompilerFailed(
                lambda *a: None, RuntimeError("injected compiler crash"), None
            )
        return real_compile(model, *args, **kwargs)

    class Slow(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if args.per_device_train_batch_size == 4:
                time.sleep(2.0)

    class Poison(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if args.gradient_accumulation_steps == 2:
                with torch.no_grad():
                    next(model.parameters()).fill_(float("nan"))

    monkeypatch.setattr(torch, "compile", broken_compile)
    knobs = {
        "per_device_train_batch_size": [2, 4],
        "gradient_accumulation_steps": [1, 2],
        "torch_compile": ["off", "aot_eager"],
    }
    trials = [
        {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "torch_compile": "aot_eager"},
        {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "torch_compile": "off"},
        {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "torch_compile": "off"},
        {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "torch_compile": "off"},
    ]
    # Margins that hold on a loaded machine: the slow trial needs 4 s for two steps.
    measure = FAST.__class__(**{**FAST.__dict__, "trial_timeout_s": 3.0})
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, knobs),
        trials=4,
        storage=f"sqlite:///{tmp_path / 'fail.db'}",
        seq_len=16,
        callbacks=[Slow(), Poison()],
        enqueue=trials,
        **{**IN_PROCESS, "measure": measure},
    )
    by_number = {t.number: t for t in result.trials}
    assert [by_number[n].reason for n in range(4)] == ["compile_error", "nan_loss", "timeout", None]
    assert "injected compiler crash" in (by_number[0].message or "")
    assert result.best is not None and result.best.number == 3
    assert all(by_number[n].attrs["trained"] for n in range(4))


class SlowDown(TrainerCallback):
    """A controlled slowdown: `delay_s` per step for one attention kernel, and a one-off handicap
    for the other's first training, so the search alone would pick the wrong one."""

    def __init__(self, slow: str, delay_s: float, handicapped: str, handicap_s: float) -> None:
        self.slow, self.delay_s = slow, delay_s
        self.handicapped, self.handicap_s = handicapped, handicap_s
        self.seen: dict[str, int] = {}
        self._current = ""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        self._current = model.config._attn_implementation
        self.seen[self._current] = self.seen.get(self._current, 0) + 1

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._current == self.slow:
            time.sleep(self.delay_s)
        if self._current == self.handicapped and self.seen[self._current] == 1:
            time.sleep(self.handicap_s)


@pytest.mark.usefixtures("roomy_finalists")
def test_interleaved_remeasurement_picks_the_truly_faster_config(tmp_path: Path) -> None:
    # sdpa is made slower by 150 ms a step (several times a tiny step, on a loaded machine too);
    # eager carries a 600 ms a step handicap in its first (search) measurement only. The search
    # ranks sdpa first; the interleaved re-measurement must find that eager is faster.
    slowdown = SlowDown(slow="sdpa", delay_s=0.15, handicapped="eager", handicap_s=0.6)
    # The finalists' budget is the test's (`roomy_finalists`): a share of the search's wall time
    # would leave eager (predicted at its handicapped cost) out of the rounds.
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, {"attn_implementation": ["eager", "sdpa"]}),
        trials=2,
        storage=f"sqlite:///{tmp_path / 'final.db'}",
        seq_len=16,
        measure=FAST,
        callbacks=[slowdown],
        enqueue=[{"attn_implementation": "eager"}, {"attn_implementation": "sdpa"}],
        finalists=2,
        measure_baseline=False,
        finalist_rounds=3,
        isolation="none",  # SlowDown counts what it saw in this process
    )
    search_order = [t.params["attn_implementation"] for t in result.trials if t.state == "COMPLETE"]
    assert search_order[0] == "sdpa"  # the search alone was fooled
    finalists = result.study.user_attrs["finalists"]
    # eager in every round held: the 3 asked for, and more while the lead is undecided or a window
    # was disturbed (sequential rounds: how many hangs on the machine's noise, so it is bounded, not
    # fixed); sdpa until it is decided slower (it leaves the rounds then)
    rounds_held = len(finalists[0]["tokens_per_s"])
    sdpa_rounds = len(finalists[1]["tokens_per_s"])
    assert 3 <= rounds_held <= MAX_ROUNDS and 2 <= sdpa_rounds <= rounds_held
    # 1 search + its rounds; the winner once more, in its whole-run check (the defaults are not
    # measured here: no baseline)
    assert slowdown.seen == {"eager": 1 + rounds_held + 1, "sdpa": 1 + sdpa_rounds}
    assert result.best is not None and result.best.params == {"attn_implementation": "eager"}
    assert result.race is not None and "x the runner-up" in result.race
    medians = [statistics.median(f["tokens_per_s"]) for f in finalists]  # the winner's first
    assert medians[0] > 1.5 * medians[1]
    # and the answer hands it back, with its re-measured mean (no baseline: nothing to keep)
    answer = result.answer
    assert answer.choice is not None and answer.choice.trial == result.best.number, answer.verdict
    assert answer.choice.remeasured and answer.choice.tokens_per_s is not None
    assert answer.choice.tokens_per_s.value == pytest.approx(
        statistics.geometric_mean(finalists[0]["tokens_per_s"])
    )


def test_memory_estimate_is_stored_and_skips_what_is_clearly_over_the_cap(tmp_path: Path) -> None:
    # A batch of 64 at sequence length 256 estimates about 1.1 GiB over the process's baseline
    # (activations measured once at a batch of 2); with a cap 300 MiB over the baseline it is not
    # trained at all. A batch of 1 runs and stores the estimate next to its measured peak.
    probe = KnobProbe()
    cap = (rss_bytes() or 0) + 300 * 2**20
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, {"per_device_train_batch_size": [1, 64]}),
        trials=1,
        storage=f"sqlite:///{tmp_path / 'est.db'}",
        seq_len=256,
        **IN_PROCESS,
        memory_cap=f"{cap}B",
        callbacks=[probe],
        enqueue=[{"per_device_train_batch_size": 64}, {"per_device_train_batch_size": 1}],
    )
    by_batch = {t.params["per_device_train_batch_size"]: t for t in result.trials}
    big, small = by_batch[64], by_batch[1]
    assert big.reason == "over_estimate" and big.attrs["trained"] is False
    assert big.attrs["memory_estimate_bytes"] > cap * 1.25
    assert [seen["batch_size"] for seen in probe.trials] == [1]
    assert small.state == "COMPLETE"
    estimate, peak = small.attrs["memory_estimate_bytes"], small.attrs["peak_memory_bytes"]
    assert small.attrs["memory_estimate_error"] == pytest.approx((estimate - peak) / peak)
    assert abs(small.attrs["memory_estimate_error"]) < 0.5  # the estimate is in the right range
    parts = small.attrs["memory_estimate"]
    assert parts["baseline_bytes"] + parts["static_bytes"] + parts["activation_bytes"] == estimate
