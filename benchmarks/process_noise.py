"""Where the noise between searches comes from: one configuration's speedup over another measured
in forked children of one forkserver (as one search's trials and rounds are), across forkservers
(as separate searches are), and in fresh interpreters (as users' runs are).

    python -m benchmarks.process_noise               # 4 forkservers x 6 rounds, 12 fresh rounds
    python -m benchmarks.process_noise --servers 2 --rounds 2 --fresh 2  # a smoke run

The pair is the power space's (`decisions`): tiny-gpt2 at sequence length 256, batch 8, the
defaults with gradient checkpointing and the same without it. Each measurement is the search's own
(`harness.Bench`: the search's trainer, window and frozen heap) in a process of its own; a round
measures the pair back to back, the order alternating. A forkserver arm's lineage is one
forkserver (preloaded as a search's, `autotune.executors._preload`) and its children; a fresh
round's two processes are each a new interpreter.

What it states, per arm: the spread of the log ratio between rounds of one lineage, the spread of
the lineages' mean log ratios, and the share of that spread the rounds do not explain (a
one-way random-effects split, with a permutation test of "the lineage changes nothing"). A
search's rounds see only the first: a lineage effect is noise its intervals do not hold.
Results: ``results/process_noise.json`` and its section. Every process ends within its timeout
and is ended by pid.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.assemble import store
from benchmarks.harness import machine, run_search
from benchmarks.report import section, table

if TYPE_CHECKING:
    from autotune.options import MeasureSettings

SPACE = Path(__file__).resolve().parent / "space_power.yaml"
PAIR = {"on": True, "off": False}  # activation_checkpointing
MEASURE_TIMEOUT_S = 120.0
PERMUTATIONS = 2000


def measure_once(checkpointing: bool, window: MeasureSettings | None = None) -> float:
    """One measurement of the pair's member in this process, as a search's trial measures it
    (`window`: the measurement settings, the search's own unless given)."""
    from autotune.trial.process import as_a_users_run
    from benchmarks.harness import Bench

    as_a_users_run()
    with Bench("tiny-gpt2", str(SPACE), seq_len=256, measure=window) as bench:  # scratch removed after
        params = {**bench.baseline(), "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1}
        params["activation_checkpointing"] = checkpointing
        rate = bench.measure(params, verbatim=True).tokens_per_s
    if not rate:
        raise RuntimeError(f"no throughput measured for checkpointing={checkpointing}")
    return float(rate)


def _child(checkpointing: bool, conn: Any) -> None:
    try:
        conn.send(measure_once(checkpointing))
    except Exception as exc:  # the parent names it
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def lineage(rounds: int) -> list[dict[str, float]]:
    """`rounds` rounds of the pair in children of one forkserver (this process's)."""
    import multiprocessing

    from benchmarks.process_noise import _child as child  # named by module, not as __main__'s

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["autotune.executors._preload"])
    out = []
    for number in range(rounds):
        got: dict[str, float] = {}
        for name in list(PAIR) if number % 2 == 0 else list(PAIR)[::-1]:
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=child, args=(PAIR[name], send))
            process.start()
            send.close()
            ready = receive.poll(MEASURE_TIMEOUT_S)
            value = receive.recv() if ready else "no measurement within the timeout"
            if not ready and process.is_alive():
                process.kill()
            process.join(10)
            if isinstance(value, str):
                raise RuntimeError(f"round {number}, checkpointing {name}: {value}")
            got[name] = value
        out.append({"time": time.time(), **got})
    return out


def _run(args: list[str], timeout_s: float) -> str:
    """A child interpreter's last stdout line (`harness.run_search`: killed past `timeout_s`)."""
    done, _ = run_search([sys.executable, "-m", "benchmarks.process_noise", *args], timeout_s)
    return done.stdout.strip().splitlines()[-1]


