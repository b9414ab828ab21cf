"""`autotune estimate`: the memory estimate of every memory-relevant configuration of a space."""

from __future__ import annotations

import itertools

from rich.table import Table

from autotune.cli._options import BaseArgsOpt, MemoryCapOpt, ModelOpt, PeftOpt, SeqLenOpt, SpaceOpt

# Knobs that change the estimate; the others do not move memory in this model.
MEMORY_KNOBS = (
    "per_device_train_batch_size",
    "precision",
    "optim",
    "attn_implementation",
    "activation_checkpointing",
)


def estimate_command(
    model: ModelOpt = "tiny-gpt2",
    space: SpaceOpt = "quick",
    seq_len: SeqLenOpt = None,
    memory_cap: MemoryCapOpt = None,
    base_args: BaseArgsOpt = None,
    peft: PeftOpt = None,
) -> None:
    """Print the estimated peak memory of each configuration of the space, before running any."""
    from autotune.logs import quiet_libraries
    from autotune.measure.estimator import MemoryEstimator
    from autotune.measure.memory_model import clearly_over
    from autotune.measure.peak import frozen_heap
    from autotune.options import RunConfig
    from autotune.plan.build import plan_search
    from autotune.progress import format_bytes, short_name
    from autotune.view import console

    plan = plan_search(
        RunConfig(
            model=model, space=space, seq_len=seq_len, memory_cap=memory_cap, base_args=base_args, peft=peft
        ),
        open_store=False,
    )
    estimator = MemoryEstimator(plan.workload, plan.hardware.device, plan.base_args)
    names = [k for k in MEMORY_KNOBS if k in plan.space.knobs]
    rows = []
    # The probes free memory with a garbage collection each (about 0.2 s over the libraries'
    # objects here): those are moved out of its reach, as in a trial's worker.
    with quiet_libraries(), frozen_heap():
        for combo in itertools.product(*(plan.space.knobs[k] for k in names)):
            values = {**plan.space.fixed, **dict(zip(names, combo, strict=True))}
            rows.append((combo, estimator.estimate(values)))
    rows.sort(key=lambda row: row[1].total_bytes)

    trainable = (
        f" ({estimator.trainable_params / 1e6:.2f}M trainable: gradients and optimizer states only for those)"
        if estimator.trainable_params != estimator.n_params
        else ""
    )
    console.print(
        f"{plan.workload.name}: {estimator.n_params / 1e6:.2f}M parameters{trainable}, "
        f"seq len {plan.workload.seq_len}, "
        f"on {plan.hardware.name}; process baseline {format_bytes(estimator.baseline_bytes)}",
        highlight=False,
    )
    table = Table(title=f"Memory estimate ({plan.space.name})", title_justify="left")
    for name in names:
        table.add_column(short_name(name))
    for column in ("weights+grads+optimizer", "activations", "total"):
        table.add_column(column, justify="right")
    if plan.cap_bytes is not None:
        table.add_column(f"vs cap {format_bytes(plan.cap_bytes)}")
    for combo, estimate in rows:
        cells = [str(v) for v in combo]
        cells += [
            format_bytes(estimate.static_bytes),
            format_bytes(estimate.activation_bytes),
            format_bytes(estimate.total_bytes),
        ]
        if plan.cap_bytes is not None:
            if clearly_over(estimate.total_bytes, plan.cap_bytes):
                cells.append("[red]clearly over: skipped[/]")
            elif estimate.total_bytes > plan.cap_bytes:
                cells.append("[yellow]over: measured to decide[/]")
            else:
                cells.append("[green]under[/]")
        table.add_row(*cells)
    console.print(table)
