"""Pool members under faults, through the real CLI and real servers: workers in other PID
namespaces, a PostgreSQL outage during a trial and one past the retry bound, a study that asks for
remote code, a newer run configuration, two members started with the same seed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from autotune.options import SCHEMA_KEY, MeasureSettings, RunConfig
from autotune.schema import SCHEMA_VERSION
from autotune.store.session import StudyStore
from autotune.store.storage import open_storage
from autotune.store.trials import measured_count, was_trained
from autotune.urls import engine_url
from tests.helpers import terminate_connections, wait_for, write_space
from tests.integration.test_pools import _check_finished_study, _end, _load, _search_args

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

SPACE = {
    "per_device_train_batch_size": [1, 2, 4, 8],
    "gradient_accumulation_steps": [1, 2, 3, 4],
    "precision": ["fp32", "bf16"],
    "optim": ["adamw_torch", "adamw_torch_fused"],
    "attn_implementation": ["eager", "sdpa"],
    "activation_checkpointing": [True, False],
}  # 512 combinations: members that proposed at random would rarely meet in 4 trials
SMALL = {"per_device_train_batch_size": [1, 2], "precision": ["fp32", "bf16"]}
FAILED_FOR_NOTHING = {"hung", "interrupted", "killed", "crashed"}


def _reasons(study: optuna.Study) -> dict[int, str]:
    return {t.number: t.user_attrs.get("reason", "") for t in study.trials if t.state.name == "FAIL"}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=timeout
    )


def _stored_study(url: str, name: str, **run_config: object) -> None:
    study = optuna.create_study(storage=open_storage(url), study_name=name, direction="maximize")
    study.set_user_attr("run_config", {**RunConfig(storage=url, study=name).to_dict(), **run_config})


def _unshare() -> list[str]:
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("no unshare(1) here")
    probe = subprocess.run([tool, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    if probe.returncode == 0:
        return [tool, "--pid", "--fork", "--mount-proc", "--kill-child"]
    rootless = [tool, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if subprocess.run([*rootless[:-1], "true"], capture_output=True, timeout=30).returncode == 0:
        return rootless
    pytest.skip(f"cannot create a PID namespace here: {probe.stderr.decode().strip()}")


def _created_study(space: str, url: str, name: str, trials: int) -> None:
    """The study `autotune search` would make (run configuration, fingerprint, space), with no
    trial run yet: the pool members that join it measure every trial."""
    from autotune.driver.study import open_study
    from autotune.plan.build import plan_search
    from autotune.progress import Reporter

    config = RunConfig(
        model="tiny-gpt2",
        space=space,
        trials=trials,
        storage=url,
        study=name,
        seq_len=16,
        # Windows of 2 s (as the pool tests' searches): the members' trials overlap in time.
        measure=MeasureSettings(settle_steps=1, measure_steps=100_000, max_seconds=2.0, target_rel_ci=1e-6),
        finalists=0,
        measure_baseline=False,
    )
    open_study(plan_search(config), Reporter())


def test_workers_in_other_pid_namespaces_finish_the_budget(tmp_path: Path, postgres_url: str) -> None:
    """One pool member in this PID namespace and one in a namespace of its own, on one host (as
    containers with host networking share the host name): each must not judge the other's live
    trials dead by their pids."""
    unshare = _unshare()
    name = f"ns-{uuid.uuid4().hex[:8]}"
    _created_study(write_space(tmp_path, SPACE), postgres_url, name, 4)
    command = [sys.executable, "-m", "autotune", "worker", "--study", name, "--storage", postgres_url]
    members: list[subprocess.Popen[str]] = []
    try:
        for prefix in ([], unshare):
            members.append(
                subprocess.Popen(
                    [*prefix, *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        outputs = [proc.communicate(timeout=400)[0] for proc in members]
    finally:
        _end(members)
    assert [p.returncode for p in members] == [0, 0], outputs
    study = _load(postgres_url, name)
    assert study is not None
    assert measured_count(StudyStore(study)) == 4, outputs  # exact: a trial past it yields (over_budget)
    _check_finished_study(study)
    assert "interrupted" not in _reasons(study).values(), outputs
    namespaces = {t.user_attrs["worker"].get("pid_ns") for t in study.trials if was_trained(t)}
    assert len(namespaces) >= 2, outputs  # both members measured trials, side by side


def _outage(
    postgres_url: str, seconds: float, stop: threading.Event | None = None, refuse: bool = False
) -> tuple[threading.Thread, list[int]]:
    """A PostgreSQL outage of the test's database for `seconds`, or until `stop` is set (`refuse`:
    no new connection gets through meanwhile, `terminate_connections`)."""
    database = sqlalchemy.engine.make_url(engine_url(postgres_url)).database
    admin = engine_url(postgres_url.rsplit("/", 1)[0] + "/postgres")
    kills: list[int] = []
    killer = threading.Thread(
        target=terminate_connections, args=(admin, database, seconds, kills, stop, refuse)
    )
    killer.start()
    return killer, kills


def _training(url: str, name: str) -> bool:
    study = _load(url, name)
    return study is not None and bool(study.get_trials(states=(optuna.trial.TrialState.RUNNING,)))


def test_a_postgres_outage_during_a_trial_loses_nothing(tmp_path: Path, postgres_url: str) -> None:
    space = write_space(tmp_path, SMALL)
    name = f"outage-{uuid.uuid4().hex[:8]}"
    budget = 2  # the outage hits the first; the second starts during it or after it
    search = subprocess.Popen(
        _search_args(space, postgres_url, name, budget),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killer: threading.Thread | None = None
    kills: list[int] = []
    try:
        wait_for(lambda: _training(postgres_url, name), 300, "a trial running")
        started = time.monotonic()
        killer, kills = _outage(postgres_url, 5.0)
        killer.join(timeout=60)
        out, _ = search.communicate(timeout=400)
        recovered_s = time.monotonic() - started
    finally:
        _end([search])
        if killer is not None:
            killer.join(timeout=60)
    assert sum(kills) > 0, "no connection was terminated: the test tested nothing"
    assert search.returncode == 0, out
    study = _load(postgres_url, name)
    assert study is not None
    assert measured_count(StudyStore(study)) >= budget
    _check_finished_study(study)  # nothing RUNNING
    assert not FAILED_FOR_NOTHING & set(_reasons(study).values()), (_reasons(study), out)
    print(
        f"outage of 5 s, {sum(kills)} connections terminated; search done {recovered_s:.0f} s after it began"
    )


def test_an_outage_past_the_bound_is_one_line_and_leaves_nothing_running(
    tmp_path: Path, postgres_url: str
) -> None:
    space = write_space(tmp_path, SMALL)
    name = f"lost-{uuid.uuid4().hex[:8]}"
    # Three trials, as before: with two, the search sometimes finished its budget through the
    # outage's reconnections (exit 0) before its 1 s bound ran out.
    budget = 3
    args = [*_search_args(space, postgres_url, name, budget), "--store-retry-s", "1"]
    search = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer: threading.Thread | None = None
    over = threading.Event()
    try:
        wait_for(lambda: _training(postgres_url, name), 300, "a trial running")
        started = time.monotonic()
        # An outage of up to 15 s (far past the 1 s bound), ended as soon as the search has stopped.
        # New connections are refused throughout: between two terminations (20 ms apart, more on a
        # busy machine) a fresh connection can get a store call through, and once, in a full run
        # of the suite, the search rode out the whole outage so and stopped only after it.
        killer, kills = _outage(postgres_url, 15.0, over, refuse=True)
        out, err = search.communicate(timeout=120)
        stopped_s = time.monotonic() - started
        outage_went_on = killer.is_alive()
        over.set()
        killer.join(timeout=60)
    finally:
        over.set()
        _end([search])
        if killer is not None:
            killer.join(timeout=60)
    assert sum(kills) > 0, "no connection was terminated: the test tested nothing"
    # It stopped while the store was still unreachable: the bound ended it, not the outage's end.
    assert outage_went_on, f"the search stopped {stopped_s:.1f} s after the outage began, past its end"
    assert search.returncode == 1, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "unreachable" in lines[0] and "postgresql://" in lines[0], err
    assert "--store-retry-s" in lines[0]
    # Once the store is back, the next process on the study marks the lost trials: none is left RUNNING.
    joined = _cli("worker", "--study", name, "--storage", postgres_url, timeout=400)
    assert joined.returncode == 0, joined.stdout + joined.stderr
    study = _load(postgres_url, name)
    assert study is not None
    _check_finished_study(study)
    assert "interrupted" in _reasons(study).values() or measured_count(StudyStore(study)) >= budget
    print(f"retry bound 1 s: the search stopped {stopped_s:.0f} s into the outage: {lines[0]}")


def _remote_code_model(folder: Path, marker: Path) -> Path:
    model = folder / "remote-model"
    model.mkdir()
    config = {
        "model_type": "xmarker",
        "auto_map": {"AutoConfig": "configuration_x.XConfig"},
        "vocab_size": 64,
    }
    (model / "config.json").write_text(json.dumps(config))
    (model / "configuration_x.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('the store chose code for this worker')\n"
        "from transformers import PretrainedConfig\n\n\n"
        "class XConfig(PretrainedConfig):\n"
        "    model_type = 'xmarker'\n"
    )
    return model


def test_a_worker_refuses_remote_code_it_was_not_allowed(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    model = _remote_code_model(tmp_path, marker)
    url = f"sqlite:///{tmp_path / 'remote.db'}"
    _stored_study(url, "remote", model=str(model), trust_remote_code=True)
    result = _cli("worker", "--study", "remote", "--storage", url)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--trust-remote-code" in lines[0], result.stderr
    assert not marker.exists()


def test_a_newer_run_configuration_is_refused_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    _stored_study(url, "newer", **{SCHEMA_KEY: SCHEMA_VERSION + 1, "pipeline_stages": 4})
    for command in (["worker", "--study", "newer"], ["resume", "--study", "newer"]):
        result = _cli(*command, "--storage", url)
        assert result.returncode == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"schema {SCHEMA_VERSION + 1}" in lines[0], result.stderr
    study = optuna.load_study(study_name="newer", storage=url)
    assert study.trials == []  # nothing ran


def test_two_members_with_the_same_seed_train_different_trials(tmp_path: Path, postgres_url: str) -> None:
    space = write_space(tmp_path, SPACE)
    name = f"seed-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [*_search_args(space, postgres_url, name, 4), "--seed", "7"],  # two trials each
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=400)[0] for proc in procs]
    finally:
        _end(procs)
    assert [p.returncode for p in procs] == [0, 0], outputs
    study = _load(postgres_url, name)
    assert study is not None
    _check_finished_study(study)
    # The members' first proposals, made at the same time from the same --seed, differ: each
    # member's jobs draw from a stream of their own (the random start-up would repeat otherwise).
    first = sorted(study.trials, key=lambda t: t.number)[:2]
    assert first[0].params != first[1].params, [t.params for t in first]
    # No configuration trains twice (512 combinations: far from exhausted). TPE may propose a
    # finished trial's values again once it exploits: the pre-check answers it from the store,
    # untrained, and only from a trial that had finished before the proposal.
    trained = [json.dumps(t.params, sort_keys=True) for t in study.trials if t.user_attrs.get("trained")]
    assert len(trained) == len(set(trained)), trained
    by_number = {t.number: t for t in study.trials}
    for trial in study.trials:
        if not trial.user_attrs.get("trained"):
            assert "duplicate_of" in trial.user_attrs, (trial.number, trial.user_attrs)
            source = by_number[trial.user_attrs["duplicate_of"]]
            assert source.params == trial.params and source.user_attrs.get("trained")
            assert source.datetime_complete is not None and trial.datetime_start is not None
            assert source.datetime_complete <= trial.datetime_start
