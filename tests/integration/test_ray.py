"""`--backend ray`: one real search on a local Ray instance (started once for the module, by the
search itself), with one Ray trial whose actor dies mid-training.

Its trials land in the SQL study with autotune's user attrs, the dead one as a recorded result;
`export` works on the study; Ray's results hold no checkpoint and are deleted; no Ray process and
no Ray folder is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from transformers import TrainerCallback

import autotune
from autotune.answer.race import race_of
from autotune.cli import main
from autotune.executors import ray as ray_search
from autotune.executors.processes import descendants, wait_gone
from autotune.records import read_study
from autotune.store.session import StudyStore
from autotune.store.trials import measured_count
from tests.helpers import FAST, wait_for, write_space

pytest.importorskip("ray")
pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]

SPACE = {"per_device_train_batch_size": [1, 2]}
RAY_DAEMONS = ("raylet", "gcs_server")


class DieOnce(TrainerCallback):
    """The first Ray trial to reach a training step kills its own process (its Ray actor): a crash
    Ray sees as an errored trial. A marker file makes it once across processes; the baseline and
    finalists (autotune worker processes, where Ray is not running) are left alone."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized() and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os._exit(3)


def _descendants(root: int) -> dict[int, str]:
    """pid -> command name of every process below `root`."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parents[int(entry)] = (int(stat[stat.rindex(")") + 2 :].split()[1]), name)
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, name) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = name
                frontier.append(pid)
    return found


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One Ray search for the whole module (Ray starts in seconds and takes ~1 GiB)."""
    tmp = tmp_path_factory.mktemp("ray")
    seen: dict[str, Any] = {"results": [], "daemons": {}}
    home_results = Path.home() / "ray_results"
    results_before = sorted(os.listdir(home_results)) if home_results.exists() else None
    # Ray's local instance turns token authentication on and writes ~/.ray/auth_token, which then
    # turns it on for every `ray start --head` of this user: removed after, when the run wrote it.
    token = Path.home() / ".ray" / "auth_token"
    token_before = token.exists()
    original_remove = ray_search.remove_results

    def remove_and_record(path: str) -> None:
        # Ray still runs here: note its daemons (to check they are gone after) and the results.
        seen["daemons"].update(
            {pid: name for pid, name in _descendants(os.getpid()).items() if name in RAY_DAEMONS}
        )
        seen["results"] += [str(p.relative_to(path)) for p in Path(path).rglob("*")]
        seen["results_dirs"] = [*seen.get("results_dirs", []), path]
        original_remove(path)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ray_search, "remove_results", remove_and_record)
            result = autotune.search(
                model="tiny-gpt2",
                space=write_space(tmp, SPACE),
                storage=f"sqlite:///{tmp / 'ray.db'}",
                study="ray",
                seq_len=16,
                trials=2,
                measure=FAST,
                finalists=2,
                finalist_rounds=1,
                backend="ray",
                callbacks=[DieOnce(tmp / "died")],
            )
    finally:
        if not token_before and token.exists():
            token.unlink()
            with contextlib.suppress(OSError):
                token.parent.rmdir()
    seen.update(result=result, storage=f"sqlite:///{tmp / 'ray.db'}", died=tmp / "died")
    seen["results_before"] = results_before
    return seen


def test_trials_land_in_the_study_with_their_user_attrs(ray_run: dict[str, Any]) -> None:
    study = ray_run["result"].study.optuna_study
    assert measured_count(StudyStore(study)) == 2
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete, [(t.number, t.state, t.user_attrs.get("message")) for t in study.trials]
    for trial in complete:
        attrs = trial.user_attrs
        assert attrs["feasible"] is True and attrs["trained"] is True
        assert trial.value == attrs["tokens_per_s"] > 0
        assert (
            attrs["training_args"]["per_device_train_batch_size"]
            == trial.params["per_device_train_batch_size"]
        )
        assert attrs["peak_memory_bytes"] > 0 and attrs["ray_trial_id"]
        # its owner was the Ray actor, not this process
        assert attrs["worker"]["pid"] != os.getpid()
        assert trial.system_attrs["constraints:memory"] == 0.0  # the same constraints as any trial
    # it ended like any search: the baseline measured, the finalists' rounds run and led
    assert "baseline" in study.user_attrs and race_of(read_study(study)) is not None


