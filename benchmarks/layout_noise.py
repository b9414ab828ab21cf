"""Whether a process's own layout takes the forkserver's share out of the noise between searches:
the power space's pair measured with a finalists' round's window in children of several parents
alive at once, interleaved in time, each child inheriting its parent's address-space layout (as
a forkserver's children did) or drawing its own (`autotune.trial.process.draw_own_layout`), the
two arms alternating run by run.

    python -m benchmarks.layout_noise                                   # 4 runs per arm, 3 parents x 6 rounds
    python -m benchmarks.layout_noise --runs 1 --parents 2 --rounds 2    # a smoke run

A parent is an interpreter preloaded as a search's forkserver is (`autotune.executors._preload`);
each measurement is a child it forks, which measures one configuration with the search's own
trainer (`harness.Bench`) and a round's window (3 steps after 2 eager ones) and exits. A run
first warms each parent with a pair it does not keep, then measures the pair in every parent,
round after round, the parents' order and the pair's alternating. Because the parents run side
by side, a difference between their ratios is theirs, not the machine's over time.

What it states, per run: each parent's mean ratio and the one-way split of the log ratios by
parent (`process_noise.split`: within, between, permutation p). Results:
``results/layout_noise.json`` and its section. Every process ends within its timeout and is ended
by pid.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.assemble import store
from benchmarks.harness import machine
from benchmarks.process_noise import PAIR, measure_once, split
from benchmarks.report import section, table

ARMS = ("inherited", "drawn")
MEASURE_TIMEOUT_S = 120.0


def serve(arm: str) -> None:
    """A parent: for each line read ("on" or "off"), fork a child that measures it (drawing its own
    layout in the ``drawn`` arm) and print its figure (a negative one: it failed)."""
    import autotune.executors._preload  # noqa: F401  (what a search's forkserver holds)
    from autotune.options import MeasureSettings
    from autotune.trial.process import draw_own_layout, kill_me_with_my_parent

    window = MeasureSettings(min_measure_steps=3, measure_steps=3, eager_settle_steps=2)  # a round's

    kill_me_with_my_parent()
    for line in sys.stdin:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: measure, write, exit
            os.close(read)
            kill_me_with_my_parent()
            value = -1.0
            try:
                if arm == "drawn":
                    draw_own_layout()
                value = measure_once(PAIR[line.strip()], window)
            finally:
                os.write(write, json.dumps(value).encode())
                os._exit(0)
        os.close(write)
        ready, _, _ = select.select([read], [], [], MEASURE_TIMEOUT_S)
        data = os.read(read, 64) if ready else b"-1"
        os.close(read)
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        print(data.decode() or "-1", flush=True)


class Parent:
    """A parent interpreter of one arm, asked for measurements one at a time, ended by pid."""

    def __init__(self, arm: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.layout_noise", "--serve", arm],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def measure(self, kind: str) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(kind + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], MEASURE_TIMEOUT_S + 30)
        value = float(self.process.stdout.readline() or -1) if ready else -1.0
        if value <= 0:
            raise RuntimeError(f"a measurement of checkpointing {kind} failed or took too long")
        return value

    def end(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def one_run(arm: str, parents: int, rounds: int) -> list[list[float]]:
    """Each parent's log ratios (checkpointing off over on), round by round."""
    started = [Parent(arm) for _ in range(parents)]
    try:
        for parent in started:  # a first pair in each parent warms it, as a search's baseline does
            parent.measure("on")
            parent.measure("off")
        logs: list[list[float]] = [[] for _ in started]
        for number in range(rounds):
            order = range(parents) if number % 2 == 0 else reversed(range(parents))
            for index in order:
                pair = list(PAIR) if (number + index) % 2 == 0 else list(PAIR)[::-1]
                got = {kind: started[index].measure(kind) for kind in pair}
                logs[index].append(math.log(got["off"] / got["on"]))
        return logs
    finally:
        for parent in started:
            parent.end()


def summary(runs: Sequence[dict[str, Any]], arm: str) -> dict[str, Any]:
    """An arm's runs together: how many found a parent effect (p < 0.05), the parents' own spread
    (median over runs), the spread between one parent's rounds (pooled), and the range of the
    parents' mean ratios."""
    mine = [r for r in runs if r["arm"] == arm]
    if not mine:
        return {"runs": 0}
    within = [
        r["split"]["within_sd"] ** 2 * (sum(r["split"]["rounds"]) - r["split"]["lineages"]) for r in mine
    ]
    dfs = [sum(r["split"]["rounds"]) - r["split"]["lineages"] for r in mine]
    ratios = [x for r in mine for x in r["split"]["ratios"]]
    return {
        "runs": len(mine),
        "found": sum(r["split"]["p"] < 0.05 for r in mine),
        "between_sd": statistics.median(r["split"]["between_sd"] for r in mine),
        "within_sd": math.sqrt(sum(within) / sum(dfs)),
        "lowest": min(ratios),
        "highest": max(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="runs per arm (the arms alternate)")
    parser.add_argument("--parents", type=int, default=3, help="parents alive at once in a run")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the pair per parent")
    parser.add_argument("--serve", choices=ARMS, help=argparse.SUPPRESS)  # a parent's own process
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    started = time.time()
    runs = []
    for number in range(2 * args.runs):
        arm = ARMS[number % 2]
        logs = one_run(arm, args.parents, args.rounds)
        found = split(logs)
        runs.append({"arm": arm, "logs": logs, "split": found})
        means = ", ".join(f"{r:.2f}" for r in found["ratios"])
        print(f"[run {number}, {arm}] parents' ratios {means}; p = {found['p']:.3f}", flush=True)
    data = {
        "machine": machine(),
        "command": "python -m benchmarks.layout_noise " + " ".join(sys.argv[1:]),
        "wall_s": time.time() - started,
        "parents": args.parents,
        "rounds": args.rounds,
        "runs": runs,
        "arms": {arm: summary(runs, arm) for arm in ARMS},
    }
    store("layout_noise", data)
    print(render(data))


def render(data: dict[str, Any]) -> str:
    rows = [
        [
            str(number),
            run["arm"],
            ", ".join(f"{r:.2f}" for r in run["split"]["ratios"]),
            f"{100 * run['split']['within_sd']:.1f}%",
            f"{100 * run['split']['between_sd']:.1f}%",
            f"{run['split']['p']:.3f}",
        ]
        for number, run in enumerate(data["runs"])
    ]
    arms = data["arms"]

    def said(arm: str) -> str:
        found = arms[arm]
        if not found.get("runs"):
            return f"{arm}: no run"
        return (
            f"{arm}: {found['found']} of {found['runs']} runs found a parent's own effect (p < 0.05); "
            f"the parents' own spread {100 * found['between_sd']:.1f}% (median), one parent's "
            f"rounds {100 * found['within_sd']:.1f}% (pooled); parents' ratios "
            f"{found['lowest']:.2f}-{found['highest']:.2f}x"
        )

    return section(
        "layout_noise",
        table=table(["run", "layout", "each parent's ratio", "within", "between", "p"], rows),
        inherited=said("inherited"),
        drawn=said("drawn"),
        parents=data["parents"],
        rounds=data["rounds"],
        wall=f"{data['wall_s'] / 60:.0f}",
        command=data["command"],
        **data["machine"],
    )


if __name__ == "__main__":
    main()
