"""Pool load: many `autotune worker`s on one PostgreSQL study at once.

    python -m benchmarks.pool_load [--members 8] [--trials 24]   # about 5 minutes on 2 CPU cores

A study created as `autotune search` creates it (no trial yet), in a fresh database of the server
(``AUTOTUNE_TEST_POSTGRES``; dropped afterwards), is measured by `--members` pool members started at
once, with short real trials (tiny-gpt2, sequence length 16, no screening, baseline or finalists),
while ``pg_stat_activity`` is polled for the database's connections and lock waits. Checked: the
budget is exact, no configuration trained twice, nothing left ``RUNNING``, every member exits 0
within the bound (no deadlock). Results: ``results/pool_load.json`` and its section (`render`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from autotune.store.session import StudyStore
from benchmarks import report
from benchmarks.assemble import store

RESULTS = report.RESULTS / "pool_load.json"
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
OVER_BUDGET = report.fill("pool_load", "over_budget")  # why a run can end over its budget


class ConnectionPoller(threading.Thread):
    """Counts the database's connections (and those waiting on a lock) every `POLL_S`, from the
    server's ``postgres`` database, so that it is not counted itself."""

    def __init__(self, database: str) -> None:
        from benchmarks.harness import server_engine

        super().__init__(daemon=True)
        self.engine, self.database = server_engine(), database
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


def _server_facts() -> dict[str, Any]:
    import sqlalchemy

    from benchmarks.harness import server_engine

    engine = server_engine()
    try:
        with engine.connect() as connection:
            version = connection.execute(sqlalchemy.text("SHOW server_version")).scalar_one()
            limit = connection.execute(sqlalchemy.text("SHOW max_connections")).scalar_one()
    finally:
        engine.dispose()
    return {"postgres": str(version), "max_connections": int(limit)}


def create_study(url: str, name: str, space: Path, trials: int) -> None:
    """The study `autotune search` would make, with no trial run yet."""
    from autotune.driver.study import open_study
    from autotune.options import MeasureSettings, RunConfig
    from autotune.plan.build import plan_search
    from autotune.progress import Reporter

    fast = MeasureSettings(
        settle_steps=1,
        max_settle_steps=2,
        min_measure_steps=2,
        measure_steps=3,
        max_seconds=10.0,
        screen_ratio=0.0,
    )
    config = RunConfig(
        model="tiny-gpt2", space=str(space), trials=trials, storage=url, study=name, seq_len=16, measure=fast,
        finalists=0, measure_baseline=False, whole_run_check=False,
    )  # fmt: skip
    plan = plan_search(config)
    open_study(plan, Reporter())
    plan.storage.engine.dispose()  # its connections would count as the members' otherwise


def run_members(url: str, name: str, members: int, bound_s: float, folder: Path) -> list[dict[str, Any]]:
    """Start `members` pool members at once; wait for all (killing what is left at `bound_s`)."""
    command = [sys.executable, "-m", "autotune", "worker", "--study", name, "--storage", url]
    logs = [folder / f"member-{i}.log" for i in range(members)]
    start = time.monotonic()
    procs = []
    for log in logs:
        with log.open("w") as out:
            procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
    ended: list[dict[str, Any]] = []
    for proc, log in zip(procs, logs, strict=True):
        try:
            code: int | None = proc.wait(timeout=max(1.0, bound_s - (time.monotonic() - start)))
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

    from autotune.store.storage import open_storage
    from autotune.store.trials import measured_count, summarize_trial, was_trained

    storage = open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials()
        trained = [t for t in trials if was_trained(t)]
        params = Counter(json.dumps(t.params, sort_keys=True) for t in trained)
        reasons = Counter(_why_untrained(summarize_trial(t)) for t in trials if not was_trained(t))
        return {
            "trials_stored": len(trials),
            "measured": measured_count(StudyStore(study)),
            "trained_twice": sum(n - 1 for n in params.values() if n > 1),
            "running_left": sum(1 for t in trials if t.state == optuna.trial.TrialState.RUNNING),
            "states": dict(Counter(t.state.name for t in trials)),
            "untrained_reasons": dict(reasons),
            "trained_by_worker_processes": len(
                {(t.user_attrs.get("worker") or {}).get("pid") for t in trained}
            ),
            "supervisor_pids": len({m["pid"] for m in members}),
        }
    finally:
        storage.engine.dispose()


def _why_untrained(record: Any) -> str:
    """A trial that cost no training: its reason, or ``reused`` (a duplicate of a finished one)."""
    if record.reason:
        return str(record.reason)
    return "reused" if record.duplicate_of is not None else str(record.state)


def measure(members: int, trials: int, bound_s: float) -> dict[str, Any]:
    from benchmarks.harness import SERVER, fresh_database

    with (
        fresh_database("autotune_pool_load") as database,
        tempfile.TemporaryDirectory(prefix="bench-pool-") as temp,
    ):
        url, space = f"{SERVER}/{database}", Path(temp) / "space.yaml"
        space.write_text(SPACE)
        create_study(url, "pool", space, trials)
        poller = ConnectionPoller(database)
        poller.start()
        try:
            start = time.monotonic()
            ended = run_members(url, "pool", members, bound_s, Path(temp))
            wall_s = time.monotonic() - start
        finally:
            connections = poller.stop()
        study = study_facts(url, "pool", ended)
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


def render(results: dict[str, Any]) -> str:
    """The RESULTS.md subsection of the Reliability section, from `results` (the JSON)."""
    exits = Counter(str(member["exit"]) for member in results["member_ends"])
    reasons = results["study"]["untrained_reasons"]
    return report.section(
        "pool_load",
        **results,
        ok={key: "yes" if ok else "**no**" for key, ok in results["checks"].items()},
        untrained=", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "none",
        exits=", ".join(f"{n} exited {code}" for code, n in sorted(exits.items())),
        slowest=max(member["s"] for member in results["member_ends"]),
        over="" if results["checks"]["budget_exact"] else f"\n\n{OVER_BUDGET}",
    )


def main() -> None:
    from benchmarks.harness import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--bound-s", type=float, default=900.0, help="a member still running then: deadlock")
    args = parser.parse_args()
    store("pool_load", {"machine": machine(), **measure(args.members, args.trials, args.bound_s)})


if __name__ == "__main__":
    main()