def test_a_dead_ray_trial_is_a_recorded_result(ray_run: dict[str, Any]) -> None:
    study = ray_run["result"].study.optuna_study
    died_pid = int(ray_run["died"].read_text())
    dead = [t for t in study.trials if t.user_attrs.get("worker", {}).get("pid") == died_pid]
    assert len(dead) == 1
    trial = dead[0]
    assert trial.state == optuna.trial.TrialState.FAIL
    # Ray cannot tell an exit Python did not see from a signal: both read as a process that died
    assert trial.user_attrs["reason"] == "killed", trial.user_attrs
    assert trial.user_attrs["message"].startswith(f"its Ray actor's process (pid {died_pid}) ended")
    assert trial.user_attrs["ray_error"].startswith("Failure # 1 (occurred at ")
    assert trial.user_attrs["trained"] is True


def test_export_works_on_it(ray_run: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["export", "--study", "ray", "--storage", ray_run["storage"]])
    assert info.value.code in (0, None)
    exported = json.loads(capsys.readouterr().out)
    answer = ray_run["result"].answer
    assert answer.choice is not None
    # The export is the study's answer: a trial, or the defaults with the best measured beside them.
    batch = answer.choice.params.get("per_device_train_batch_size", 8)
    assert exported["training_args"]["per_device_train_batch_size"] == batch
    assert exported["expected"]["trial"] == answer.choice.trial
    assert exported["expected"]["verdict"] == answer.verdict


def test_no_checkpoint_and_nothing_left(ray_run: dict[str, Any]) -> None:
    assert ray_run["results"], "Ray wrote no results folder at all: the check below would prove nothing"
    assert not [p for p in ray_run["results"] if "checkpoint" in p.lower()]
    assert not [d for d in ray_run["results_dirs"] if os.path.exists(d)]
    home_results = Path.home() / "ray_results"
    after = sorted(os.listdir(home_results)) if home_results.exists() else None
    assert after == ray_run["results_before"]
    assert not [p for p in os.listdir("/tmp") if p.startswith("autotune-ray-")]
    assert set(ray_run["daemons"].values()) == set(RAY_DAEMONS)  # seen while Ray ran
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and [p for p in ray_run["daemons"] if os.path.exists(f"/proc/{p}")]:
        time.sleep(0.2)
    assert not [p for p in ray_run["daemons"] if os.path.exists(f"/proc/{p}")]
    import ray

    assert not ray.is_initialized()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _without_auth(environ: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in environ.items() if key not in AUTH_VARS}


