"""Imported once by the forkserver that workers start from: everything a trial needs, loaded ahead.

Not for import anywhere else: importing it freezes the garbage collector's view of the heap.
"""

from __future__ import annotations

import gc
import os

# The forkserver must not initialise CUDA (a forked child of an initialised parent cannot use it):
# ask NVML, not the driver, whether CUDA is there.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import accelerate  # noqa: F401
import torch  # noqa: F401
import transformers.trainer  # noqa: F401  (transformers is lazy: name the module itself)

import autotune.run.driver
import autotune.run.trainer
import autotune.run.worker  # noqa: F401

# What is alive now is shared by every worker: keep the collector from touching (and so copying)
# those pages in each of them.
gc.collect()
gc.freeze()
