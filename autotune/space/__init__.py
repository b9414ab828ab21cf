"""What is searched: the knob catalogue, search spaces (YAML -> `SearchSpace`), and what can run here.

Pure: nothing here imports torch at module top.
"""

from __future__ import annotations

from autotune.space.loading import builtin_spaces, load_space, parse_space
from autotune.space.searchspace import (
    SearchSpace,
    SizeRule,
    global_batch_splits,
    precision_of,
)

__all__ = [
    "SearchSpace",
    "SizeRule",
    "builtin_spaces",
    "global_batch_splits",
    "load_space",
    "parse_space",
    "precision_of",
]
