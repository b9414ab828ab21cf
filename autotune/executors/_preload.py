"""Imported once by the forkserver that workers start from: everything a trial needs, loaded ahead.

Not for import anywhere else: importing it freezes the garbage collector's view of the heap.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys

# The forkserver must not initialise CUDA (a forked child of an initialised parent cannot use it):
# ask NVML, not the driver, whether CUDA is there.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

# What optuna's RDB storage imports lazily in every process that opens one (alembic, sqlalchemy),
# and torch: none of it touches CUDA.
import alembic.command
import alembic.config
import alembic.migration
import alembic.script  # noqa: F401
import cloudpickle  # noqa: F401  (a user workload of autotune.tune arrives cloudpickled)
import sqlalchemy.dialects.mysql
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
import sqlalchemy.orm  # noqa: F401
import torch

import autotune.store.rdb


def imports_initialise_cuda() -> bool:
    """Whether importing the training stack here would initialise CUDA: bitsandbytes reads every
    device's compute capability when it is imported (seen on an H200 with bitsandbytes 0.50), and
    peft imports it whenever it is installed, so `transformers.training_args` does too. A
    forkserver that did so would start only workers that cannot use the GPU ("Cannot re-initialize
    CUDA in forked subprocess"); its workers import the training stack themselves instead."""
    return torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None


if not imports_initialise_cuda():
    # The trial machinery (transformers is lazy: `transformers.trainer` must be named).
    import accelerate  # noqa: F401
    import transformers.conversion_mapping
    import transformers.generation.utils
    import transformers.models.bert.modeling_bert
    import transformers.models.gpt2.modeling_gpt2
    import transformers.models.llama.modeling_llama
    import transformers.trainer  # noqa: F401

    import autotune.executors.forkserver
    import autotune.trial.entry
    import autotune.trial.trainer  # noqa: F401

    # Building a model from weights (or from none, `autotune.workloads.workload.random_init`) first
    # compiles the regular expressions of every architecture's checkpoint conversions: build that
    # cache once here, not in every worker.
    _conversions = getattr(  # the lazy package does not hand out its submodule as an attribute
        sys.modules["transformers.conversion_mapping"], "get_checkpoint_conversion_mapping", None
    )
    if _conversions is not None:
        _conversions("gpt2")

# What is alive now is shared by every worker: keep the collector from touching (and so copying)
# those pages in each of them.
gc.collect()
gc.freeze()
