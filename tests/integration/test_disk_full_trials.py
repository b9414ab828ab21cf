"""A disk that fills up under a trial's compile cache or its scratch folder ends that trial, not
the search: the trial is recorded ``disk_full`` with a line naming the folder, and the search goes
on. The full disk is injected (``ENOSPC`` where each write would meet it: inside dynamo's compile
failure, as it wraps its backend's error, and from a step that writes under the scratch folder),
in this process (``isolation none``) so that the monkeypatch reaches the trials."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

import autotune
from autotune.store.outcomes import DISK_FULL
from autotune.view import trial_line
from tests.helpers import IN_PROCESS, write_space

pytestmark = pytest.mark.timeout(300)


class _FullScratch(TrainerCallback):
    """A step of a batch-4 trial writes under its scratch folder (the Trainer's output folder) and
    finds the disk full."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.per_device_train_batch_size == 4:
            path = os.path.join(args.output_dir, "checkpoint-1", "model.safetensors")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def test_a_full_compile_cache_or_scratch_folder_is_a_recorded_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_compile = torch.compile

    def compile_into_a_full_cache(model: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "aot_eager":
            # Where inductor writes its compiled graphs: the study's cache (set for the trial).
            path = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "fxgraph", "ab", "graph.py")
            inner = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            raise torch._dynamo.exc.BackendCompilerFailed(lambda *a: None, inner, None)
        return real_compile(model, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", compile_into_a_full_cache)
    cache = tmp_path / "cache"
    knobs = {"per_device_train_batch_size": [2, 4], "torch_compile": ["off", "aot_eager"]}
    trials = [
        {"per_device_train_batch_size": 2, "torch_compile": "aot_eager"},
        {"per_device_train_batch_size": 4, "torch_compile": "off"},
        {"per_device_train_batch_size": 2, "torch_compile": "off"},
    ]
    result = autotune.search(
        model="tiny-gpt2",
        space=write_space(tmp_path, knobs),
        trials=3,
        storage=f"sqlite:///{tmp_path / 'disk.db'}",
        seq_len=16,
        compile_cache=str(cache),
        callbacks=[_FullScratch()],
        enqueue=trials,
        **IN_PROCESS,
    )
    by_number = {t.number: t for t in result.trials}
    assert [by_number[n].reason for n in range(3)] == [DISK_FULL, DISK_FULL, None]
    assert all(by_number[n].attrs["trained"] for n in range(3))
    compiled, scratch = by_number[0], by_number[1]
    assert (compiled.message or "").startswith(f"disk full under the compile cache {cache} (No space left on")
    assert (scratch.message or "").startswith("disk full under the scratch folder ")
    assert "autotune-" in (scratch.message or "")  # the trial's own scratch folder, named
    line = trial_line(compiled)
    assert f"disk_full: disk full under the compile cache {cache}" in line and "free)" in line
    assert result.best is not None and result.best.number == 2  # the search went on
