"""A large store: a study of 10,000 trials, and how long autotune's commands take on it.

    python -m benchmarks.large_store [--trials 10000] [--postgres]   # about 10 minutes on 2 CPU cores

A real small search (tiny-gpt2, 4 trials, short windows, baseline and two finalists; `--template`
reuses an earlier run's) makes a template study. A study of `--trials` trials is then written through
optuna (SQLite and, with ``--postgres``, a fresh database of the server, dropped afterwards): the
template's study attributes and trials, then trials with the template's measured trials' attributes
(throughput scaled down, so its answer stays the best) on distinct combinations of the space, and
past those, repeats recorded as reused (``duplicate_of``), as a search records a repeated proposal.
Each command then runs once in a fresh process, timed from start to exit: `show`, `export`,
`report`, `resume --trials N+1` (one more trial, finalists off) and one proposal of autotune's
sampler (`propose`). Results: ``results/large_store.json`` and its section (`render`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import assemble, report

RESULTS = report.RESULTS / "large_store.json"
SPACE = """description: large store benchmark (9,216 combinations)
knobs:
  per_device_train_batch_size: [1, 2, 3, 4, 6, 8, 12, 16]
  gradient_accumulation_steps: [1, 2, 3, 4, 5, 6, 7, 8]
  precision: [fp32, bf16]
  optim: [adamw_torch, adamw_torch_fused, adafactor, sgd, adagrad, rmsprop]
  attn_implementation: [eager, sdpa]
  activation_checkpointing: [false, true]
  dataloader_num_workers: [0, 1, 2]
