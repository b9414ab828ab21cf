"""Measure configurations outside a search, with the code a search uses for its trials.

`Bench` builds the same plan, `AutotuneTrainer` and `ThroughputCallback` as `autotune search`, so a
benchmark's figures come from the measurement protocol the search itself runs (warm-up excluded,
adaptive window, peak memory), and a failure is a recorded reason, as in a trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from autotune.config import MeasureSettings, RunConfig
from autotune.logs import quiet_libraries
from autotune.measure.memory import frozen_heap
from autotune.plan.build import plan_search
from autotune.plan.resolved import Plan, baseline_values
from autotune.progress import Reporter
from autotune.space.knobs import Value
from autotune.trial.compose import build_trainer
from autotune.trial.errors import failure_reason
from autotune.trial.memory import estimate_memory


@dataclasses.dataclass
class Measurement:
    """One configuration measured once.

    Attributes:
        params: the knob values.
        tokens_per_s: steady-state throughput, or None when the configuration failed.
        peak_memory_bytes: the trial's peak (CPU: process RSS high-water mark).
        rss_start_bytes: the process's memory when the trial began (CPU).
        wall_s: the whole measurement, model build to release.
        warmup_s: warm-up steps (compilation included).
        window_s: the measured window.
        reason: why it failed (``oom``, ``compile_error``, ...), None when it ran.
    """

    params: dict[str, Value]
    tokens_per_s: float | None
    peak_memory_bytes: int | None
    rss_start_bytes: int | None
    wall_s: float
    warmup_s: float
    window_s: float
    reason: str | None = None
    message: str | None = None
    rel_ci_halfwidth: float | None = None

    @property
    def setup_s(self) -> float:
        """Everything that is neither warm-up nor window: model build, Trainer and Accelerator
        set-up, data loader, and memory release after the trial."""
        return max(0.0, self.wall_s - self.warmup_s - self.window_s)


class Bench:
    """Measures configurations of one workload with the search's own trainer.

    Args:
        model: a preset or model path, as for ``autotune search --model``.
        space: a shipped space name or YAML path; its values are what `grid` enumerates.
        measure: the measurement protocol (the search's default unless given).
        seed: model initialisation and data seed.
        freeze_heap: as a search does, keep the long-lived objects out of the garbage collector's
            walks (False: measure what that saves).
        seq_len: tokens per sample (the preset's unless given).
    """

    def __init__(
        self,
        model: str,
        space: str,
        measure: MeasureSettings | None = None,
        seed: int = 0,
        freeze_heap: bool = True,
        seq_len: int | None = None,
    ) -> None:
        config = RunConfig(
            model=model, space=space, seed=seed, measure=measure or MeasureSettings(), seq_len=seq_len
        )
        self.plan: Plan = plan_search(config, open_store=False)
        self._scratch = tempfile.mkdtemp(prefix="autotune-bench-")
        with quiet_libraries():
            self.trainer = build_trainer(self.plan, self._scratch, Reporter())
        self._heap = contextlib.ExitStack()  # as a search does around its trials
        if freeze_heap:
            self._heap.enter_context(frozen_heap())

    def grid(self) -> list[dict[str, Value]]:
        """Every configuration of the space that can run on this machine."""
        return self.plan.space.grid()

    def baseline(self) -> dict[str, Value]:
        """The Transformers defaults on this machine, as knob values."""
        return baseline_values(self.plan)

    def measure(self, params: Mapping[str, Value], verbatim: bool = False) -> Measurement:
        """Measure `params` once (`verbatim`: knob values outside the space, such as the baseline)."""
        start = time.perf_counter()
        with quiet_libraries():
            try:
                attrs = self.trainer.measure_config(dict(params), number=0, verbatim=verbatim)
            except Exception as exc:
                callback = self.trainer.measurement
                return Measurement(
                    params=dict(params),
                    tokens_per_s=None,
                    peak_memory_bytes=None,
                    rss_start_bytes=None,
                    wall_s=time.perf_counter() - start,
                    warmup_s=sum(callback.warmup_times_s),
                    window_s=sum(callback.window_times_s),
                    reason=failure_reason(exc),
                    message=f"{type(exc).__name__}: {exc}".splitlines()[0][:200],
                )
        return Measurement(
            params=dict(params),
            tokens_per_s=attrs["tokens_per_s"],
            peak_memory_bytes=attrs.get("peak_memory_bytes"),
            rss_start_bytes=attrs.get("rss_start_bytes"),
            wall_s=time.perf_counter() - start,
            warmup_s=attrs["warmup_s"],
            window_s=attrs["window_s"],
            rel_ci_halfwidth=attrs.get("rel_ci_halfwidth"),
        )

    def estimate_bytes(self, params: Mapping[str, Value]) -> int | None:
        """autotune's memory estimate for `params` (what the search would skip on)."""
        estimate = estimate_memory(self.trainer.estimator, dict(params))
        return None if estimate is None else int(estimate.total_bytes)

    def close(self) -> None:
        self._heap.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        shutil.rmtree(self._scratch, ignore_errors=True)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import optuna
    import transformers

    cpu = platform.processor() or platform.machine()
    native_bf16 = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and native_bf16 is None:
                native_bf16 = bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[1].split()))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": torch.get_num_threads(),
        "native_bf16": native_bf16,  # without it (AVX2 only) bf16 is emulated, several times slower
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "optuna": optuna.__version__,
        "commit": commit,
    }


