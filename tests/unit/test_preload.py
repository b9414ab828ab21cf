"""What the forkserver loads ahead for every worker (`autotune.executors._preload`), and what a
worker then still pays for its model: checked in a fresh interpreter, as a forkserver starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(180)

CHECK = """
import sys
import autotune.executors._preload
import torch
conversions = sys.modules["transformers.conversion_mapping"]
print("conversions", conversions._checkpoint_conversion_mapping_cache is not None)
print("cuda", torch.cuda.is_initialized())
from autotune.workloads.workload import resolve_workload
before = {m for m in sys.modules if m.startswith("transformers.models.")}
resolve_workload("tiny-gpt2", 16).build_model({})
new = {m for m in sys.modules if m.startswith("transformers.models.")} - before
print("configs", len([m for m in new if ".configuration_" in m]))
"""


def test_the_forkserver_builds_the_shared_caches_and_a_model_imports_no_other_architecture() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=150, check=True
    ).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["conversions"] == "True"  # built once here, not in every worker
    assert lines["cuda"] == "False"  # a forked child of an initialised parent could not use it
    # the lookup of the model's class imports no other model type's config (there are hundreds)
    assert int(lines["configs"]) <= 2
