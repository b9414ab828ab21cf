"""What the benchmarks share: measuring configurations outside a search with the code a search uses
for its trials (`Bench`), a search timed phase by phase and its pick compared with the defaults and
`auto_find_batch_size` (`search_and_compare`), configurations measured as enqueued trials
(`enqueued_rounds`), an autotune command timed in a fresh process (`timed_command`), a scratch
PostgreSQL database (`fresh_database`), and the machine a result was measured on (`machine`).

`Bench` builds the same plan, `AutotuneTrainer` and `ThroughputCallback` as `autotune search`, so a
benchmark's figures come from the measurement protocol the search itself runs (warm-up excluded,
adaptive window, peak memory), and a failure is a recorded reason, as in a trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from autotune.driver.search import search
from autotune.logs import quiet_libraries
from autotune.measure.peak import frozen_heap
from autotune.options import MeasureSettings, RunConfig
from autotune.plan.build import plan_search
from autotune.plan.resolved import Plan, baseline_values
from autotune.progress import Reporter, SearchHeader, TrialSummary
from autotune.space.knobs import Value
from autotune.trial.compose import build_trainer
from autotune.trial.errors import failure_reason
from autotune.trial.memory import estimate_memory

HERE = Path(__file__).resolve().parent
SERVER = os.environ.get("AUTOTUNE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


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
        space: a shipped space name or YAML path.
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

    def baseline(self) -> dict[str, Value]:
        """The Transformers defaults on this machine, as knob values."""
        return baseline_values(self.plan)

    def measure(self, params: Mapping[str, Value], verbatim: bool = False) -> Measurement:
        """Measure `params` once (`verbatim`: knob values outside the space, such as the baseline)."""
        start = time.perf_counter()
        failed: dict[str, str] = {}
        with quiet_libraries():
            try:
                attrs = self.trainer.measure_config(dict(params), number=0, verbatim=verbatim)
            except Exception as exc:
                callback = self.trainer.measurement
                attrs = {"warmup_s": sum(callback.warmup_times_s), "window_s": sum(callback.window_times_s)}
                failed = {
                    "reason": failure_reason(exc),
                    "message": f"{type(exc).__name__}: {exc}".splitlines()[0][:200],
                }
        return Measurement(
            params=dict(params),
            tokens_per_s=attrs.get("tokens_per_s"),
            peak_memory_bytes=attrs.get("peak_memory_bytes"),
            rss_start_bytes=attrs.get("rss_start_bytes"),
            wall_s=time.perf_counter() - start,
            warmup_s=attrs["warmup_s"],
            window_s=attrs["window_s"],
            rel_ci_halfwidth=attrs.get("rel_ci_halfwidth"),
            **failed,
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


def run_search(
    command: list[str], timeout: float, **popen: Any
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a search's process (`command`) to its end: it and its wall seconds.

    Raises:
        RuntimeError: the process failed (its exit status and the end of its output named).
    """
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **popen)
    if done.returncode != 0:
        raise RuntimeError(f"search failed ({done.returncode}): {done.stdout[-1500:]} {done.stderr[-2000:]}")
    return done, time.monotonic() - began


@contextlib.contextmanager
def worktree(rev: str | None, temp: str | Path, repo: Path = HERE) -> Iterator[tuple[str, Path] | None]:
    """A git worktree of commit `rev` of `repo` in `temp` (its short commit and folder), removed
    afterwards; None where no `rev` is given."""
    if rev is None:
        yield None
        return
    git = ["git", "-C", str(repo)]
    folder = Path(temp) / "before"
    commit = subprocess.run([*git, "rev-parse", "--short", rev], capture_output=True, text=True, check=True)
    subprocess.run([*git, "worktree", "add", "--detach", str(folder), commit.stdout.strip()], check=True)
    try:
        yield commit.stdout.strip(), folder
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(folder)], check=False)


def server_engine(**options: Any) -> Any:
    """An engine on `SERVER`'s ``postgres`` database (not a study's)."""
    import sqlalchemy

    from autotune.urls import engine_url

    return sqlalchemy.create_engine(engine_url(f"{SERVER}/postgres"), **options)


def _admin(statement: str) -> None:
    import sqlalchemy

    engine = server_engine(isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(statement))
    finally:
        engine.dispose()


