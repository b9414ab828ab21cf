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


CUDA_HOST = """
import sys
import torch
torch.cuda.is_available = lambda: True  # a GPU host, as NVML would say it (no CUDA initialised)
sys.path.insert(0, sys.argv[1])  # a bitsandbytes whose import fails, as one that initialised CUDA would
import autotune.executors._preload
print("trainer", "transformers.trainer" in sys.modules)
print("bitsandbytes", "bitsandbytes" in sys.modules)
print("cuda", torch.cuda.is_initialized())
"""


def test_on_a_gpu_host_with_bitsandbytes_the_forkserver_leaves_the_training_stack_to_its_workers(
    tmp_path,
) -> None:
    """bitsandbytes initialises CUDA when imported, and peft (so transformers' TrainingArguments)
    imports it: a forkserver that preloaded the training stack started only workers that failed
    with "Cannot re-initialize CUDA in forked subprocess" (seen on an H200). Here importing the fake
    package fails, so a forkserver that still imported it would fail this test."""
    fake = tmp_path / "bitsandbytes"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('imported: this would have initialised CUDA')\n")
    out = subprocess.run(
        [sys.executable, "-c", CUDA_HOST, str(tmp_path)], capture_output=True, text=True, timeout=150
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines == {"trainer": "False", "bitsandbytes": "False", "cuda": "False"}
