"""The compile anatomy benchmark (benchmarks/compile_anatomy.py): its compiler wrapper, how it sorts
the compiler's runs, and its RESULTS.md section."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import compile_anatomy
from tests.unit.bench_helpers import section

MACHINE = {"date": "2026-11-25 10:00 UTC", "cpu": "Test CPU", "cores": 2, "commit": "abc1234"}
MACHINE |= {"python": "3.11", "torch": "2.13.0+cpu", "transformers": "5.24.0", "optuna": "5.0.0"}
PCH = "/tmp/torchinductor_x/precompiled_headers/h.h"


def _run(seconds: float, *args: str) -> dict[str, Any]:
    return {"s": seconds, "args": list(args)}


def test_the_runs_are_sorted_into_kernels_the_header_and_the_rest() -> None:
    runs = [
        _run(0.01, "--version"),
        _run(0.3, "/c/isa.cpp", "-o", "/c/isa.so"),
        _run(0.2, "-E", "/t/header.hpp"),
        _run(4.0, "-x", "c++-header", PCH, "-o", PCH + ".gch"),
        _run(1.5, "/c/ab/cab.main.cpp", "-include", PCH, "-o", "/c/ab/cab.main.so"),
        _run(1.7, "/c/cd/ccd.main.cpp", "-include", PCH, "-o", "/c/cd/ccd.main.so"),
        _run(1.6, "/c/ef/cef.main.cpp", "-include", PCH, "-o", "/c/ef/cef.main.so"),
    ]
    assert [r["s"] for r in compile_anatomy.kernel_runs(runs)] == [1.5, 1.7, 1.6]
    summary = compile_anatomy.summary(runs)
    assert summary["kernel_runs"] == 3 and summary["kernel_s"] == pytest.approx(4.8)
    assert summary["kernel_median_s"] == pytest.approx(1.6)
    assert summary["header_runs"] == 2 and summary["header_s"] == pytest.approx(4.2)
    assert summary["other_runs"] == 2 and summary["other_s"] == pytest.approx(0.31)
    assert compile_anatomy.summary([])["kernel_median_s"] is None


def test_the_header_is_taken_out_of_a_command_line_and_nothing_else() -> None:
    args = ["k.main.cpp", "-O3", "-include", PCH, "-march=native", "-o", "k.so", "-include", "other.h"]
    assert compile_anatomy.without_header(args) == ["k.main.cpp", "-O3", "-march=native", "-o", "k.so"]
    assert compile_anatomy.without_header(["a.cpp", "-o", "a.so"]) == ["a.cpp", "-o", "a.so"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++ compiler")
def test_the_wrapper_passes_the_compilers_status_and_logs_each_run(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    assert compiler is not None
    log, wrapper = tmp_path / "cxx.jsonl", tmp_path / "cxx"
    wrapper.write_text(compile_anatomy.WRAPPER.format(python=sys.executable, compiler=compiler, log=str(log)))
    wrapper.chmod(0o755)
    good, bad = tmp_path / "good.main.cpp", tmp_path / "bad.main.cpp"
    good.write_text('extern "C" int f() { return 1; }\n')
    bad.write_text("this is not C++\n")
    ok = subprocess.run([str(wrapper), str(good), "-shared", "-fPIC", "-o", str(tmp_path / "good.so")])
    failed = subprocess.run(
        [str(wrapper), str(bad), "-c", "-o", str(tmp_path / "bad.o")], capture_output=True
    )
    assert ok.returncode == 0 and (tmp_path / "good.so").exists()
    assert failed.returncode != 0 and b"error" in failed.stderr
    runs = compile_anatomy.compiler_runs(log)
    assert [r["args"][0] for r in runs] == [str(good), str(bad)]
    assert all(r["s"] > 0 for r in runs)
    # The timed re-runs work on a logged command line: the kernel, and an empty file in its place.
    timed = compile_anatomy.one_compiler_run(compiler, runs[0], tmp_path, repeats=1)
    assert set(timed) == {"command", *compile_anatomy.TIMED}
    assert all(timed[k]["median_s"] > 0 for k in timed if k != "command")
    assert "good.main.cpp" in timed["command"]


def test_the_section_states_the_runs_and_the_share_of_one_run_before_any_kernel_code() -> None:
    trial = {"compile_s": 20.0, "compile_cache": "miss"}
    compiler = {"kernel_runs": 30, "kernel_s": 30.0, "kernel_median_s": 1.5, "header_runs": 0}
    compiler |= {"header_s": 0.0}
    one = {
        "kernel": {"median_s": 1.50},
        "kernel_without_header": {"median_s": 1.48},
        "empty_with_header": {"median_s": 1.35},
        "empty_without_header": {"median_s": 0.07},
    }
    data = {
        "machine": MACHINE,
        "compiler": "g++ (Debian 12.2.0) 12.2.0",
        "compile_threads": 2,
        "repeats": 3,
        "presets": {
            "tiny-gpt2": {
                "trials": [
                    {"batch": 8, **trial, "compiler": {**compiler, "header_runs": 2, "header_s": 4.4}},
                    {"batch": 16, **trial, "compiler": compiler},
                ],
                "one_run": one,
            }
        },
    }
    text = section(compile_anatomy, data)
    assert "| tiny-gpt2 | 8 | 20.0 s | miss | 30 | 30.0 s | 1.50 s | 2 (4.4 s) |" in text
    assert "| tiny-gpt2 | 16 | 20.0 s | miss | 30 | 30.0 s | 1.50 s | 0 |" in text
    assert "| tiny-gpt2 | 1.50 s | 1.48 s | 1.35 s | 0.07 s |" in text
    assert "ran the compiler 30 times: 30 s of compiler time over 2 threads, about 15 s of its 20 s" in text
    assert "One run costs 1.50 s, of which 90% is what an empty file" in text
    assert "Test CPU" in text and "abc1234" in text