@contextlib.contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """A new database on `SERVER` (its name), dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def timed_command(*args: str, timeout: float) -> tuple[float, subprocess.CompletedProcess[str]]:
    """`autotune ARGS` in a fresh process: its wall seconds and what it printed. Past `timeout`
    it is killed (exit -9, its time the timeout).

    Raises:
        RuntimeError: it exited non-zero (not killed); the end of its output named.
    """
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return timeout, subprocess.CompletedProcess(args, -9, "", f"still running after {timeout:.0f} s")
    if done.returncode != 0:
        raise RuntimeError(
            f"autotune {args[0]} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"
        )
    return time.perf_counter() - start, done


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
        mine = [r[name] for r in per_round if name in r]
        rates = [m["tokens_per_s"] for m in mine if m["tokens_per_s"]]
        pads = [m["padding_fraction"] for m in mine if m["padding_fraction"] is not None]
        peaks = [m["peak_memory_bytes"] for m in mine if m["peak_memory_bytes"]]
        summary[name] = {
            "tokens_per_s": rates,
            "median_tokens_per_s": statistics.median(rates) if rates else None,
            "padding_fraction": statistics.median(pads) if pads else None,
            "peak_memory_bytes": statistics.median(peaks) if peaks else None,
            "reasons": sorted({str(m["reason"]) for m in mine if m["reason"]}),
        }
    return {"per_round": per_round, "summary": summary}


AUTO_FIND_START = 64


class PhaseClock(Reporter):
    """Times a search's phases from its events: baseline, trials (and their set-up, warm-up and
    window), the gaps between trials (sampling, storage), finalist re-measurement."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.marks: list[tuple[str, float]] = []
        self.trials: list[dict[str, Any]] = []
        self._trial_start: float | None = None

    def _mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter()))

    def on_search_start(self, header: SearchHeader) -> None:
        self._mark("search_start")

    def on_note(self, text: str) -> None:
        if text.startswith("measuring the baseline"):
            self._mark("baseline_start")
        elif text.startswith("baseline:") or text.startswith("the baseline failed"):
            self._mark("baseline_end")
        elif text.startswith("re-measuring"):
            self._mark("finalists_start")

    def on_trial_start(self, number: int, params: dict[str, Any]) -> None:
        self._trial_start = time.perf_counter()

    def on_trial_end(self, trial: TrialSummary) -> None:
        if self._trial_start is None or trial.number < 0:
            return
        attrs = trial.attrs
        self.trials.append(
            {
                "number": trial.number,
                "wall_s": time.perf_counter() - self._trial_start,
                "trained": bool(attrs.get("trained", True)),
                "warmup_s": float(attrs.get("warmup_s") or 0.0),
                "compile_s": float(attrs.get("warmup_excess_s") or 0.0),
                "window_s": float(attrs.get("window_s") or 0.0),
                "reason": trial.reason,
            }
        )
        self._trial_start = None

    def on_search_end(self, result: Any) -> None:
        self._mark("search_end")

    def breakdown(self) -> dict[str, float]:
        """Seconds per phase; they add up to the search's wall time."""
        at = dict(self.marks)
        total = at["search_end"] - self.started
        baseline = at.get("baseline_end", 0.0) - at.get("baseline_start", 0.0)
        finalists = at["search_end"] - at["finalists_start"] if "finalists_start" in at else 0.0
        trained = [t for t in self.trials if t["trained"]]
        window = sum(t["window_s"] for t in trained)
        compile_s = sum(t["compile_s"] for t in trained)
        warmup = sum(t["warmup_s"] for t in trained) - compile_s
        trial_wall = sum(t["wall_s"] for t in self.trials)
        setup = sum(t["wall_s"] for t in trained) - window - compile_s - warmup
        skipped = trial_wall - sum(t["wall_s"] for t in trained)
        return {
            "total_s": total,
            "baseline_s": baseline,
            "trials_window_s": window,
            "trials_warmup_s": warmup,
            "trials_compile_s": compile_s,
            "trials_setup_s": setup,
            "skipped_trials_s": skipped,
            "finalists_s": finalists,
            "between_trials_s": total - baseline - trial_wall - finalists,
            "trained_trials": len(trained),
            "skipped_trials": len(self.trials) - len(trained),
        }


def auto_find_batch_size(bench: Bench, defaults: dict[str, Any], start: int) -> tuple[dict[str, Any], int]:
    """The batch `auto_find_batch_size` would train at from `start`: halve while it fails with an
    out-of-memory error. Returns the configuration and how many halvings it took."""
    batch, halvings = start, 0
    while batch >= 1:
        params = {**defaults, "per_device_train_batch_size": batch}
        measured = bench.measure(params, verbatim=True)
        if measured.reason != "oom":
            return params, halvings
        batch, halvings = batch // 2, halvings + 1
    raise RuntimeError("no batch size fits")


