"""Pool load: many `autotune worker`s on one PostgreSQL study at once.

    python -m benchmarks.pool_load [--members 8] [--trials 24]   # about 5 minutes on 2 CPU cores

A study is created as `autotune search` creates it (run configuration, fingerprint, space; no
trial yet) in a fresh database of the PostgreSQL server (``AUTOTUNE_TEST_POSTGRES``, default
``postgresql://postgres@127.0.0.1:5432``; dropped afterwards). Then `--members` pool members
(`autotune worker STUDY --storage URL`, one worker process each) are started at the same moment
and measure its budget together. Trials are real but short (tiny-gpt2, sequence length 16, one
warm-up step, a window of 2-3 steps, no screening, no baseline, no finalists), so the load is the
members' store traffic more than their training. While they run, a separate connection polls
``pg_stat_activity`` for the study database's connections and the ones waiting on a lock.

Checked and recorded: the budget is exact (the study holds exactly ``--trials`` measured trials),
no configuration is trained twice, nothing is left ``RUNNING``, and every member exits 0 within
the bound (no deadlock). Results go to ``benchmarks/results/pool_load.json`` and
``benchmarks/RESULTS.md`` by the assembler (`render`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pool_load.json"
COMMAND = "python -m benchmarks.pool_load"
SERVER = os.environ.get("AUTOTUNE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
# 128 combinations, all fp32 (cheap on any CPU): the members' proposals rarely meet by chance.
SPACE = """description: pool load benchmark
knobs:
  per_device_train_batch_size: [1, 2, 4, 8]
  gradient_accumulation_steps: [1, 2, 3, 4]
  optim: [adamw_torch, adamw_torch_fused]
  attn_implementation: [eager, sdpa]
  activation_checkpointing: [true, false]
