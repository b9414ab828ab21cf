"""The pre-checks that decide a trial needs no training (`autotune.trial.feasibility.precheck`)."""

from __future__ import annotations

from autotune.trial.feasibility import PastTrial, precheck

MiB = 2**20


def _params(bs: int, ckpt: bool = False, prec: str = "bf16") -> dict[str, object]:
    return {"per_device_train_batch_size": bs, "activation_checkpointing": ckpt, "precision": prec}


class _Estimate:
    """An estimate that counts how often it was asked for."""

    def __init__(self, value: int | None) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> int | None:
        self.calls += 1
        return self.value


def test_a_duplicate_is_reused_before_anything_is_estimated() -> None:
    past = [PastTrial(3, _params(8), None)]
    estimate = _Estimate(10**12)
    assert precheck(_params(8), past, estimate, cap_bytes=100 * MiB) == ("duplicate", past[0])
    assert estimate.calls == 0


def test_a_reused_trial_is_not_a_source_of_reuse() -> None:
    past = [PastTrial(3, _params(8), "duplicate")]
    assert precheck(_params(8), past, _Estimate(None), cap_bytes=None) is None


def test_a_larger_batch_than_an_oom_is_predicted_out_of_memory() -> None:
    past = [PastTrial(1, _params(16), "oom"), PastTrial(2, _params(8), None)]
    estimate = _Estimate(None)
    assert precheck(_params(32), past, estimate, cap_bytes=None) == ("oom_predicted", past[0])
    assert estimate.calls == 0
    # Checkpointing on needs less memory: not predicted.
    assert precheck(_params(32, ckpt=True), past, estimate, cap_bytes=None) is None


def test_an_estimate_clearly_over_the_cap_is_skipped_and_one_near_it_runs() -> None:
    assert precheck(_params(8), [], _Estimate(200 * MiB), cap_bytes=100 * MiB) == ("over_estimate", None)
    assert precheck(_params(8), [], _Estimate(110 * MiB), cap_bytes=100 * MiB) is None  # within the margin
    assert precheck(_params(8), [], _Estimate(None), cap_bytes=100 * MiB) is None  # no estimate: run it


def test_without_a_cap_the_estimate_is_still_made_for_the_record() -> None:
    estimate = _Estimate(10**12)
    assert precheck(_params(8), [], estimate, cap_bytes=None) is None
    assert estimate.calls == 1


def _ddp(bs: int, find_unused: bool | None, static: bool = False) -> dict[str, object]:
    params: dict[str, object] = {**_params(bs), "ddp_static_graph": static}
    if find_unused is not None:
        params["ddp_find_unused_parameters"] = find_unused
    return params


def test_a_model_with_unused_parameters_keeps_their_search_on() -> None:
    failed = PastTrial(4, _ddp(8, False), "unused_parameters")
    estimate = _Estimate(None)
    # Any other trial without the search, under the same graph setting, would fail the same way.
    skip = precheck(_ddp(16, False), [failed], estimate, cap_bytes=None)
    assert skip == ("unused_parameters_known", failed)
    assert estimate.calls == 0
    # With the search on, or left to the Trainer, or with a static graph (DDP handles them then), it runs.
    for params in (_ddp(16, True), _ddp(16, None), _ddp(16, False, static=True)):
        assert precheck(params, [failed], _Estimate(None), cap_bytes=None) is None
    # Another failure is no evidence of unused parameters.
    assert (
        precheck(_ddp(16, False), [PastTrial(4, _ddp(8, False), "nan_loss")], _Estimate(None), None) is None
    )


def test_unused_parameters_are_a_configuration_that_cannot_run_for_the_sampler() -> None:
    from autotune.store.outcomes import NOT_TRAINED, constraint_values

    for reason in ("unused_parameters", "unused_parameters_known", "unavailable"):
        assert constraint_values(reason, None, None)["runs_here"] == 1.0
    assert constraint_values("oom", None, None)["runs_here"] == 0.0
    assert "unused_parameters_known" in NOT_TRAINED and "unused_parameters" not in NOT_TRAINED
