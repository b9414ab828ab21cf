"""The study's compile cache folder, the environment that points inductor at it, the verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.trial.compile_cache import cache_verdict, compile_cache_folder, shared_compile_cache


def test_a_sqlite_store_keeps_its_cache_next_to_its_file(tmp_path: Path) -> None:
    folder = compile_cache_folder(f"sqlite:///{tmp_path / 'x.db'}", "any")
    assert folder == tmp_path / "x.db.compile-cache"


def test_a_relative_sqlite_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert compile_cache_folder("sqlite:///runs/x.db", "any") == tmp_path / "runs" / "x.db.compile-cache"


def test_a_server_store_keeps_one_cache_per_study_in_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = compile_cache_folder("postgresql://u@db:5432/autotune", "gpt2/seq 512")
    assert folder == tmp_path / "autotune" / "compile-cache" / "gpt2_seq_512"
    assert compile_cache_folder("sqlite:///:memory:", "s") == tmp_path / "autotune" / "compile-cache" / "s"


def test_a_chosen_folder_wins(tmp_path: Path) -> None:
    chosen = tmp_path / "shared"
    assert compile_cache_folder(f"sqlite:///{tmp_path / 'x.db'}", "s", str(chosen)) == chosen


def test_the_environment_points_inductor_and_triton_there_and_is_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", "/elsewhere")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with shared_compile_cache(tmp_path / "cache") as folder:
        assert folder.is_dir()
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache")
        assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton")
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        assert cache_dir() == str(tmp_path / "cache")  # what inductor reads
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    assert os.environ["TRITON_CACHE_DIR"] == "/elsewhere"


@pytest.mark.parametrize(
    ("hits", "misses", "verdict"),
    [(0, 0, None), (3, 0, "hit"), (0, 2, "miss"), (2, 1, "partial")],
)
def test_cache_verdict(hits: int, misses: int, verdict: str | None) -> None:
    assert cache_verdict(hits, misses) == verdict


def test_the_cold_figure_is_kept_by_the_cold_trial_and_read_by_warm_ones(tmp_path: Path) -> None:
    from autotune.trial.compile_cache import cold_compile_s, compile_key

    key = compile_key({"model": "tiny-gpt2", "values": {"torch_compile": "inductor", "bs": 8}})
    assert key == compile_key({"values": {"bs": 8, "torch_compile": "inductor"}, "model": "tiny-gpt2"})
    assert key != compile_key({"model": "tiny-gpt2", "values": {"torch_compile": "inductor", "bs": 16}})
    assert cold_compile_s(tmp_path, key, 1.5, "hit") is None  # nothing recorded yet
    assert cold_compile_s(tmp_path, key, 30.0, "miss") == 30.0
    assert cold_compile_s(tmp_path, key, 2.0, "hit") == 30.0
    assert cold_compile_s(tmp_path, key, 9.0, "partial") == 30.0
    assert cold_compile_s(tmp_path, key, 2.0, None) is None  # nothing compiled
    other = compile_key({"model": "tiny-llama"})
    assert cold_compile_s(tmp_path, other, 12.0, "miss") == 12.0
    assert cold_compile_s(tmp_path, key, 2.0, "hit") == 30.0  # both kept
    (tmp_path / "cold-compile.json").write_text("not json")
    assert cold_compile_s(tmp_path, key, 2.0, "hit") is None  # a broken file costs the figure only


def test_a_run_is_predicted_with_the_cold_compile() -> None:
    from autotune.records import measured_record
    from autotune.store.objective import predicted_run_s, run_compile_s

    warm = measured_record({"tokens_per_s": 1000.0, "setup_s": 1.0, "compile_s": 2.0, "compile_cold_s": 30.0})
    assert run_compile_s(warm) == 30.0
    assert predicted_run_s(warm, 10_000) == 1.0 + 30.0 + 10.0
    assert run_compile_s(measured_record({"compile_s": 2.0, "warmup_excess_s": 3.0})) == 3.0
