"""What isolating every trial in its own process changes and costs (item 5).

    python -m benchmarks.bench --only isolation      # about 15 minutes on 2 CPU cores

- Paired: the same configurations measured in this process (`Bench`, the in-process trial code) and
  in a fresh worker each (the supervisor's own `measure`), interleaved A(in) A(iso) B(in) B(iso) ...
- Drift: in a fresh process, one configuration measured in-process as the 1st and the 12th
  measurement (10 others of the space in between), against fresh workers.
- Start cost: the forkserver's own start (once per search) and, per worker, the time from asking
  for it to its job running, planning from the store, building the trainer, and ending.
- `make run` wall time with ``--isolation process`` and ``--isolation none``, interleaved.
- A cProfile of one worker's measurement.
"""

from __future__ import annotations

import contextlib
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from autotune.progress import describe_params
from benchmarks._timed_worker import PROFILE_ENV, STAMPS_ENV, report_started, timed_worker_main
from benchmarks.report import fill, k, measured_on, mib, ms, seconds, spread, summary, table

HERE = Path(__file__).resolve().parent

SPACE = "quick"
# `make run`'s search; --max-seconds bounds each window (the default 60 s is reached only when the
# shared machine's load keeps the throughput's CI from settling, which it does not on a quiet one).
MAKE_RUN_ARGS = ("--model", "tiny-gpt2", "--space", "quick", "--trials", "8", "--max-seconds", "10")
RUN_TIMEOUT_S = 1200  # one `make run`; never wait forever on a stuck search
CHILD_TIMEOUT_S = 900
# Paired and drift measurements: a fixed, short window in both modes (the stored run configuration
# gives the workers the same one). Under the shared machine's load the adaptive window runs to its
# 60 s limit; what is compared here is the process, not the window.
WINDOW = {"warmup_steps": 3, "max_warmup_steps": 6, "min_steps": 8, "max_steps": 8}
# Worker phases, in order, from the timestamps: (name, from stamp, to stamp).
PHASES = (
    ("start", "asked", "started"),
    ("prepare", "started", "plan_start"),
    ("plan", "plan_start", "plan_end"),
    ("trainer", "trainer_start", "trainer_end"),
    ("measure", "measure_start", "measure_end"),
    ("teardown", "measure_end", "returned"),
    ("exit", "returned", "reaped"),
)


# -- pure helpers (unit-tested) -------------------------------------------------------------------


def phase_durations(stamps: Mapping[str, float]) -> dict[str, float]:
    """Seconds spent in each worker phase (`PHASES`) that both of its stamps bound."""
    return {
        name: stamps[end] - stamps[start] for name, start, end in PHASES if start in stamps and end in stamps
    }


def overhead(isolated: float, in_process: float) -> float:
    """How much longer the isolated run took, as a fraction of the in-process one."""
    return isolated / in_process - 1.0


def top_functions(profile: pstats.Stats, count: int = 15, min_share: float = 0.02) -> list[dict[str, Any]]:
    """The functions with the largest cumulative time (each at least `min_share` of the total)."""
    stats: dict[Any, Any] = profile.stats  # type: ignore[attr-defined]
    total = max((row[3] for row in stats.values()), default=0.0)
    rows = sorted(stats.items(), key=lambda item: -item[1][3])
    out = []
    for (filename, line, function), (_, calls, _, cumulative, _) in rows:
        if total and cumulative / total < min_share:
            break
        short = "/".join(Path(filename).parts[-2:]) if filename != "~" else ""
        out.append({"function": f"{short}:{line}({function})", "calls": calls, "cumulative_s": cumulative})
        if len(out) == count:
            break
    return out


# -- isolated measurements through the supervisor -------------------------------------------------


@contextlib.contextmanager
def _timed_workers(asked: dict[int, float]) -> Iterator[None]:
    """Workers start `timed_worker_main`; the time each was asked for is recorded by pid."""
    from autotune.executors import forkserver as launcher

    original_init = launcher.WorkerProcess.__init__
    original_main = launcher.worker_main

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        now = time.monotonic()
        original_init(self, *args, **kwargs)
        asked[self.pid] = now

    launcher.WorkerProcess.__init__ = init  # type: ignore[method-assign]
    launcher.worker_main = timed_worker_main  # type: ignore[assignment]
    try:
        yield
    finally:
        launcher.WorkerProcess.__init__ = original_init  # type: ignore[method-assign]
        launcher.worker_main = original_main


