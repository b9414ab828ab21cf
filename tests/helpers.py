"""Shared pieces of the integration and GPU tests: fast measurement settings, space files, probes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import TrainerCallback

from autotune.options import MeasureSettings

# Enough steps to pass through warm-up into a measured window, few enough for a test.
# No screening: what a test measures must not depend on which configurations this machine runs
# slowly (bf16 without native bf16); tests/*/test_screening.py test it.
FAST = MeasureSettings(
    settle_steps=1,
    max_settle_steps=2,
    min_measure_steps=2,
    measure_steps=3,
    max_seconds=10.0,
    screen_ratio=0.0,
)
# A search that measures only its own trials: fast windows, no baseline, no finalist re-measurement,
# no whole-run check (tests/integration/test_whole_run.py tests it).
FAST_RUN = {"measure": FAST, "finalists": 0, "measure_baseline": False, "whole_run_check": False}
# The same in the test's own process: for probes that record what trials did, and monkeypatches
# (worker processes see neither).
IN_PROCESS = {**FAST_RUN, "isolation": "none"}


def write_file(folder: Path, text: str, name: str = "space.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


class FakeOOM(TrainerCallback):
    """Raises the real CUDA out-of-memory error (as accelerate's tests do) from batch `threshold` up."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.per_device_train_batch_size >= self.threshold:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def write_space(folder: Path, knobs: dict[str, list[Any]], name: str = "probe") -> str:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"knobs": knobs}))
    return str(path)


class KnobProbe(TrainerCallback):
    """Records, inside training, what each trial really ran with.

    At train begin: the optimizer behind accelerate's wrapper, the model's attention implementation
    and checkpointing state, the data loader's batch size. During the first forward of the
    output layer: the activation dtype (autocast) and whether dynamo was tracing (compile).
    """

    def __init__(self) -> None:
        self.trials: list[dict[str, Any]] = []
        self._hook: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        model, optimizer = kw["model"], kw["optimizer"]
        inner = getattr(optimizer, "optimizer", optimizer)
        seen: dict[str, Any] = {
            "optimizer_class": type(inner).__name__,
            "fused": bool(inner.defaults.get("fused")),
            "attn_implementation": model.config._attn_implementation,
            "checkpointing": bool(model.is_gradient_checkpointing),
            "grad_accum": args.gradient_accumulation_steps,
            "batch_size": kw["train_dataloader"].total_batch_size,
            "dataloader_workers": kw["train_dataloader"].base_dataloader.num_workers,
            "mixed_precision": args.mixed_precision,
            "output_dtypes": set(),
            "traced": False,
        }
        self.trials.append(seen)
        if self._hook is not None:
            self._hook.remove()

        def hook(module: Any, inputs: Any, output: Any) -> None:
            logits = output[0] if isinstance(output, tuple) else output
            seen["output_dtypes"].add(logits.dtype)
            if torch.compiler.is_compiling():
                seen["traced"] = True

        self._hook = model.get_output_embeddings().register_forward_hook(hook)


class Fault(TrainerCallback):
    """Injects a fault into one trial of a search, at its `at_step`-th optimizer step: `hang`
    sleeps (the watchdog must end it), `segfault` kills the process with SIGSEGV, `exit` leaves
    with a non-zero code, `raise` raises. Pickled into the worker processes, so it works there too.
    Trials are counted by their parameters, so only the trial that has `params` is hit."""

    def __init__(self, kind: str, params: dict[str, Any], at_step: int = 2, rank: int | None = None) -> None:
        self.kind, self.params, self.at_step, self.rank = kind, dict(params), at_step, rank

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import os
        import signal
        import time

        applied = {
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "precision": "bf16" if args.bf16 else "fp32",
        }
        if state.global_step != self.at_step or any(applied.get(k, v) != v for k, v in self.params.items()):
            return
        if self.rank is not None and int(os.environ.get("RANK", "0")) != self.rank:
            return
        if self.kind == "hang":
            time.sleep(3600)
        elif self.kind == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif self.kind == "exit":
            os._exit(3)
        elif self.kind == "raise":
            raise RuntimeError("injected failure")


class RankRecorder(TrainerCallback):
    """Writes, from every rank of a (DDP) trial, what it trained with: one JSON line per trial in
    `folder/rank<R>.jsonl`. Works across processes, unlike `KnobProbe`."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        import json
        import os

        seen = {
            "batch_size": args.per_device_train_batch_size,
            "bf16": bool(args.bf16),
            "attn_implementation": model.config._attn_implementation,
            "world_size": args.world_size,
        }
        rank = os.environ.get("RANK", "0")
        with open(os.path.join(self.folder, f"rank{rank}.jsonl"), "a") as handle:
            handle.write(json.dumps(seen) + "\n")


def wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    """Poll `predicate` until it holds; fail the test after `timeout_s` (never wait forever)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class FixedStepTime(TrainerCallback):
    """Makes every optimizer step of every configuration take `seconds` (the step's own work must
    be shorter): after the measuring callback has taken its step edge, sleep until the next edge is
    due. Configurations of one batch size then all measure the same tokens/s, within a millisecond
    of scheduling. `by_params` gives some configurations their own step time: ``[(params,
    seconds), ...]``, the first whose params the trial's arguments match (`_applied`). Pickled into
    worker processes like the other probes."""

    def __init__(self, seconds: float, by_params: list[tuple[dict[str, Any], float]] | None = None) -> None:
        self.seconds = seconds
        self.by_params = [(dict(params), s) for params, s in by_params or []]
        self._due: float | None = None
        self._step_s = seconds

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        applied = _applied(args)
        self._step_s = next(
            (s for params, s in self.by_params if all(applied.get(k, v) == v for k, v in params.items())),
            self.seconds,
        )
        self._due = time.perf_counter() + self._step_s

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        now = time.perf_counter()
        due = self._due if self._due is not None else now
        time.sleep(max(0.0, due - now))
        self._due = max(due, now) + self._step_s


class SlowParams(TrainerCallback):
    """Makes every optimizer step of the trials with `params` take `seconds` more (a configuration
    ten times slower than the rest, as bf16 is on a CPU without native bf16). The sleep comes after
    the measuring callback's step edge, so it lands in the next step, the first one's included.
    Pickled into worker processes like the other probes."""

    def __init__(self, params: dict[str, Any], seconds: float) -> None:
        self.params, self.seconds = dict(params), seconds

    def _slowed(self, args: Any) -> bool:
        applied = _applied(args)
        return all(applied.get(k, v) == v for k, v in self.params.items())

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        if self._slowed(args):
            time.sleep(self.seconds)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        if self._slowed(args):
            time.sleep(self.seconds)


class SkipLastBlock(TrainerCallback):
    """Makes the model's last transformer block an identity from the first step on: its parameters
    then get no gradient (a model with unused parameters, as DDP sees it). GPT-2 blocks only."""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        block = model.transformer.h[-1]
        block.forward = lambda hidden_states, *args, **kwargs: hidden_states


def _applied(args: Any) -> dict[str, Any]:
    """The knob values a probe can tell from a trial's `TrainingArguments`."""
    return {
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "precision": "bf16" if args.bf16 else "fp32",
        "torch_compile": args.torch_compile_backend if args.torch_compile else "off",
        "optim": getattr(args.optim, "value", args.optim),
        "activation_checkpointing": bool(args.activation_checkpointing),
    }


class EvalMemory(TrainerCallback):
    """Makes the first evaluation step of a search peak over `over_bytes` (a test's memory cap):
    during its first batch it holds, and writes, as much memory as takes the process's (CPU:
    resident set; CUDA: the allocator's reserved memory) past it, then frees it. Only the whole-run
    check evaluates; the first evaluation (in any process) leaves `marker`, and no later one is
    hit. Pickled into worker processes like `Fault`."""

    def __init__(self, over_bytes: int, marker: str) -> None:
        self.over_bytes, self.marker = over_bytes, marker

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import os

        from autotune.measure.peak import rss_bytes

        if os.path.exists(self.marker):
            return
        with open(self.marker, "w") as handle:
            handle.write(str(os.getpid()))
        cuda = torch.cuda.is_available()
        held = torch.cuda.memory_reserved() if cuda else rss_bytes() or 0
        need = self.over_bytes - held + 64 * 2**20
        if need > 0:
            block = torch.ones(need, dtype=torch.uint8, device="cuda" if cuda else "cpu")
            del block


class DivergeLoss(TrainerCallback):
    """Makes the loss of the trials with `params` diverge, finite: after their first optimizer step
    every weight is multiplied by `factor`, so the logits (and the cross-entropy) blow up while
    staying finite. Pickled into worker processes like `Fault`."""

    def __init__(self, params: dict[str, Any], factor: float = 8.0) -> None:
        self.params, self.factor = dict(params), factor

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        applied = _applied(args)
        if state.global_step != 1 or any(applied.get(k, v) != v for k, v in self.params.items()):
            return
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(self.factor)


class SlowCompile(TrainerCallback):
    """Fakes what compilation does to a trial's timing, deterministically and whatever the steps'
    own work costs: a trial that compiles spends `compile_s` more in its first step (the warm-up
    records it as excess); every step of a trial that does not compile takes `slower_s` more, so
    compiled trials win on throughput. The sleeps come after the measuring callback's step edge,
    so each lands in the step that follows (the first one's in the first step)."""

    def __init__(self, compile_s: float, slower_s: float) -> None:
        self.compile_s, self.slower_s = compile_s, slower_s

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        time.sleep(self.compile_s if args.torch_compile else self.slower_s)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        if not args.torch_compile:
            time.sleep(self.slower_s)


def terminate_connections(
    admin_url: str,
    database: str,
    seconds: float,
    kills: list[int],
    stop: threading.Event | None = None,
    refuse: bool = False,
) -> None:
    """Terminate every connection to `database` but this one, over and over, for `seconds`, or
    until `stop` (a `threading.Event`, if given) is set. `refuse`: the database also refuses every
    new connection meanwhile (``ALLOW_CONNECTIONS false``, given back at the end), so that no
    store call gets through between two terminations, however the machine's load spaces them."""
    import time

    import sqlalchemy

    engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    statement = sqlalchemy.text(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = :database AND pid <> pg_backend_pid()"
    )
    quoted = '"' + database.replace('"', '""') + '"'
    try:
        with engine.connect() as connection:
            if refuse:
                connection.execute(sqlalchemy.text(f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS false"))
            try:
                end = time.monotonic() + seconds
                while time.monotonic() < end and not (stop is not None and stop.is_set()):
                    kills.append(int(connection.execute(statement, {"database": database}).scalar() or 0))
                    time.sleep(0.02)
            finally:
                if refuse:
                    connection.execute(sqlalchemy.text(f"ALTER DATABASE {quoted} ALLOW_CONNECTIONS true"))
    finally:
        engine.dispose()


class TrainedOn(TrainerCallback):
    """Writes what each run trained on, micro-batch by micro-batch: the ``input_ids`` and
    ``labels`` rows the model received, in order, with the run's batch split and checkpointing, one
    JSON file per run in `folder` (the baseline's measurement included). Pickled into worker
    processes like the other probes. `slow_s` adds that many seconds to every optimizer step of a
    run with activation checkpointing: its cost, and nothing else."""

    def __init__(self, folder: str, slow_s: float = 0.0) -> None:
        self.folder, self.slow_s = folder, slow_s
        self._rows: dict[str, list[list[int]]] = {}
        self._handle: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        self._rows = {"input_ids": [], "labels": []}
        self._handle = model.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        for key in ("input_ids", "labels"):
            self._rows[key] += kwargs[key].tolist()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import time

        if args.activation_checkpointing:
            time.sleep(self.slow_s)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        import json
        import os
        import time

        self._handle.remove()
        run = {
            "batch": args.per_device_train_batch_size,
            "accumulation": args.gradient_accumulation_steps,
            "checkpointing": bool(args.activation_checkpointing),
            **self._rows,
        }
        name = f"{time.monotonic_ns()}-{os.getpid()}.json"
        with open(os.path.join(self.folder, name), "w") as handle:
            json.dump(run, handle)


# Stops and continues its parent, `stop_s` stopped then `run_s` running, until its time is up, its
# parent is gone or it is told to end (SIGTERM): it always leaves its parent running.
_THROTTLE = """
import os, signal, sys, time
target, stop_s, run_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
end = time.monotonic() + float(sys.argv[4])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
try:
    while time.monotonic() < end and os.getppid() == target:
        os.kill(target, signal.SIGSTOP)
        time.sleep(stop_s)
        os.kill(target, signal.SIGCONT)
        time.sleep(run_s)
finally:
    try:
        os.kill(target, signal.SIGCONT)
    except ProcessLookupError:
        pass
"""


class Throttle(TrainerCallback):
    """Slows the whole process down from the end of the first run it sees (the baseline's
    measurement, taken before the search) on, as a machine slowed as a whole would: the process is
    stopped (SIGSTOP) `stop_s` out of every `stop_s + run_s` seconds, its steps, set-up and the
    machine probe alike, by a helper process that runs until `stop()` (by pid). A later run in
    another process starts its own helper as its Trainer is built. The helper also ends by itself
    after `limit_s` or when the process is gone, and always leaves it running. `folder` marks the
    first run across processes. Pickled into worker processes like the other probes."""

    def __init__(
        self, folder: str, stop_s: float = 0.004, run_s: float = 0.002, limit_s: float = 180.0
    ) -> None:
        self.folder, self.stop_s, self.run_s, self.limit_s = folder, stop_s, run_s, limit_s
        self._helper: Any = None
        self._first = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_helper": None}  # a process handle stays with its parent

    @property
    def _marker(self) -> str:
        import os

        return os.path.join(self.folder, "first-run")

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import os

        if os.path.exists(self._marker):
            self._start()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import os

        try:  # the first run anywhere creates the marker, and runs at full speed
            os.close(os.open(self._marker, os.O_CREAT | os.O_EXCL))
            self._first = True
        except FileExistsError:
            self._start()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._first:
            self._first = False
            self._start()

    def _start(self) -> None:
        import os
        import subprocess
        import sys

        if self._helper is None:
            timing = [str(os.getpid()), str(self.stop_s), str(self.run_s), str(self.limit_s)]
            self._helper = subprocess.Popen([sys.executable, "-c", _THROTTLE, *timing])

    @property
    def throttling(self) -> bool:
        return self._helper is not None

    def stop(self) -> None:
        """End the helper this process started (it continues this process as it ends)."""
        helper, self._helper = self._helper, None
        if helper is not None:
            helper.terminate()
            helper.wait(timeout=10)


class FakeClock:
    """A clock for code that takes ``clock=`` and ``sleep=``: time moves only when it sleeps, and
    every sleep is recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def study_if_there(storage: Any, name: str) -> Any:
    """Study `name` of `storage` (a URL or a storage) as stored now, polled while a search in
    another process creates it: None until it exists. Opening a store whose tables the search is
    creating races that creation (optuna's first open of a new store inserts its schema version:
    ``UNIQUE constraint failed: alembic_version.version_num``), and a SQLite store may be busy with
    the search's writes: both are "not yet", for the next poll."""
    import optuna
    import sqlalchemy

    try:
        return optuna.load_study(study_name=name, storage=storage)
    except (KeyError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
        return None


def trial_states(storage: str, name: str) -> list[Any]:
    """The states of study `name`'s trials in `storage`, none while the study does not exist yet
    (`study_if_there`)."""
    import optuna
    import sqlalchemy

    study = study_if_there(storage, name)
    try:
        return [t.state for t in study.trials] if study is not None else []
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
        return []


def default_interrupt_signals() -> None:
    """Give a child process SIGINT and SIGTERM's default actions (a ``preexec_fn``): pytest's
    handlers must not be what the search under test inherits."""
    import signal

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def rated_study(
    rates: dict[int, float],
    baseline: bool = True,
    first_step_s: float | None = None,
    window: dict[str, Any] | None = None,
) -> Any:
    """A study whose trials (data-loader workers as their numbers' tags: a knob that leaves the
    training math alone) measured `rates` (number -> tok/s) in windows of 0.1 s steps, each a
    first step of `first_step_s` where given, and the baseline too; `window`: more of their
    measurement's attributes (its steps' spread, say)."""
    first = {"first_step_s": first_step_s} if first_step_s is not None else {}
    first.update(window or {})
    import optuna

    study = optuna.create_study(direction="maximize")
    for number, rate in rates.items():
        study.add_trial(
            optuna.trial.create_trial(
                params={"dataloader_num_workers": number + 1},
                distributions={"dataloader_num_workers": optuna.distributions.IntDistribution(1, 64)},
                value=rate,
                user_attrs={
                    "tokens_per_s": rate,
                    "feasible": True,
                    "peak_memory_bytes": 1,
                    "setup_s": 0.5,
                    "step_time_median_s": 0.1,
                    **first,
                },
            )
        )
    if baseline:
        study.set_user_attr(
            "baseline",
            {
                "params": {"dataloader_num_workers": 0},
                "tokens_per_s": 100.0,
                "peak_memory_bytes": 1,
                "setup_s": 0.5,
                "tokens_per_step": 10.0,
                **first,
            },
        )
    return study