def search_and_compare(
    model: str, trials: int, rounds: int, space: str, storage_dir: str | None = None
) -> dict[str, Any]:
    """Search `model` over `space` with `trials` trials, then compare the contenders over `rounds`
    interleaved rounds."""
    with tempfile.TemporaryDirectory(prefix="autotune-bench-", dir=storage_dir) as scratch:
        clock = PhaseClock()
        result = search(
            RunConfig(model=model, space=space, trials=trials, storage=f"sqlite:///{scratch}/bench.db"),
            reporter=clock,
        )
        cost = clock.breakdown()
        time_breakdown = result.study.user_attrs.get("time_breakdown")
        if result.best is None:
            raise RuntimeError(f"{model}: the search found no feasible configuration")
        winner = dict(result.best.params)
        best_trial_index = _trials_to_best(result)
        halvings, rows = compare(model, space, winner, rounds)
    return {
        "model": model,
        "trials": trials,
        "rounds": rounds,
        "auto_find_halvings": halvings,
        "search_wall_s": cost["total_s"],
        "trials_to_best": best_trial_index,
        # what the search told its user: its answer (the defaults, or a trial) and that answer's
        # speedup over the baseline (1.0 when it keeps the defaults), and the speedup it stated for
        # its best measured configuration (the answer, or the alternative named beside the defaults)
        "verdict": result.verdict,
        "rule": result.answer.rule,
        "answer_trial": result.answer.choice.trial if result.answer.choice is not None else None,
        "speedup_reported": result.speedup_over_baseline,
        "best_speedup_reported": _best_speedup(result),
        "cost": cost,
        # the study's own accounting (what `autotune show` prints): finalists' windows count as measured
        "time_breakdown": time_breakdown,
        "trial_times": clock.trials,
        "contenders": rows,
    }


def compare(
    model: str, space: str, winner: dict[str, Any], rounds: int
) -> tuple[int, dict[str, dict[str, Any]]]:
    """The defaults, `auto_find_batch_size` and the search's `winner` in `rounds` interleaved rounds.
    The winner is measured as its values (verbatim): a batch the ladder added is not among the space
    file's listed sizes.
    Returns how many halvings auto_find_batch_size took, and a row per contender.

    Raises:
        RuntimeError: a contender that never measured (its reason named).
    """
    with Bench(model, space) as bench:
        defaults = bench.baseline()
        auto_params, halvings = auto_find_batch_size(bench, defaults, AUTO_FIND_START)
        contenders: dict[str, tuple[dict[str, Any], bool]] = {
            "defaults": (defaults, True),
            "auto_find_batch_size": (auto_params, True),
            "autotune": (winner, True),
        }
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        growth: dict[str, list[int]] = {name: [] for name in contenders}
        peaks: dict[str, list[int]] = {name: [] for name in contenders}
        failures: dict[str, str] = {}
        for _ in range(rounds):
            for name, (params, verbatim) in contenders.items():
                measured = bench.measure(params, verbatim=verbatim)
                if measured.tokens_per_s is not None:
                    samples[name].append(measured.tokens_per_s)
                else:
                    failures[name] = f"{measured.reason}: {measured.message}"
                if measured.peak_memory_bytes:
                    peaks[name].append(measured.peak_memory_bytes)
                    if measured.rss_start_bytes:
                        growth[name].append(measured.peak_memory_bytes - measured.rss_start_bytes)
    never = {name: why for name, why in failures.items() if not samples[name]}
    if never:
        raise RuntimeError(f"{model}: contenders never measured: {never}")
    rows = {}
    reference = statistics.median(samples["defaults"])
    for name, (params, _) in contenders.items():
        values = samples[name]
        rows[name] = {
            "params": params,
            "median_tokens_per_s": statistics.median(values),
            "min_tokens_per_s": min(values),
            "max_tokens_per_s": max(values),
            "samples": values,
            "over_defaults": statistics.median(values) / reference,
            "peak_memory_bytes": statistics.median(peaks[name]) if peaks[name] else None,
            "trial_memory_growth_bytes": statistics.median(growth[name]) if growth[name] else None,
        }
    return halvings, rows


def _best_speedup(result: Any) -> float | None:
    """The speedup over the baseline the search stated for its best measured configuration: the
    answer's, or when the answer keeps the defaults, that of the alternative it names."""
    answer = result.answer
    best = answer.alternative if answer.keeps_defaults else answer.choice
    return best.speedup.value if best is not None and best.speedup is not None else None


def _trials_to_best(result: Any) -> int | None:
    """How many trained trials the search ran until it first measured its winner."""
    if result.best is None:
        return None
    trained = 0
    for trial in sorted(result.trials, key=lambda t: t.number):
        if trial.attrs.get("trained", True):
            trained += 1
        if trial.number == result.best.number:
            return trained
    return None
