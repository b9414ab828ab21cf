"""What a trial's measurement is completed with before it is judged and stored: every rank's peak,
the seconds its configuration takes to compile cold, its MFU, and the study's best it is screened
against. Each takes and returns a `TrialRecord` (or reads the study through `autotune.records`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from autotune.measure.flops import flops_per_token, matmul_precision, mfu, model_shape
from autotune.measure.ranks import is_rank_zero
from autotune.measure.screen import ScreenReference
from autotune.plan.resolved import Plan, trial_world_size
from autotune.records import TrialRecord, read_study
from autotune.space.defaults import tf32_matmuls
from autotune.space.knobs import Value
from autotune.store.objective import compile_s, predicted_run_s, run_tokens
from autotune.store.session import StudyStore
from autotune.trial.compile_cache import CompileCache, cold_compile_s, compile_key, study_compile_cache


def with_rank_peaks(record: TrialRecord, peaks: Sequence[int | None]) -> TrialRecord:
    """A trial's record with every rank's peak (`peaks`, in rank order): its peak is the largest
    rank's. Tokens/s is already the whole job's (every rank steps together; samples per step
    count the world size). One rank: the record as it is."""
    if len(peaks) <= 1:
        return record
    every = [int(peak or 0) for peak in peaks]
    return replace(
        record,
        measurement=replace(record.measurement, world_size=len(every)),
        memory=replace(record.memory, peak_bytes=max(every), rank_peaks_bytes=every),
    )


def cold_compile(plan: Plan, values: dict[str, Value], record: TrialRecord) -> float | None:
    """What this configuration took to compile cold (`compile_cache.cold_compile_s`): this
    trial's own one-off seconds when it compiled cold, the cold trial's when the cache served it;
    None on other ranks than 0, or when nothing compiled."""
    cache = record.compile.cache
    if not is_rank_zero() or cache is None:
        return None
    workload = plan.workload
    identity = {
        "model": workload.name,
        "task": workload.task,
        "seq_len": workload.seq_len,
        "world_size": trial_world_size(plan.config),
        "values": values,
    }
    folder = study_compile_cache(plan)
    return cold_compile_s(folder, compile_key(identity), compile_s(record), cast(CompileCache, cache))


def with_mfu(
    record: TrialRecord, flops_per_token: float, hardware: Any, precision: str, devices: int
) -> TrialRecord:
    """A trial's record with its model FLOPs per token and, on CUDA, the precision its matmuls ran
    in and its MFU (`autotune.measure.flops.mfu`; none for a CPU: no peak FLOPS is guessed).
    `hardware`: the plan's (``cuda``, ``name``); `devices`: the trial's world size."""
    rate = record.tokens_per_s
    if rate is None:
        return record
    if not hardware.cuda:
        return replace(record, measurement=replace(record.measurement, model_flops_per_token=flops_per_token))
    applied = matmul_precision(precision, tf32_matmuls())
    measurement = replace(
        record.measurement,
        model_flops_per_token=flops_per_token,
        matmul_precision=applied,
        mfu=mfu(rate, flops_per_token, hardware.name, applied, devices=devices),
    )
    return replace(record, measurement=measurement)


def with_parameters(record: TrialRecord, estimator: Any) -> TrialRecord:
    """The record with the parameters its model trains (an adapter's, under peft) and has
    (`estimator`: the trial's `autotune.measure.estimator.MemoryEstimator`)."""
    try:
        trainable, total = estimator.trainable_params, estimator.n_params
    except Exception:  # a model whose parameters cannot be counted records none
        return record
    return replace(record, trainable_params=trainable, total_params=total)


def with_model_mfu(
    record: TrialRecord, estimator: Any, workload: Any, hardware: Any, precision: str, devices: int
) -> TrialRecord:
    """`with_mfu` with the FLOPs per token of the trial's model (its shape from the workload's
    config, its parameters from `estimator`); the record as it is where they cannot be counted."""
    if record.tokens_per_s is None:
        return record
    try:
        layers, hidden = model_shape(workload.config)
        per_token = flops_per_token(
            estimator.n_params, layers, hidden, workload.seq_len, estimator.trainable_params
        )
    except Exception:  # a model whose parameters cannot be counted gets no MFU
        return record
    return with_mfu(record, per_token, hardware, precision, devices)


def screen_reference(
    study: StudyStore | None, screen_ratio: float, train_tokens: int | None, train_steps: int | None
) -> ScreenReference | None:
    """The study's best so far (its completed trials and its baseline), which a search trial is
    screened against (`autotune.measure.screen.ScreenReference`): the best tokens/s, and with
    the user's run length (`run_tokens`) the shortest predicted run of it (`predicted_run_s`), each
    with the machine probe its trial recorded around its window. None where nothing is measured yet, for
    trials outside a stored study, or with screening off (`screen_ratio` 0, as
    `MeasureSettings.screen_ratio`: the promotion line is off too). `train_tokens`, `train_steps`:
    the user's run length, as the run options give it.

    The set-up a trial's run is granted is the least any measured run took: every configuration
    loads the same model and data and builds the same Trainer before its first step, so none
    starts sooner than the quickest measured; zero would leave every trial of a short run, where
    set-up is most of the time, unscreenable. Its compilation is granted none (see
    `ScreenReference`): when a trial is judged its warm-up, which holds compilation, is not over."""
    if study is None or screen_ratio <= 0:
        return None
    baseline = read_study(study).baseline
    measured = [r for r in study.records(("COMPLETE",)) if r.tokens_per_s]
    if baseline.tokens_per_s:
        measured.append(baseline.as_trial())
    if not measured:
        return None
    fastest = max(measured, key=lambda r: float(r.tokens_per_s or 0.0))
    reference = ScreenReference(float(fastest.tokens_per_s or 0.0), fastest.measurement.probe_s)
    tokens = run_tokens(train_tokens, train_steps, baseline)
    if tokens is None:
        return reference
    runs = [(seconds, r) for r in measured if (seconds := predicted_run_s(r, tokens))]
    if not runs:
        return reference
    run_s, shortest = min(runs, key=lambda run: run[0])
    setup_s = min(float(r.measurement.setup_s or 0.0) for r in measured)
    return replace(
        reference, probe_s=shortest.measurement.probe_s, run_tokens=tokens, run_s=run_s, setup_s=setup_s
    )