class Isolated:
    """Measures knob values in fresh workers, as a search's baseline and finalists are."""

    def __init__(self, model: str, seq_len: int | None) -> None:
        import optuna

        from autotune.config import MeasureSettings, RunConfig
        from autotune.driver.study import describe_study
        from autotune.driver.supervisor import Supervisor
        from autotune.executors.forkserver import ForkserverExecutor
        from autotune.executors.warm import start_forkserver
        from autotune.plan.build import plan_search
        from autotune.plan.resolved import study_fingerprint
        from autotune.progress import Reporter

        self._stack = contextlib.ExitStack()
        self.scratch = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="autotune-iso-")))
        self.stamps = self.scratch / "stamps"
        self.stamps.mkdir()
        self.asked: dict[int, float] = {}
        self._stack.enter_context(_timed_workers(self.asked))
        os.environ[STAMPS_ENV] = str(self.stamps)  # workers get the supervisor's environment
        start_forkserver()
        config = RunConfig(
            model=model,
            space=SPACE,
            seq_len=seq_len,
            seed=0,
            storage=f"sqlite:///{self.scratch}/iso.db",
            measure=MeasureSettings(**WINDOW),
        )
        plan = plan_search(config)
        study = optuna.create_study(
            storage=plan.storage, study_name=plan.study_name, direction="maximize", load_if_exists=True
        )
        describe_study(study, plan, study_fingerprint(plan))
        executor = self._stack.enter_context(ForkserverExecutor(plan, Reporter()))
        self.supervisor = Supervisor(plan, study, executor, Reporter())

    def measure(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
        """Measure `params` once in a fresh worker: its measurements and its phases' seconds."""
        before = set(self.asked)
        started = time.perf_counter()
        attrs = self.supervisor.measure(dict(params), 0, verbatim=True)
        reaped = time.monotonic()
        wall = time.perf_counter() - started
        (pid,) = set(self.asked) - before
        stamps = json.loads((self.stamps / f"{pid}.json").read_text())
        stamps.update(asked=self.asked[pid], reaped=reaped)
        return attrs, {**phase_durations(stamps), "wall": wall}

    def close(self) -> None:
        os.environ.pop(STAMPS_ENV, None)
        self._stack.close()

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bench(model: str, seq_len: int | None) -> Any:
    from autotune.config import MeasureSettings
    from benchmarks.harness import Bench

    return Bench(model, SPACE, seq_len=seq_len, measure=MeasureSettings(**WINDOW))


def _configs(defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        "defaults": defaults,
        "bs16_fused": {**defaults, "per_device_train_batch_size": 16, "optim": "adamw_torch_fused"},
    }


def paired(model: str, seq_len: int | None, rounds: int) -> dict[str, Any]:
    """Each configuration in-process and isolated, interleaved, `rounds` times."""
    with _bench(model, seq_len) as bench, Isolated(model, seq_len) as isolated:
        configs = _configs(bench.baseline())
        raw: dict[str, dict[str, list[dict[str, Any]]]] = {n: {"in": [], "iso": []} for n in configs}
        for round_number in range(rounds):
            for name, params in configs.items():
                got = bench.measure(params, verbatim=True)
                raw[name]["in"].append(
                    {
                        "tokens_per_s": got.tokens_per_s,
                        "peak": got.peak_memory_bytes,
                        "rss_start": got.rss_start_bytes,
                        "setup_s": got.setup_s,
                        "warmup_s": got.warmup_s,
                        "window_s": got.window_s,
                        "wall_s": got.wall_s,
                        "reason": got.reason,
                    }
                )
                attrs, phases = isolated.measure(params)
                raw[name]["iso"].append(
                    {
                        "tokens_per_s": attrs["tokens_per_s"],
                        "peak": attrs.get("peak_memory_bytes"),
                        "rss_start": attrs.get("rss_start_bytes"),
                        "warmup_s": attrs["warmup_s"],
                        "window_s": attrs["window_s"],
                        "phases": phases,
                    }
                )
                print(
                    f"[isolation] {model} round {round_number + 1} {name}: in {k(got.tokens_per_s)} "
                    f"{mib(got.peak_memory_bytes)}, iso {k(attrs['tokens_per_s'])} "
                    f"{mib(attrs.get('peak_memory_bytes'))}, worker {phases['wall']:.1f} s",
                    flush=True,
                )
    out: dict[str, Any] = {"seq_len": seq_len, "rounds": rounds, "configs": {}}
    for name, modes in raw.items():
        row: dict[str, Any] = {"params": configs[name], "raw": modes}
        for mode, runs in modes.items():
            ok = [r for r in runs if r["tokens_per_s"]]
            row[mode] = {
                "tokens_per_s": summary([r["tokens_per_s"] for r in ok]),
                "peak": summary([r["peak"] for r in ok if r["peak"]]),
                "growth": summary([r["peak"] - r["rss_start"] for r in ok if r["peak"] and r["rss_start"]]),
            }
        out["configs"][name] = row
    return out


def worker_phases(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median (and spread) of each phase over the isolated measurements of `paired`."""
    names = [name for name, _, _ in PHASES] + ["wall"]
    return {name: summary([r["phases"][name] for r in runs if name in r["phases"]]) for name in names}


# -- drift, forkserver start, make run, profile ---------------------------------------------------


def _child(mode: str, *args: str) -> dict[str, Any]:
    """Run this module in a fresh process (`--child mode`) and return the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.isolation", "--child", mode, *args],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"isolation child {mode} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def drift_child(model: str, seq_len: int | None, others: int) -> dict[str, Any]:
    """In this (fresh) process: the target in-process as measurement 1 and `others`+2, and in fresh
    workers before and after."""
    with _bench(model, seq_len) as bench, Isolated(model, seq_len) as isolated:
        target = _configs(bench.baseline())["bs16_fused"]
        grid = bench.grid()
        random.Random(0).shuffle(grid)
        first = bench.measure(target, verbatim=True)
        iso_before, _ = isolated.measure(target)
        for params in grid[:others]:
            bench.measure(params)
        later = bench.measure(target, verbatim=True)
        iso_after, _ = isolated.measure(target)
    return {
        "seq_len": seq_len,
        "others": others,
        "params": target,
        "in_first_peak": first.peak_memory_bytes,
        "in_later_peak": later.peak_memory_bytes,
        "in_later_position": others + 2,
        "iso_peaks": [iso_before.get("peak_memory_bytes"), iso_after.get("peak_memory_bytes")],
    }


def forkserver_child(children: int = 3) -> dict[str, Any]:
    """In this (fresh) process: start the forkserver as a search does, then start trivial workers;
    seconds from the request to each one running (the first includes the forkserver's imports)."""
    from autotune.executors.warm import ForkServerProcess, forkserver_context, start_forkserver

    started = time.monotonic()
    start_forkserver()
    context = forkserver_context()
    latencies, running_at = [], []
    for _ in range(children):
        receive, send = context.Pipe(duplex=False)
        asked = time.monotonic()
        process = ForkServerProcess(target=report_started, args=(send,))
        process.start()
        send.close()
        running = receive.recv() if receive.poll(CHILD_TIMEOUT_S) else float("nan")
        latencies.append(running - asked)
        running_at.append(running)
        process.join(10)
        receive.close()
    return {"first_worker_running_s": running_at[0] - started, "children_s": latencies}


def estimate_child(model: str) -> dict[str, Any]:
    """In this (fresh) process, with the forkserver's preload imported: seconds of autotune's memory
    estimate for a trial, cold (what every isolated trial pays: the probe's forward and backward are
    the process's first), again for the same kind (what an in-process search pays), and for a new
    kind (bf16)."""
    import autotune.executors._preload  # noqa: F401  # a worker's starting point
    from autotune.config import RunConfig
    from autotune.measure.estimator import MemoryEstimator
    from autotune.plan import baseline_values, plan_search

    plan = plan_search(RunConfig(model=model, space=SPACE), open_store=False)
    values = baseline_values(plan)
    estimator = MemoryEstimator(plan.workload, plan.hardware.device, plan.base_args)
    out = {}
    for name, params in (
        ("cold", values),
        ("same_kind", values),
        ("new_kind", {**values, "precision": "bf16"}),
    ):
        estimator.refresh_baseline()  # as every trial does
        started = time.perf_counter()
        estimator.estimate(params)
        out[name] = time.perf_counter() - started
    return out


def estimate_cost(model: str, processes: int = 3) -> dict[str, Any]:
    """`estimate_child` in `processes` fresh processes: median (min-max) of each figure."""
    results = [_child("estimate", model) for _ in range(processes)]
    return {name: summary([r[name] for r in results]) for name in results[0]}


def make_run(runs: int) -> dict[str, Any]:
    """`autotune search` as `make run` runs it, on a fresh SQLite store, both isolation modes
    interleaved `runs` times each: wall seconds."""
    autotune = str(Path(sys.executable).with_name("autotune"))
    walls: dict[str, list[float]] = {"process": [], "none": []}
    for index in range(runs):
        for mode in ("process", "none") if index % 2 == 0 else ("none", "process"):
            with tempfile.TemporaryDirectory(prefix="autotune-makerun-") as scratch:
                command = [autotune, "search", *MAKE_RUN_ARGS, "--storage", f"sqlite:///{scratch}/run.db"]
                started = time.perf_counter()
                subprocess.run(
                    [*command, "--isolation", mode], capture_output=True, check=True, timeout=RUN_TIMEOUT_S
                )
                walls[mode].append(time.perf_counter() - started)
                print(f"[isolation] make run --isolation {mode}: {walls[mode][-1]:.1f} s", flush=True)
    medians = {mode: statistics.median(values) for mode, values in walls.items()}
    return {
        "command": "autotune search " + " ".join(MAKE_RUN_ARGS),
        "runs": runs,
        "walls_s": walls,
        "process": summary(walls["process"]),
        "none": summary(walls["none"]),
        "overhead": overhead(medians["process"], medians["none"]),
    }


def profile_worker(model: str, seq_len: int | None) -> dict[str, Any]:
    """A cProfile of one worker measuring the defaults: where its time goes."""
    with tempfile.TemporaryDirectory(prefix="autotune-prof-") as profiles:
        os.environ[PROFILE_ENV] = profiles
        try:
            with Isolated(model, seq_len) as isolated:
                from autotune.plan import baseline_values

                _, phases = isolated.measure(baseline_values(isolated.supervisor.plan))
        finally:
            os.environ.pop(PROFILE_ENV, None)
        (path,) = Path(profiles).glob("*.prof")
        stats = pstats.Stats(str(path))
    return {"phases": phases, "top": top_functions(stats)}


def run(
    presets: Mapping[str, int | None],
    rounds: int,
    runs: int,
    drift_others: int = 10,
    save: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every part of item 5; the raw figures for `render`. `save` gets the figures so far after
    each part (a run cut short keeps what it measured)."""
    out: dict[str, Any] = {"space": SPACE, "window": WINDOW}

    def done() -> None:
        if save is not None:
            save(out)

    print("[isolation] forkserver start, in fresh processes", flush=True)
    out["forkserver"] = [_child("forkserver") for _ in range(3)]
    out["make_run"] = make_run(runs)
    done()
    out["paired"] = {}
    for model, seq_len in presets.items():
        out["paired"][model] = paired(model, seq_len, rounds)
        iso = [r for row in out["paired"].values() for c in row["configs"].values() for r in c["raw"]["iso"]]
        out["worker_phases"] = worker_phases(iso)
        done()
    model, seq_len = next(iter(presets.items()))
    out["profile"] = profile_worker(model, seq_len)
    out["estimate"] = estimate_cost(model)
    done()
    out["drift"] = {}
    for model, seq_len in presets.items():
        print(f"[isolation] drift: {model} as the 1st and {drift_others + 2}th measurement", flush=True)
        out["drift"][model] = _child("drift", model, str(seq_len or 0), str(drift_others))
        done()
    return out


# -- the RESULTS.md section -----------------------------------------------------------------------

ISOLATION_BUDGET = 0.15  # issue 10: isolated `make run` at most 15% slower than in-process
WHAT = {
    "start": "asked for -> the worker's code running (forkserver fork, unpickling the job)",
    "prepare": "process group, parent watch, environment, log file",
    "plan": "the plan from the stored study (`plan_from_study`)",
    "trainer": "the trial `Trainer` built (`build_trainer`)",
    "measure": "the measurement (model build, warm-up, window, release)",
    "teardown": "scratch folder, heap unfreeze, result sent",
    "exit": "the worker's exit seen and joined by the supervisor",
    "wall": "asked for -> result in the supervisor",
}


def worker_cost(data: dict[str, Any]) -> float | None:
    """Isolation's own seconds per worker: every phase's median but the measurement's."""
    phases = data.get("worker_phases")
    if not (phases and data.get("forkserver")):
        return None
    return sum(phases[n]["median"] or 0.0 for n in phases if n not in ("measure", "wall"))


def _paired(data: dict[str, Any]) -> str:
    rows = [
        [
            model,
            run["seq_len"] or "preset",
            name,
            label,
            row[mode]["tokens_per_s"]["n"],
            spread(row[mode]["tokens_per_s"], k),
            spread(row[mode]["peak"], mib),
            spread(row[mode]["growth"], mib),
        ]
        for model, run in data["paired"].items()
        for name, row in run["configs"].items()
        for mode, label in (("in", "in-process"), ("iso", "isolated"))
    ]
    headers = ["preset", "seq", "configuration", "mode", "n", "tok/s", "peak", "growth"]
    return fill("isolation", "paired", space=data["space"], table=table(headers, rows))


def _drift(data: dict[str, Any]) -> str:
    rows = [
        [
            model,
            f"`{describe_params(d['params'])}`",
            mib(d["in_first_peak"]),
            f"{mib(d['in_later_peak'])} (measurement {d['in_later_position']})",
            ", ".join(map(mib, d["iso_peaks"])),
        ]
        for model, d in data["drift"].items()
    ]
    headers = ["preset", "configuration", "in-process, 1st", "in-process, later", "fresh worker"]
    return fill("isolation", "drift", table=table(headers, rows))


def _start(data: dict[str, Any]) -> str:
    first = [f["first_worker_running_s"] for f in data["forkserver"]]
    children = [c for f in data["forkserver"] for c in f["children_s"][1:]]
    phases = [[name, WHAT.get(name, ""), spread(s, ms)] for name, s in data["worker_phases"].items()]
    inside = _inside_measurement(data["paired"])
    return fill(
        "isolation",
        "start",
        first=spread(summary(first), seconds),
        processes=len(first),
        children=spread(summary(children), ms),
        table=table(["phase", "what", "median (min-max)"], phases),
        extra=ms(worker_cost(data)),
        **{
            f"{p}_{mode}": spread(inside[mode][p], seconds)
            for p in ("setup", "warmup")
            for mode in ("in", "iso")
        },
    )


def _make_run(data: dict[str, Any]) -> str:
    run, loaded = data["make_run"], data.get("make_run_loaded")
    rows = [
        [
            mode,
            seconds(run[mode]["median"]),
            f"{seconds(run[mode]['min'])}-{seconds(run[mode]['max'])}",
            ", ".join(f"{w:.0f}" for w in run["walls_s"][mode]),
        ]
        for mode in ("process", "none")
    ]
    overlap = run["process"]["min"] <= run["none"]["max"] and run["none"]["min"] <= run["process"]["max"]
    m = run.get("machine")
    walls = {
        mode: ", ".join(f"{w:.0f}" for w in (loaded or run)["walls_s"][mode]) for mode in ("process", "none")
    }
    return fill(
        "isolation",
        "make_run",
        command=run["command"],
        runs=run["runs"],
        when=f" (measured {m['date']}, commit {m['commit']})" if m else "",
        table=table(["isolation", "median", "min-max", "runs (s)"], rows),
        loaded=fill("isolation", "loaded", runs=loaded["runs"], **walls) if loaded else "",
        fastest=100 * (run["process"]["min"] / run["none"]["min"] - 1),
        overlap=fill("isolation", "overlap") if overlap else "",
        overhead=100 * run["overhead"],
        budget=100 * ISOLATION_BUDGET,
        verdict="met" if run["overhead"] <= ISOLATION_BUDGET else "NOT met",
    )


def _estimate(data: dict[str, Any]) -> str:
    est = data["estimate"]
    first_use = est["cold"]["median"] > 2 * est["new_kind"]["median"]
    return fill(
        "isolation",
        "estimate",
        cold=spread(est["cold"], seconds),
        same=spread(est["same_kind"], seconds),
        new=spread(est["new_kind"], seconds),
        why=fill("isolation", "first_use") if first_use else ".",
    )


def _profile(data: dict[str, Any]) -> str:
    profile = data["profile"]
    rows = [[f"`{r['function']}`", r["calls"], seconds(r["cumulative_s"])] for r in profile["top"]]
    return fill(
        "isolation",
        "profile",
        wall=seconds(profile["phases"]["wall"]),
        measure=seconds(profile["phases"].get("measure")),
        table=table(["function", "calls", "cumulative"], rows),
    )


def render(data: dict[str, Any]) -> str:
    parts = [
        part(data)
        for key, part in (
            ("paired", _paired),
            ("drift", _drift),
            ("forkserver", _start),
            ("make_run", _make_run),
            ("estimate", _estimate),
            ("profile", _profile),
        )
        if data.get(key) and (key != "forkserver" or data.get("worker_phases"))
    ]
    return fill("isolation", "section", measured_on=measured_on(data), parts="\n\n".join(parts)) + "\n"


def claims(data: dict[str, Any]) -> list[str]:
    out = []
    if data.get("paired"):
        pairs, larger_growth = [], True
        for model, run in data["paired"].items():
            for name, row in run["configs"].items():
                tin, tiso = row["in"]["tokens_per_s"]["median"], row["iso"]["tokens_per_s"]["median"]
                pin, piso = row["in"]["peak"]["median"], row["iso"]["peak"]["median"]
                if not (tin and tiso and pin and piso):
                    continue
                pairs.append(f"{model} {name} {tiso / tin:.2f}x tok/s, peak {(piso - pin) / 2**20:+.0f} MiB")
                grew_in, grew_iso = row["in"]["growth"]["median"], row["iso"]["growth"]["median"]
                larger_growth = larger_growth and bool(grew_in and grew_iso and grew_iso > grew_in)
        growth = fill("isolation", "larger_growth") if larger_growth else "."
        out.append(fill("isolation", "paired_claim", pairs="; ".join(pairs), growth=growth))
    if data.get("make_run"):
        run, extra = data["make_run"], worker_cost(data)
        out.append(
            fill(
                "isolation",
                "make_run_claim",
                process=seconds(run["process"]["median"]),
                none=seconds(run["none"]["median"]),
                overhead=100 * run["overhead"],
                runs=run["runs"],
                verdict="met" if run["overhead"] <= ISOLATION_BUDGET else "NOT met",
                worker="" if extra is None else f" A worker costs {ms(extra)} beyond its measurement.",
            )
        )
    return out


def _inside_measurement(paired: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Set-up and warm-up seconds of every paired measurement, per mode (median, min, max)."""
    setup: dict[str, list[float]] = {"in": [], "iso": []}
    warmup: dict[str, list[float]] = {"in": [], "iso": []}
    for run in paired.values():
        for row in run["configs"].values():
            for record in row["raw"].get("in", []):
                if record.get("tokens_per_s") and "warmup_s" in record:
                    setup["in"].append(record["setup_s"])
                    warmup["in"].append(record["warmup_s"])
            for record in row["raw"].get("iso", []):
                measure = record.get("phases", {}).get("measure")
                if record.get("tokens_per_s") and measure is not None:
                    setup["iso"].append(measure - record["warmup_s"] - record["window_s"])
                    warmup["iso"].append(record["warmup_s"])
    return {mode: {"setup": summary(setup[mode]), "warmup": summary(warmup[mode])} for mode in ("in", "iso")}


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--child":
    mode = sys.argv[2]
    if mode == "forkserver":
        result = forkserver_child()
    elif mode == "estimate":
        result = estimate_child(sys.argv[3])
    else:
        model, seq, others = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        result = drift_child(model, seq or None, others)
    print(json.dumps(result), flush=True)