@contextlib.contextmanager
def _running_head(env: dict[str, str]) -> Any:
    """A Ray head started here with `env` (``ray start --head --block`` in a session of its own,
    its temp folder short and private) and ended by its session (``ray stop`` would stop every
    Ray on the machine): its address."""
    temp = tempfile.mkdtemp(prefix="at-ray-", dir="/tmp")  # Ray's socket paths must stay short
    port = _free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    command = [ray_bin, "start", "--head", "--block", f"--port={port}", f"--temp-dir={temp}"]
    command += ["--num-cpus=2", "--include-dashboard=false", "--node-ip-address=127.0.0.1"]
    command += [f"--dashboard-agent-listen-port={_free_port()}", "--disable-usage-stats"]
    log = open(os.path.join(temp, "head.log"), "w")  # noqa: SIM115
    head = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    started: list[tuple[int, str]] = []
    try:

        def listening() -> bool:
            assert head.poll() is None, Path(temp, "head.log").read_text()
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout_s=120, what="the Ray head")
        started = descendants(head.pid)
        yield f"127.0.0.1:{port}"
    finally:
        # Ray's graceful stop (SIGTERM to `ray start --block`) takes about 30 s here (its GCS and
        # raylet), twice per run of the suite: a test's head, whose folder goes next, is killed
        # instead, its session at once and every process it started (noted now, a test's actors
        # included) by pid below.
        started += descendants(head.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        log.close()
        if not wait_gone(started, timeout_s=5):
            for pid, _ in started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert wait_gone(started, timeout_s=30), started
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_head() -> Any:
    """A head without token authentication (a token in ~/.ray would turn it on): its address."""
    with _running_head({**os.environ, "RAY_AUTH_MODE": "disabled"}) as address:
        yield address


@pytest.fixture
def ray_token_head() -> Any:
    """A head as Ray's defaults start it on a machine that has a token: ``ray get-auth-token
    --generate`` writes ``~/.ray/auth_token`` (as any local ``ray.init()`` does), and ``ray start
    --head``, no ``RAY_AUTH_MODE`` set, then turns token authentication on. Its home is a
    temporary one, so no one's ~/.ray is touched. Yields (address, the head's token)."""
    home = Path(tempfile.mkdtemp(prefix="at-home-", dir="/tmp"))
    env = {**_without_auth(dict(os.environ)), "HOME": str(home)}
    try:
        ray_bin = str(Path(sys.executable).with_name("ray"))
        generate = [ray_bin, "get-auth-token", "--generate"]
        subprocess.run(generate, env=env, capture_output=True, timeout=60, check=True)
        token = (home / ".ray" / "auth_token").read_text().strip()
        assert token
        with _running_head(env) as address:
            yield address, token
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_search_on_a_running_ray_head_and_its_resume(tmp_path: Path, ray_head: str) -> None:
    """As a user runs it: `autotune search --ray-address` and then `autotune resume`, each its own
    driver process joining the test's head (a driver that ran a local instance before keeps Ray
    state that a second, joined, instance does not survive in one process)."""
    storage = f"sqlite:///{tmp_path / 'head.db'}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    search = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2"]
    search += ["--space", write_space(tmp_path, SPACE), "--storage", storage, "--study", "head"]
    search += ["--seq-len", "16", "--trials", "1", "--finalists", "0", "--no-baseline"]
    search += ["--settle-steps", "1", "--measure-steps", "3", "--max-seconds", "10", "--no-whole-run-check"]
    search += ["--backend", "ray", "--ray-address", ray_head]
    done = subprocess.run(search, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="head", storage=storage)
    assert measured_count(StudyStore(study)) == 1
    first = study.trials[-1]
    assert first.state == optuna.trial.TrialState.COMPLETE and first.user_attrs["ray_trial_id"]

    # `autotune resume` takes the stored configuration, the cluster's address included. It runs
    # where a token lies in ~/.ray (a local Ray wrote it) and RAY_AUTH_MODE is unset, so it sends
    # the token: a head without token authentication takes it all the same.
    resume = [
        sys.executable,
        "-m",
        "autotune",
        "resume",
        "--study",
        "head",
        "--storage",
        storage,
        "--trials",
        "2",
    ]
    env = {**_without_auth(dict(os.environ)), "HOME": str(_client_home(tmp_path, "a-local-token"))}
    done = subprocess.run(resume, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(study_name="head", storage=storage)
    assert measured_count(StudyStore(study)) == 2
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert all(t.user_attrs.get("ray_trial_id") for t in study.trials if t.user_attrs.get("trained"))


def _client_home(root: Path, token: str | None) -> Path:
    """A client machine's home: the head's token copied to ~/.ray/auth_token, or none."""
    home = root / ("home-with-token" if token else "home-without-token")
    (home / ".ray").mkdir(parents=True)
    if token:
        (home / ".ray" / "auth_token").write_text(token)
    return home


@pytest.mark.timeout(600)  # a Ray head, two searches, three actors starting torch
def test_a_head_with_token_authentication(tmp_path: Path, ray_token_head: tuple[str, str]) -> None:
    """As Ray's users run it: the search takes the token from ~/.ray/auth_token and joins; an actor
    killed with SIGKILL mid-trial (as the kernel's OOM killer does) is recorded `killed` with
    Ray's text in `ray_error`, and none of Ray's lines reach the terminal. Without the token: one
    line, exit 1, no study."""
    address, token = ray_token_head
    env = {**_without_auth(dict(os.environ)), "PYTHONUNBUFFERED": "1"}
    env["HOME"] = str(_client_home(tmp_path, token))
    storage = f"sqlite:///{tmp_path / 'token.db'}"
    search = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--seq-len", "16"]
    search += ["--space", write_space(tmp_path, SPACE), "--trials", "2", "--finalists", "0", "--no-baseline"]
    # Windows of 6 s: the trial killed 2 s into its training is still in its window, and the other
    # trial, which completes, takes no longer than that.
    search += ["--settle-steps", "1", "--measure-steps", "100000", "--max-seconds", "6"]
    search += ["--target-ci", "0.000001", "--no-whole-run-check"]
    search += ["--backend", "ray", "--ray-address", address]
    out = open(tmp_path / "search.out", "w+")  # noqa: SIM115
    first = [*search, "--storage", storage, "--study", "token"]
    proc = subprocess.Popen(first, env=env, stdout=out, stderr=subprocess.STDOUT)
    # The same search from a machine without the token, started once the kill has landed: it runs
    # while the first search finishes (it fails before it creates anything).
    without_env = {**env, "HOME": str(_client_home(tmp_path, None))}
    store = tmp_path / "without.db"
    without: subprocess.Popen[str] | None = None
    try:
        owner: dict[str, int] = {}

        def training() -> bool:
            assert proc.poll() is None, (tmp_path / "search.out").read_text()
            with contextlib.suppress(Exception):
                study = optuna.load_study(study_name="token", storage=storage)
                for trial in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
                    if "pid" in trial.user_attrs.get("worker", {}):
                        owner.update(pid=trial.user_attrs["worker"]["pid"], number=trial.number)
            return bool(owner)

        wait_for(training, timeout_s=240, what="a Ray trial training")
        time.sleep(2)  # into its training steps
        os.kill(owner["pid"], signal.SIGKILL)
        without = subprocess.Popen(
            [*search, "--storage", f"sqlite:///{store}"],
            env=without_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        proc.wait(timeout=300)
        without_out, without_err = without.communicate(timeout=120)
    finally:
        for started in (proc, without):
            if started is not None and started.poll() is None:
                started.kill()
                started.wait(timeout=30)
        out.seek(0)
        printed = out.read()
        out.close()
    assert proc.returncode == 0, printed
    study = optuna.load_study(study_name="token", storage=storage)
    killed = study.trials[owner["number"]]
    assert killed.state == optuna.trial.TrialState.FAIL, killed.user_attrs
    assert killed.user_attrs["reason"] == "killed", killed.user_attrs
    assert killed.user_attrs["message"].startswith(
        f"its Ray actor's process (pid {owner['pid']}) ended without a Python error"
    )
    assert killed.user_attrs["ray_error"].startswith("Failure # 1 (occurred at ")
    assert f"pid: {owner['pid']}" in killed.user_attrs["ray_error"]
    assert [t.state for t in study.trials].count(optuna.trial.TrialState.COMPLETE) == 1
    for raw in ("(raylet)", "A worker died", "InvalidAuthToken", "Failure #", "WARNING"):
        assert raw not in printed, printed

    # The same search from a machine without the token.
    assert without.returncode == 1, without_out + without_err
    lines = [line for line in without_err.splitlines() if line.strip()]
    assert len(lines) == 1, without_err
    assert lines[0].startswith(f"error: the Ray cluster at {address} requires a token, and none was found")
    assert "~/.ray/auth_token" in lines[0] and "ray get-auth-token" in lines[0]
    assert not without_out.strip(), without_out
    assert not store.exists() or not optuna.get_all_study_summaries(f"sqlite:///{store}")


def test_an_unreachable_ray_address_fails_in_one_line(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--backend", "ray"]
    args += ["--ray-address", "127.0.0.1:1", "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--seq-len", "16"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # the world refused, not bad input
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach Ray at 127.0.0.1:1"), done.stderr
    # checked before anything is created: no header printed, no study in the store
    assert not done.stdout.strip(), done.stdout
    store = tmp_path / "x.db"
    assert not store.exists() or not optuna.get_all_study_summaries(f"sqlite:///{store}")


def test_a_killed_search_takes_its_ray_daemons_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves the search no time to shut Ray down: its reaper ends the daemons that
    `ray.init` started (Ray's own would notice only after 30-80 s) and removes Ray's folder."""
    space = write_space(tmp_path, SPACE)
    storage = f"sqlite:///{tmp_path / 'killed.db'}"
    # A short temporary folder: Ray's socket paths under it must fit 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="at-", dir="/tmp"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(temp), "HOME": str(temp)}  # Ray's token
    args = [sys.executable, "-m", "autotune", "search", "--model", "tiny-gpt2", "--space", space]
    args += ["--trials", "2", "--storage", storage, "--study", "killed", "--seq-len", "16"]
    args += ["--backend", "ray", "--no-baseline", "--finalists", "0", "--settle-steps", "1"]
    args += ["--measure-steps", "100000", "--max-seconds", "60", "--target-ci", "0.000001"]
    log = open(tmp_path / "search.log", "w+")  # noqa: SIM115
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    started: list[tuple[int, str]] = []
    try:

        def running() -> bool:
            study = None
            with contextlib.suppress(Exception):
                study = optuna.load_study(study_name="killed", storage=storage)
            states = [t.state for t in study.trials] if study is not None else []
            return optuna.trial.TrialState.RUNNING in states or proc.poll() is not None

        wait_for(running, timeout_s=300, what="a running Ray trial")
        assert proc.poll() is None, (tmp_path / "search.log").read_text()
        started = descendants(proc.pid)
        names = set(_descendants(proc.pid).values())
        assert set(RAY_DAEMONS) <= names, names
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
    try:
        assert wait_gone(started, timeout_s=20), (tmp_path / "search.log").read_text()
        wait_for(
            lambda: not [p for p in temp.iterdir() if p.name.startswith("autotune-ray-")],
            timeout_s=20,
            what="Ray's folder removed",
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