"""
TEMPLATE = "template"
STUDY = "large"
LIMIT_S = (
    10.0  # a command slower than this on the large study is fixed or explained (templates/large_store.md)
)
# Short windows, two finalists re-measured twice: a template with every record a search writes.
SHORT = [
    "--seq-len",
    "16",
    "--settle-steps",
    "1",
    "--measure-steps",
    "3",
    "--finalists",
    "2",
    "--finalist-rounds",
    "2",
]
TIMEOUT_S = 900.0


def make_template(folder: Path) -> tuple[str, float]:
    """A real small search on the benchmark's space: its store's URL and wall time."""
    from benchmarks.harness import timed_command

    space = folder / "space.yaml"
    space.write_text(SPACE)
    url = f"sqlite:///{folder / 'template.db'}"
    args = ["--model", "tiny-gpt2", "--space", str(space), "--trials", "4", *SHORT, "--storage", url]
    wall_s, done = timed_command("search", *args, "--study", TEMPLATE, timeout=TIMEOUT_S)
    if done.returncode:
        raise RuntimeError(f"the template search {done.stderr}")
    return url, wall_s


def fill(url: str, template_url: str, trials: int, seed: int = 0) -> dict[str, Any]:
    """Write study `STUDY` of `trials` trials into `url` from the template study (see the module
    docstring); return what was written and how long it took."""
    import optuna

    from autotune.store.storage import open_storage
    from autotune.store.trials import was_trained

    source = open_storage(template_url)
    template = optuna.load_study(study_name=TEMPLATE, storage=source)
    storage = open_storage(url)
    start = time.perf_counter()
    study = optuna.create_study(storage=storage, study_name=STUDY, direction="maximize")
    for key, value in template.user_attrs.items():
        if key == "run_config":  # the budget is the large study's; resume times one more trial
            value = {**value, "trials": trials, "finalists": 0, "whole_run_check": False}
        study.set_user_attr(key, value)
    for key, value in source.get_study_system_attrs(template._study_id).items():
        storage.set_study_system_attr(study._study_id, key, value)
    kept = template.get_trials()
    for trial in kept:
        storage.create_new_trial(study._study_id, template_trial=trial)
    measured = [t for t in kept if was_trained(t) and t.state == optuna.trial.TrialState.COMPLETE]
    if not measured:
        raise RuntimeError("the template search measured no trial")
    # The space's: a trial of given values (enqueued) holds one-value distributions.
    distributions = max(
        (t.distributions for t in measured), key=lambda d: math.prod(len(x.choices) for x in d.values())
    )
    names = sorted(distributions)
    taken = {tuple(t.params.get(n) for n in names) for t in kept}
    grid = [c for c in itertools.product(*(distributions[n].choices for n in names)) if c not in taken]
    rng = random.Random(seed)
    wanted = trials - len(kept)
    combos = rng.sample(grid, min(wanted, len(grid)))
    rows: list[tuple[dict[str, Any], float | None, dict[str, Any], Any]] = []
    for index, combo in enumerate(combos):
        base = measured[index % len(measured)]
        factor = rng.uniform(0.5, 0.99)
        attrs = dict(base.user_attrs)
        for key in ("tokens_per_s", "samples_per_s"):
            if isinstance(attrs.get(key), int | float):
                attrs[key] = attrs[key] * factor
        value = None if base.value is None else base.value * factor
        rows.append((dict(zip(names, combo, strict=True)), value, attrs, base))
    # Past the space's size, proposals repeat finished trials, which a search records as reused:
    # the earlier trial's result, not trained, `duplicate_of` it.
    for index in range(wanted - len(rows)):
        params, value, attrs, base = rows[index]
        reused = {**attrs, "trained": False, "duplicate_of": len(kept) + index}
        rows.append((params, value, reused, base))
    _insert_trials(storage, study._study_id, len(kept), rows, distributions)
    written_s = time.perf_counter() - start
    source.engine.dispose()
    storage.engine.dispose()
    return {
        "trials": trials,
        "copied_from_template": len(kept),
        "reused": max(0, wanted - len(grid)),
        "user_attrs_per_trial": len(measured[0].user_attrs),
        "attr_json_bytes_per_trial": len(json.dumps(measured[0].user_attrs)),
        "space_size": len(grid) + len(taken),
        "write_s": round(written_s, 1),
    }


def _insert_trials(
    storage: Any,
    study_id: int,
    first_number: int,
    rows: list[tuple[dict[str, Any], float | None, dict[str, Any], Any]],
    distributions: dict[str, Any],
) -> None:
    """Insert finished trials (params, value, user attrs, the template trial for the rest) into
    optuna's tables in batches: optuna's `create_new_trial` writes each attribute with a query of
    its own (0.75 s a trial here, over two hours for 10,000)."""
    import sqlalchemy
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models
    from optuna.trial import TrialState

    now = datetime.now(UTC).replace(tzinfo=None)
    as_json = {name: distribution_to_json(d) for name, d in distributions.items()}
    with storage.engine.begin() as connection:
        next_id = connection.execute(
            sqlalchemy.select(sqlalchemy.func.max(models.TrialModel.trial_id))
        ).scalar()
        next_id = (next_id or 0) + 1
        for batch_start in range(0, len(rows), 1000):
            trials, values, params, user_attrs, system_attrs = [], [], [], [], []
            for offset, (chosen, value, attrs, base) in enumerate(rows[batch_start : batch_start + 1000]):
                trial_id = next_id + batch_start + offset
                number = first_number + batch_start + offset
                trials.append(
                    {"trial_id": trial_id, "number": number, "study_id": study_id,
                     "state": TrialState.COMPLETE, "datetime_start": now, "datetime_complete": now}
                )  # fmt: skip
                values.append(
                    {"trial_id": trial_id, "objective": 0, "value": value,
                     "value_type": models.TrialValueModel.TrialValueType.FINITE}
                )  # fmt: skip
                params.extend(
                    {"trial_id": trial_id, "param_name": name,
                     "param_value": distributions[name].to_internal_repr(chosen[name]),
                     "distribution_json": as_json[name]}
                    for name in chosen
                )  # fmt: skip
                user_attrs.extend(
                    {"trial_id": trial_id, "key": key, "value_json": json.dumps(v)}
                    for key, v in attrs.items()
                )
                system_attrs.extend(
                    {"trial_id": trial_id, "key": key, "value_json": json.dumps(v)}
                    for key, v in base.system_attrs.items()
                )
            for model, batch in (
                (models.TrialModel, trials),
                (models.TrialValueModel, values),
                (models.TrialParamModel, params),
                (models.TrialUserAttributeModel, user_attrs),
                (models.TrialSystemAttributeModel, system_attrs),
            ):
                if batch:
                    connection.execute(sqlalchemy.insert(model.__table__), batch)
        if connection.dialect.name == "postgresql":
            # The ids were given, not drawn: move the sequence past them, or the next trial a
            # command creates collides with one of them (as the first PostgreSQL run found).
            connection.execute(
                sqlalchemy.text(
                    "SELECT setval(pg_get_serial_sequence('trials', 'trial_id'), "
                    "(SELECT max(trial_id) FROM trials))"
                )
            )


def propose(url: str) -> dict[str, float]:
    """One proposal on the large study, as a trial job makes it: load the study, ask autotune's
    sampler for a trial and its values; then fail that trial (nothing trains). Times in seconds."""
    import optuna

    from autotune.plan.build import plan_from_study
    from autotune.store.sampler import search_sampler
    from autotune.store.storage import open_storage

    plan, _ = plan_from_study(STUDY, url)  # what a worker has before its first job
    start = time.perf_counter()
    storage = open_storage(url)
    study = optuna.load_study(study_name=STUDY, storage=storage, sampler=search_sampler(0))
    loaded = time.perf_counter()
    trial = study.ask()
    plan.space.suggest(trial)
    asked = time.perf_counter()
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    storage.engine.dispose()
    return {"load_s": loaded - start, "ask_s": asked - loaded, "total_s": asked - start}


def time_commands(url: str, folder: Path, trials: int) -> dict[str, Any]:
    """Each command once on the large study: wall seconds (a fresh process each) and facts."""
    from benchmarks.harness import timed_command

    out: dict[str, Any] = {}
    commands = {
        "show": ["show", "--study", STUDY],
        "export": ["export", "--study", STUDY, "-o", str(folder / "answer.json")],
        "report": ["report", "--study", STUDY, "-o", str(folder / "report.html")],
        "resume": ["resume", "--study", STUDY, "--trials", str(trials + 1)],
    }
    for name, args in commands.items():
        wall_s, done = timed_command(*args, "--storage", url, timeout=TIMEOUT_S)
        out[name] = {"s": round(wall_s, 1), "timed_out": done.returncode == -9}
        if name == "resume" and done.returncode == 0:
            out[name] |= _last_trial(url, trials)
        print(json.dumps({name: out[name]}), flush=True)
    code = f"import json; from benchmarks.large_store import propose; print(json.dumps(propose({url!r})))"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"the proposal exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    out["proposal"] = {"s": round(time.perf_counter() - start, 1), "timed_out": False}
    out["proposal"] |= {k: round(v, 1) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    return out


def _last_trial(url: str, trials: int) -> dict[str, Any]:
    """The trial the resume added: its number, state and own time (start to end, as stored); a
    None number where it added none (every combination of the space measured)."""
    import optuna

    from autotune.store.storage import open_storage

    storage = open_storage(url)
    try:
        last = optuna.load_study(study_name=STUDY, storage=storage).get_trials(deepcopy=False)[-1]
        if last.number < trials:
            return {"trial_number": None}
        own = (last.datetime_complete - last.datetime_start).total_seconds()
        return {"trial_number": last.number, "trial_state": last.state.name, "trial_own_s": round(own, 1)}
    finally:
        storage.engine.dispose()


def measure(trials: int, postgres: bool, template: str | None = None) -> dict[str, Any]:
    from benchmarks.harness import SERVER, fresh_database

    stores: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-large-store-") as temp:
        template_url, template_s = (template, None) if template else make_template(Path(temp))
        for kind in ["sqlite", "postgresql"] if postgres else ["sqlite"]:
            folder = Path(temp) / kind
            folder.mkdir()
            with (
                fresh_database("autotune_large_store") if kind == "postgresql" else nullcontext() as database
            ):
                url = f"{SERVER}/{database}" if database else f"sqlite:///{folder / 'large.db'}"
                stores[kind] = {"written": fill(url, template_url, trials)}
                print(json.dumps({kind: stores[kind]["written"]}), flush=True)
                stores[kind]["commands"] = time_commands(url, folder, trials)
                print(json.dumps({kind: stores[kind]["commands"]}), flush=True)
    made = None if template_s is None else round(template_s, 1)
    return {"trials": trials, "template_search_s": made, "limit_s": LIMIT_S, "stores": stores}


def render(results: dict[str, Any]) -> str:
    """The RESULTS.md subsection of the Reliability section, from `results` (the JSON)."""
    stores, rows, slow = results["stores"], [], set()
    for kind, store in stores.items():
        c = store["commands"]
        slow |= {name for name, timed in c.items() if timed["s"] > results["limit_s"]}
        resume, proposal = c["resume"], c["proposal"]
        own = f" ({resume['trial_own_s']:.1f} s)" if "trial_own_s" in resume else ""
        if resume.get("trial_number", 0) is None:
            own = " (no trial: every combination already measured)"
        split = f" ({proposal['load_s']:.1f} + {proposal['ask_s']:.1f} s)" if "load_s" in proposal else ""
        cells = [
            kind,
            f"{store['written']['write_s']:.0f} s",
            *(_took(c[n]) for n in ("show", "export", "report")),
        ]
        rows.append(f"| {' | '.join(cells)} | {_took(resume)}{own} | {_took(proposal)}{split} |")
    # report is explained with show
    explained = [
        f"- {report.fill('large_store', name)}"
        for name in sorted({n.replace("report", "show") for n in slow})
    ]
    first, made = next(iter(stores.values()))["written"], results["template_search_s"]
    return report.section(
        "large_store",
        **results,
        written=first,
        postgres=" --postgres" if "postgresql" in stores else "",
        made=f"{made:.0f} s" if made is not None else report.fill("large_store", "reused_template"),
        reused=report.fill("large_store", "reused", count=first["reused"]) if first.get("reused") else "",
        kib=first["attr_json_bytes_per_trial"] / 1024,
        rows="\n".join(rows),
        explained="\n\n" + "\n".join(explained) if explained else "",
    )


def _took(timed: dict[str, Any]) -> str:
    return f"**over {timed['s']:.0f} s** (killed)" if timed.get("timed_out") else f"{timed['s']:.1f} s"


def main() -> None:
    from benchmarks.harness import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--postgres", action="store_true", help="also on a fresh PostgreSQL database")
    parser.add_argument(
        "--template", help="the store of an earlier run's template search (study 'template'), to reuse"
    )
    args = parser.parse_args()
    data = {"machine": machine(), **measure(args.trials, args.postgres, args.template)}
    assemble.store("large_store", data)


if __name__ == "__main__":
    main()