"""
POLL_S = 0.1
# Why a run can end over its budget (read in the code, not fixed here): rendered when it did.
OVER_BUDGET = (
    "Over the budget: a trial job checks the budget (measured + running trials below it, "
    "`autotune/trial/entry.py` `one_trial`) before it asks the study for a trial, and the trial is "
    "created by that ask; two members that check between another's check and its trial's creation "
    "both start one. Not fixed yet: the check and the creation need one transaction, or a trial "
    "that finds itself past the budget once created must end untrained."
)


class ConnectionPoller(threading.Thread):
    """Counts the database's server connections (and those waiting on a lock) every `POLL_S`,
    from a connection to the server's ``postgres`` database, so that it is not counted itself."""

    def __init__(self, database: str) -> None:
        super().__init__(daemon=True)
        self.engine = _engine()
        self.database = database
        self.samples: list[tuple[int, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        import sqlalchemy

        query = sqlalchemy.text(
            "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') "
            "FROM pg_stat_activity WHERE datname = :database"
        )
        with self.engine.connect() as connection:
            while not self.stopped.wait(POLL_S):
                row = connection.execute(query, {"database": self.database}).one()
                self.samples.append((int(row[0]), int(row[1])))
                connection.commit()  # a fresh snapshot of pg_stat_activity for the next poll

    def stop(self) -> dict[str, Any]:
        self.stopped.set()
        self.join(timeout=10)
        self.engine.dispose()
        counts = [c for c, _ in self.samples] or [0]
        return {
            "samples": len(self.samples),
            "poll_s": POLL_S,
            "peak_connections": max(counts),
            "mean_connections": round(sum(counts) / len(counts), 1),
            "peak_lock_waits": max((w for _, w in self.samples), default=0),
            "samples_with_lock_waits": sum(1 for _, w in self.samples if w),
        }


def _engine(**options: Any) -> Any:
    """An engine on the server's ``postgres`` database (not the study's)."""
    import sqlalchemy

    from autotune.urls import engine_url

    return sqlalchemy.create_engine(engine_url(f"{SERVER}/postgres"), **options)


def _admin(statement: str) -> None:
    import sqlalchemy

    engine = _engine(isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text(statement))
    finally:
        engine.dispose()


def _server_facts() -> dict[str, Any]:
    import sqlalchemy

    engine = _engine()
    try:
        with engine.connect() as connection:
            version = connection.execute(sqlalchemy.text("SHOW server_version")).scalar_one()
            limit = connection.execute(sqlalchemy.text("SHOW max_connections")).scalar_one()
    finally:
        engine.dispose()
    return {"postgres": str(version), "max_connections": int(limit)}


def create_study(url: str, name: str, space: Path, trials: int) -> None:
    """The study `autotune search` would make, with no trial run yet."""
    from autotune.config import MeasureSettings, RunConfig
    from autotune.driver.study import open_study
    from autotune.plan.build import plan_search
    from autotune.progress import Reporter

    fast = MeasureSettings(
        warmup_steps=1, max_warmup_steps=2, min_steps=2, max_steps=3, max_seconds=10.0, screen_ratio=0.0
    )
    config = RunConfig(
        model="tiny-gpt2",
        space=str(space),
        trials=trials,
        storage=url,
        study=name,
        seq_len=16,
        measure=fast,
        finalists=0,
        measure_baseline=False,
        whole_run_check=False,
    )
    plan = plan_search(config)
    open_study(plan, Reporter())
    plan.storage.engine.dispose()  # its connections would count as the members' otherwise


def run_members(url: str, name: str, members: int, bound_s: float, folder: Path) -> list[dict[str, Any]]:
    """Start `members` pool members at once; wait for all (killing what is left at `bound_s`)."""
    command = [sys.executable, "-m", "autotune", "worker", name, "--storage", url]
    logs = [folder / f"member-{i}.log" for i in range(members)]
    procs = []
    start = time.monotonic()
    for log in logs:
        with log.open("w") as out:
            procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
    ended: list[dict[str, Any]] = []
    for proc, log in zip(procs, logs, strict=True):
        left = max(1.0, bound_s - (time.monotonic() - start))
        try:
            code: int | None = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            code = None
        ended.append({"pid": proc.pid, "exit": code, "s": round(time.monotonic() - start, 1), "log": log})
    for proc in procs:  # past the bound: a deadlock; end them so the database can be dropped
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    for member in ended:
        text = member.pop("log").read_text().strip()
        if member["exit"] != 0:  # what it said last, for the record
            member["output_tail"] = text[-2000:]
    return ended


def study_facts(url: str, name: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """What the study holds after the members ended."""
    import optuna

    from autotune.study.store import measured_count, open_storage, summarize_trial, was_trained

    storage = open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials()
        trained = [t for t in trials if was_trained(t)]
        params = Counter(json.dumps(t.params, sort_keys=True) for t in trained)
        by_pid = Counter((t.user_attrs.get("worker") or {}).get("pid") for t in trained)
        supervisors = {m["pid"] for m in members}
        reasons = Counter(_why_untrained(summarize_trial(t)) for t in trials if not was_trained(t))
        return {
            "trials_stored": len(trials),
            "measured": measured_count(study),
            "trained_twice": sum(n - 1 for n in params.values() if n > 1),
            "running_left": sum(1 for t in trials if t.state == optuna.trial.TrialState.RUNNING),
            "states": dict(Counter(t.state.name for t in trials)),
            "untrained_reasons": dict(reasons),
            "trained_by_worker_processes": len(by_pid),
            "supervisor_pids": len(supervisors),
        }
    finally:
        storage.engine.dispose()


def _why_untrained(record: Any) -> str:
    """A trial that cost no training: its reason, or ``reused`` (a duplicate of a finished one)."""
    if record.reason:
        return str(record.reason)
    return "reused" if record.duplicate_of is not None else str(record.state)


def measure(members: int, trials: int, bound_s: float) -> dict[str, Any]:
    database = f"autotune_pool_load_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{database}"')
    url = f"{SERVER}/{database}"
    poller = ConnectionPoller(database)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-pool-load-") as temp:
            folder = Path(temp)
            space = folder / "space.yaml"
            space.write_text(SPACE)
            create_study(url, "pool", space, trials)
            poller.start()
            start = time.monotonic()
            ended = run_members(url, "pool", members, bound_s, folder)
            wall_s = time.monotonic() - start
            connections = poller.stop()
            study = study_facts(url, "pool", ended)
    finally:
        if poller.is_alive():
            poller.stop()
        _admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    checks = {
        "budget_exact": study["measured"] == trials,
        "none_trained_twice": study["trained_twice"] == 0,
        "nothing_running": study["running_left"] == 0,
        "all_exited_0_in_bound": all(m["exit"] == 0 for m in ended),
    }
    return {
        "members": members,
        "trials": trials,
        "space_size": 128,
        "bound_s": bound_s,
        "wall_s": round(wall_s, 1),
        "server": _server_facts(),
        "connections": connections,
        "study": study,
        "member_ends": ended,
        "checks": checks,
    }


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def render(results: dict[str, Any]) -> str:
    """The RESULTS.md subsection of the Reliability section, from `results` (the JSON)."""
    m = results["machine"]
    study, conn, checks = results["study"], results["connections"], results["checks"]
    slowest = max(member["s"] for member in results["member_ends"])
    exits = Counter(str(member["exit"]) for member in results["member_ends"])
    exit_text = ", ".join(f"{n} exited {code}" for code, n in sorted(exits.items()))
    lines = [
        "### Pool load: eight members on one PostgreSQL study\n",
        f"*Measured {m['date']} on {m['cpu']}, {m['cores']} threads, shared with other agents' jobs "
        f"while it ran; PostgreSQL {results['server']['postgres']} (max_connections "
        f"{results['server']['max_connections']}); Python {m['python']}, torch {m['torch']}, optuna "
        f"{m['optuna']}; autotune commit {m['commit']}.*\n",
        f"Command: `{COMMAND} --members {results['members']} --trials {results['trials']}`. One study "
        f"(budget {results['trials']}, {results['space_size']} combinations) created as `autotune search` "
        f"creates it; {results['members']} `autotune worker`s started at the same moment measure it "
        "together, with short real trials (tiny-gpt2, sequence length 16, a 2-3 step window), so the "
        f"load is mostly the store's. `pg_stat_activity` polled every {conn['poll_s']} s "
        f"({conn['samples']} samples).\n",
        "| check | result |",
        "|---|---|",
        f"| budget exact: measured trials = budget | {_yes(checks['budget_exact'])}: "
        f"{study['measured']} measured of {results['trials']} ({study['trials_stored']} trials stored; "
        f"not trained: {_reasons(study['untrained_reasons'])}) |",
        f"| no configuration trained twice | {_yes(checks['none_trained_twice'])}: "
        f"{study['trained_twice']} repeats |",
        f"| nothing left `RUNNING` | {_yes(checks['nothing_running'])}: {study['running_left']} |",
        f"| no deadlock: every member ends within {results['bound_s']:.0f} s | "
        f"{_yes(checks['all_exited_0_in_bound'])}: {exit_text}; the last after {slowest:.0f} s |",
        f"| server connections to the study's database | peak {conn['peak_connections']}, mean "
        f"{conn['mean_connections']} |",
        f"| connections waiting on a lock | peak {conn['peak_lock_waits']} (in "
        f"{conn['samples_with_lock_waits']} of {conn['samples']} samples) |",
        "",
    ]
    if not checks["budget_exact"]:
        lines += [OVER_BUDGET, ""]
    return "\n".join(lines)


def _reasons(reasons: dict[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "none"


def main() -> None:
    from benchmarks.harness import machine
    from benchmarks.report import store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--bound-s", type=float, default=900.0, help="a member still running then: deadlock")
    args = parser.parse_args()
    data = {"machine": machine(), **measure(args.members, args.trials, args.bound_s)}
    store("pool_load", data)


if __name__ == "__main__":
    main()
