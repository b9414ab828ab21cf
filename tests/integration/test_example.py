"""The example in examples/ runs as a user runs it: a copy outside the repository, with autotune
as installed (no import from tests/ or from autotune's private modules)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tune_my_trainer.py"


def test_the_example_imports_only_public_names() -> None:
    tree = ast.parse(EXAMPLE.read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    private = [m for m in imported if m and (m.startswith(("tests", "autotune.")) or "._" in m)]
    assert not private, private


@pytest.mark.timeout(600)
def test_the_example_runs_from_a_copy_outside_the_repository(tmp_path: Path) -> None:
    copy = tmp_path / "tune_my_trainer.py"
    shutil.copy(EXAMPLE, copy)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(copy)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tuned: batch" in done.stdout and "kept: learning_rate 0.0003" in done.stdout
    # What it hands back agrees with its verdict: the Trainer's own batch and optimizer when nothing
    # beat them measurably (its TrainingArguments defaults: 8 x 1, adamw_torch_fused).
    if "answer: nothing beat the defaults measurably" in done.stdout:
        assert "tuned: batch 8 x 1, optim adamw_torch_fused, bf16 False" in done.stdout
        # (the alternative named beside it may change the math; what is handed back does not)
        assert "changes the training math, compared with the baseline" not in done.stdout
        assert "training math as the baseline's" in done.stdout
