"""Facts that processes add to one study at the same time (activation probes, whole-run checks) are
stored a row each: two processes adding at once lose nothing, and older stores, which held each
kind under one key, still read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.records import WholeRun, add_whole_run, read_study, study_attrs, study_record
from autotune.store.storage import open_storage

ROOT = Path(__file__).resolve().parents[2]
ADDS = 15  # per process

_WRITER = """
import sys, time
from pathlib import Path
import optuna
from autotune.records import WholeRun, add_activation_probes, add_whole_run
from autotune.store.storage import open_storage

url, name, go, adds = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
study = optuna.load_study(study_name="merges", storage=open_storage(url, existing=True))
deadline = time.monotonic() + 60
while not go.exists():  # both writers start together
    if time.monotonic() > deadline:
        sys.exit("never told to start")
    time.sleep(0.01)
for i in range(adds):
    add_activation_probes(study, {f"{name}|{i}": {"bytes_per_sample": i}})
    add_whole_run(study, WholeRun(trial=i, params={"by": name}))
"""


@pytest.mark.timeout(300)
def test_two_processes_adding_at_once_lose_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'merges.db'}"
    optuna.create_study(storage=open_storage(url), study_name="merges", direction="maximize")
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, url, name, str(go), str(ADDS)], env=env)
        for name in ("a", "b")
    ]
    try:
        time.sleep(1.0)  # both have imported and opened the store by now, mostly; the rest catch up
        go.touch()
        for writer in writers:
            assert writer.wait(timeout=240) == 0
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait(timeout=30)
    record = read_study(optuna.load_study(study_name="merges", storage=open_storage(url)))
    expected = {f"{name}|{i}" for name in ("a", "b") for i in range(ADDS)}
    assert set(record.activation_probes or {}) == expected
    checks = [(check.params["by"], check.trial) for check in record.whole_run]
    assert sorted(checks) == sorted((name, i) for name in ("a", "b") for i in range(ADDS))
    for name in ("a", "b"):  # each writer's checks in the order it added them
        assert [trial for by, trial in checks if by == name] == list(range(ADDS))


def test_older_stores_keep_their_single_key_facts_and_new_rows_add_to_them(tmp_path: Path) -> None:
    first, second = WholeRun(trial=1), WholeRun(trial=1, fits=True)
    older = {**study_attrs(whole_run=[first]), "activation_probes": {"cpu|sdpa|fp32|0": {"b": 1}}}
    record = study_record("s", older)
    assert record.whole_run == (first,) and record.activation_probes == {"cpu|sdpa|fp32|0": {"b": 1}}
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'old.db'}"), study_name="s")
    for key, value in older.items():
        study.set_user_attr(key, value)
    add_whole_run(study, second)
    stored = read_study(study)
    assert stored.whole_run == (first, second) and stored.whole_run_of(1) == second
    assert stored.activation_probes == {"cpu|sdpa|fp32|0": {"b": 1}}