def enqueued_rounds(
    configs: Mapping[str, Mapping[str, Any]],
    space_knobs: Mapping[str, list[Any]],
    folder: Path,
    rounds: int,
    **search: Any,
) -> dict[str, Any]:
    """Measure each named configuration once per round as a real trial of ``autotune search``
    (worker processes, the default measurement, no screening, baseline or finalists), the
    configurations of round r in an order rotated by r, each round its own study. Each
    configuration gives every knob of the space (an enqueued trial's missing knobs would be
    sampled). Returns the per-round rows and, per configuration, its rounds' tokens/s and their
    median."""
    import statistics

    import yaml

    import autotune

    space = folder / "space.yaml"
    space.write_text(yaml.safe_dump({"knobs": {k: list(v) for k, v in space_knobs.items()}}))
    names = list(configs)
    for name, config in configs.items():
        if set(config) != set(space_knobs):
            knobs = ", ".join(sorted(space_knobs))
            raise ValueError(f"configuration {name!r} must give every knob of the space: {knobs}")
    per_round: list[dict[str, dict[str, Any]]] = []
    for index in range(rounds):
        order = names[index % len(names) :] + names[: index % len(names)]
        result = autotune.search(
            space=str(space),
            trials=len(order),
            storage=f"sqlite:///{folder / f'round{index}.db'}",
            finalists=0,
            measure_baseline=False,
            enqueue=[dict(configs[name]) for name in order],
            measure=MeasureSettings(screen_ratio=0.0),
            **search,
        )
        rows: dict[str, dict[str, Any]] = {}
        for trial in result.trials:
            name = next(n for n, c in configs.items() if trial.params == dict(c))
            rows[name] = {
                "state": trial.state,
                "reason": trial.reason,
                "tokens_per_s": trial.tokens_per_s,
                "rel_ci_halfwidth": trial.rel_ci_halfwidth,
                "peak_memory_bytes": trial.peak_memory_bytes,
                **{
                    k: trial.attrs.get(k)
                    for k in ("padding_fraction", "window_tokens", "measured_steps", "ddp")
                },
            }
        per_round.append(rows)
        print(f"round {index + 1}: {rows}", flush=True)
    summary: dict[str, Any] = {}
    for name in names:
        rates = [r[name]["tokens_per_s"] for r in per_round if r.get(name, {}).get("tokens_per_s")]
        pads = [
            r[name]["padding_fraction"]
            for r in per_round
            if r.get(name, {}).get("padding_fraction") is not None
        ]
        peaks = [r[name]["peak_memory_bytes"] for r in per_round if r.get(name, {}).get("peak_memory_bytes")]
        summary[name] = {
            "tokens_per_s": rates,
            "median_tokens_per_s": statistics.median(rates) if rates else None,
            "padding_fraction": statistics.median(pads) if pads else None,
            "peak_memory_bytes": statistics.median(peaks) if peaks else None,
            "reasons": sorted({str(r[name]["reason"]) for r in per_round if r.get(name, {}).get("reason")}),
        }
    return {"per_round": per_round, "summary": summary}
