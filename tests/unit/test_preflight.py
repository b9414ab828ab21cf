"""What a run names on this machine is checked before anything is created: one line, exit 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.errors import Unreachable, UsageError
from autotune.preflight import check_folder, probe_address

pytestmark = pytest.mark.timeout(120)


def test_a_folder_below_a_regular_file_is_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder\n")
    with pytest.raises(UsageError) as info:
        check_folder(str(tmp_path / "file" / "cache"), "compile_cache")
    text = str(info.value)
    assert f"lies below {tmp_path / 'file'}, which is not a folder" in text and "\n" not in text
    assert info.value.exit_code == 2 and info.value.field == "compile_cache"
    with pytest.raises(UsageError, match="is not a folder"):
        check_folder(str(tmp_path / "file"), "compile_cache")


def test_a_folder_that_can_be_made_passes_and_nothing_is_made(tmp_path: Path) -> None:
    check_folder(str(tmp_path / "a" / "b"), "compile_cache")
    check_folder(str(tmp_path), "compile_cache")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes everywhere: no folder is unwritable to it")
def test_an_unwritable_parent_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="no permission to write"):
        check_folder(str(locked / "cache"), "compile_cache")


def test_a_port_nothing_listens_on_is_refused_fast() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(Unreachable, match=f"cannot reach Ray at 127.0.0.1:{port}") as info:
        probe_address(f"127.0.0.1:{port}", timeout_s=5)
    assert info.value.field == "ray_address" and info.value.exit_code == 1  # the world refused
    with pytest.raises(UsageError, match="is not a port number"):
        probe_address("127.0.0.1:head")
    probe_address("auto")  # left to Ray


def _refusal_in_a_fresh_process(argv: list[str]) -> tuple[list[str], str]:
    """`autotune ARGV` in a fresh interpreter: its exit code and whether torch and transformers
    were imported by then, and its stderr."""
    code = (
        "import sys\nfrom autotune.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as exc:\n"
        "    print(exc.code, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    return done.stdout.split(), done.stderr


@pytest.mark.parametrize("flag", ["--compile-cache", "--ray-address"])
def test_the_command_line_refuses_before_it_imports_the_training_stack(tmp_path: Path, flag: str) -> None:
    """`autotune search` checks before anything is created and before its imports of torch and
    transformers (seconds): one line, no header, no study in the store; exit 2 for a path that
    cannot be a folder (bad input), 1 for a Ray head that does not answer (the world refused)."""
    (tmp_path / "file").write_text("x\n")
    store = tmp_path / "s.db"
    bad = str(tmp_path / "file" / "cache") if flag == "--compile-cache" else "127.0.0.1:1"
    argv = ["search", "--model", "tiny-gpt2", "--storage", f"sqlite:///{store}", flag, bad]
    argv += ["--backend", "ray"] if flag == "--ray-address" else []
    said, err = _refusal_in_a_fresh_process(argv)
    code = "2" if flag == "--compile-cache" else "1"
    assert said == [code, "False", "False"], err  # nothing else on stdout: no header
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    if flag == "--compile-cache":
        assert lines[0].startswith("error: --compile-cache ") and "not a folder" in lines[0], err
    else:
        assert lines[0].startswith("error: cannot reach Ray at 127.0.0.1:1"), err
    assert not store.exists() or not optuna.get_all_study_summaries(f"sqlite:///{store}")


def test_a_ray_head_found_joinable_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.preflight as preflight

    asked: list[str] = []
    monkeypatch.setattr(preflight, "_JOINABLE", set())
    monkeypatch.setattr(preflight, "probe_address", lambda address: asked.append(f"probe {address}"))
    monkeypatch.setattr(preflight, "check_token", lambda address: asked.append(f"token {address}"))
    preflight.check_ray_head("10.0.0.1:6379")
    preflight.check_ray_head("10.0.0.1:6379")  # the driver's check after the command line's
    preflight.check_ray_head("10.0.0.2:6379")
    assert asked == [f"{step} 10.0.0.{n}:6379" for n in (1, 2) for step in ("probe", "token")]

    def refuse(address: str) -> None:
        asked.append(f"probe {address}")
        raise UsageError(f"cannot reach Ray at {address}", "check it", field="ray_address")

    monkeypatch.setattr(preflight, "probe_address", refuse)
    for _ in range(2):  # a head that refused is asked again
        with pytest.raises(UsageError):
            preflight.check_ray_head("10.0.0.3:6379")
    assert asked[-2:] == ["probe 10.0.0.3:6379", "probe 10.0.0.3:6379"]


@pytest.mark.parametrize(
    ("command", "stored", "words"),
    [
        ("worker", {"schema": "newer"}, "schema"),
        ("resume", {"schema": "newer"}, "schema"),
        ("worker", {"trust_remote_code": True}, "--trust-remote-code"),
        ("resume", {"workload": {"trainer": "mine.MyTrainer"}}, "autotune.tune()"),
        ("worker", {"no_run_config": True}, "no stored run configuration"),
    ],
)
def test_what_the_store_alone_refuses_is_refused_before_the_training_stack(
    tmp_path: Path, command: str, stored: dict, words: str
) -> None:
    from autotune.options import SCHEMA_KEY, RunConfig
    from autotune.schema import SCHEMA_VERSION
    from autotune.store.storage import open_storage

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=open_storage(url), study_name="s", direction="maximize")
    config = RunConfig(storage=url, study="s").to_dict()
    if stored.get("schema"):
        config.update({SCHEMA_KEY: SCHEMA_VERSION + 1, "pipeline_stages": 4})
    config["trust_remote_code"] = stored.get("trust_remote_code", False)
    if not stored.get("no_run_config"):
        study.set_user_attr("run_config", config)
    if "workload" in stored:
        study.set_user_attr("workload", stored["workload"])
    said, err = _refusal_in_a_fresh_process([command, "--study", "s", "--storage", url])
    assert said == ["2", "False", "False"], err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], err
    assert optuna.load_study(study_name="s", storage=url).trials == []