def split(
    lineages: Sequence[Sequence[float]], permutations: int = PERMUTATIONS, seed: int = 0
) -> dict[str, Any]:
    """The one-way random-effects split of log ratios grouped by lineage (each lineage at least
    two rounds): the pooled spread within a lineage, the spread of the lineages' means, the
    between-lineage component (its variance less what the rounds explain, at least 0), and the
    permutation p-value of the F ratio (the rounds shuffled among the lineages)."""
    groups = [list(g) for g in lineages if len(g) >= 2]
    if len(groups) < 2:
        raise ValueError("the split needs two lineages of two rounds each")

    def f_ratio(gs: Sequence[Sequence[float]]) -> float:
        means = [statistics.fmean(g) for g in gs]
        grand = statistics.fmean(v for g in gs for v in g)
        between = sum(len(g) * (m - grand) ** 2 for g, m in zip(gs, means, strict=True)) / (len(gs) - 1)
        within = sum((v - m) ** 2 for g, m in zip(gs, means, strict=True) for v in g)
        within /= sum(len(g) for g in gs) - len(gs)
        return between / within if within > 0 else math.inf

    observed = f_ratio(groups)
    pool, sizes = [v for g in groups for v in g], [len(g) for g in groups]
    rng, above = random.Random(seed), 0
    for _ in range(permutations):
        rng.shuffle(pool)
        shuffled, start = [], 0
        for size in sizes:
            shuffled.append(pool[start : start + size])
            start += size
        above += f_ratio(shuffled) >= observed
    within = math.sqrt(
        sum(statistics.variance(g) * (len(g) - 1) for g in groups) / (sum(sizes) - len(groups))
    )
    means = [statistics.fmean(g) for g in groups]
    size = statistics.fmean(sizes)
    component = max(0.0, statistics.variance(means) - within**2 / size)
    return {
        "lineages": len(groups),
        "rounds": sizes,
        "within_sd": within,
        "means_sd": statistics.stdev(means),
        "between_sd": math.sqrt(component),
        "f": observed,
        "p": (above + 1) / (permutations + 1),
        "ratios": [math.exp(m) for m in means],
    }


def _logs(rounds: Sequence[dict[str, float]]) -> list[float]:
    return [math.log(r["off"] / r["on"]) for r in rounds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=4, help="forkservers (lineages)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the pair per forkserver")
    parser.add_argument("--fresh", type=int, default=12, help="rounds of the pair in fresh interpreters")
    parser.add_argument("--lineage", type=int, help=argparse.SUPPRESS)  # a forkserver arm's child
    parser.add_argument("--one", choices=list(PAIR), help=argparse.SUPPRESS)  # a fresh interpreter's
    args = parser.parse_args()
    if args.lineage:
        print(json.dumps(lineage(args.lineage)), flush=True)
        return
    if args.one:
        print(json.dumps(measure_once(PAIR[args.one])), flush=True)
        return
    started = time.time()
    servers = []
    for number in range(args.servers):
        rounds = json.loads(_run(["--lineage", str(args.rounds)], args.rounds * 2 * MEASURE_TIMEOUT_S + 120))
        servers.append(rounds)
        print(f"[forkserver {number}] {[round(math.exp(v), 3) for v in _logs(rounds)]}", flush=True)
    fresh = []
    for number in range(args.fresh):
        got = {}
        for name in list(PAIR) if number % 2 == 0 else list(PAIR)[::-1]:
            got[name] = float(json.loads(_run(["--one", name], MEASURE_TIMEOUT_S + 60)))
        fresh.append({"time": time.time(), **got})
        print(f"[fresh {number}] {got['off'] / got['on']:.3f}", flush=True)
    data = {
        "machine": machine(),
        "command": "python -m benchmarks.process_noise " + " ".join(sys.argv[1:]),
        "wall_s": time.time() - started,
        "servers": servers,
        "fresh": fresh,
        "split": split([_logs(s) for s in servers]),
        "fresh_sd": statistics.stdev(_logs(fresh)) if len(fresh) > 1 else None,
        "fresh_ratio": math.exp(statistics.fmean(_logs(fresh))) if fresh else None,
    }
    store("process_noise", data)
    print(render(data))


def render(data: dict[str, Any]) -> str:
    found = data["split"]
    rows = [
        [f"forkserver {i}", len(rounds), f"{r:.3f}x", ", ".join(f"{math.exp(v):.2f}" for v in _logs(rounds))]
        for i, (rounds, r) in enumerate(zip(data["servers"], found["ratios"], strict=True))
    ]
    rows.append(
        [
            "fresh interpreters",
            len(data["fresh"]),
            f"{data['fresh_ratio']:.3f}x",
            ", ".join(f"{math.exp(v):.2f}" for v in _logs(data["fresh"])),
        ]
    )
    return section(
        "process_noise",
        table=table(["lineage", "rounds", "geometric mean", "each round's ratio"], rows),
        within=f"{100 * found['within_sd']:.1f}%",
        means=f"{100 * found['means_sd']:.1f}%",
        between=f"{100 * found['between_sd']:.1f}%",
        p=f"{found['p']:.3f}",
        fresh_sd="-" if data["fresh_sd"] is None else f"{100 * data['fresh_sd']:.1f}%",
        wall=f"{data['wall_s'] / 60:.0f}",
        command=data["command"],
        **data["machine"],
    )


if __name__ == "__main__":
    main()
