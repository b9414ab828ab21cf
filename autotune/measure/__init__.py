"""How a trial is measured: the step callback, memory meters, statistics, FLOPs/MFU and the memory estimate.

Submodules are imported directly: `estimate` and `stats` are pure, the others import torch.
"""
