"""`autotune search`: run or continue a throughput search."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._options import DebugOpt, IsolationOpt, StorageOpt, StudyOpt, WorkersOpt
from autotune.config import MeasureSettings, RunConfig


def search_command(
    model: Annotated[
        str,
        typer.Option("--model", "-m", help="Preset (tiny-gpt2, tiny-llama, ...), local directory or hub id."),
    ] = "tiny-gpt2",
    space: Annotated[str, typer.Option("--space", "-s", help="Shipped space name or YAML path.")] = "quick",
    trials: Annotated[int, typer.Option("--trials", "-n", help="Total trial budget of the study.")] = 8,
    storage: StorageOpt = None,
    study: StudyOpt = None,
    seq_len: Annotated[
        int | None,
        typer.Option("--seq-len", help="Tokens per sample. Default: the preset's.", show_default=False),
    ] = None,
    memory_cap: Annotated[
        str | None,
        typer.Option("--memory-cap", help="Peak memory cap: 20GiB, 20000MiB, 90% or 0.9 of the device."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the sampler and model init.")] = 0,
    warmup_steps: Annotated[int, typer.Option("--warmup-steps", help="Minimum unscored warm-up steps.")] = 3,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Most measured steps per trial.")] = 30,
    max_seconds: Annotated[
        float, typer.Option("--max-seconds", help="Most measured seconds per trial.")
    ] = 60.0,
    target_ci: Annotated[
        float, typer.Option("--target-ci", help="Stop measuring at this relative 95% CI half-width.")
    ] = 0.03,
    global_batch_size: Annotated[
        int | None,
        typer.Option(
            "--global-batch-size",
            help="Only try splits with batch x accumulation x processes = this.",
            show_default=False,
        ),
    ] = None,
    keep_semantics: Annotated[
        bool,
        typer.Option(
            "--keep-semantics",
            help="Hold precision, optimizer family and effective batch at the base config; "
            "search only speed knobs.",
        ),
    ] = False,
    base_args: Annotated[
        str | None,
        typer.Option(
            "--base-args", help="JSON/YAML file of TrainingArguments kwargs every trial starts from."
        ),
    ] = None,
    finalists: Annotated[
        int,
        typer.Option("--finalists", help="Re-measure this many of the best trials before choosing (0: off)."),
    ] = 3,
    finalist_rounds: Annotated[
        int, typer.Option("--finalist-rounds", help="Interleaved re-measurement rounds of the finalists.")
    ] = 3,
    trial_timeout: Annotated[
        float, typer.Option("--trial-timeout", help="Seconds a trial may train before it ends as a timeout.")
    ] = 900.0,
    allow_mismatch: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-mismatch", help="A fingerprint field allowed to differ when continuing (repeatable)."
        ),
    ] = None,
    baseline: Annotated[
        bool,
        typer.Option("--baseline/--no-baseline", help="Measure the base config first, to state the speedup."),
    ] = True,
    workers: WorkersOpt = None,
    isolation: IsolationOpt = "process",
    nproc_per_node: Annotated[
        int,
        typer.Option("--nproc-per-node", help="DDP processes per trial: each trial a fresh torchrun group."),
    ] = 1,
    ddp_timeout: Annotated[
        float, typer.Option("--ddp-timeout", help="Seconds a DDP collective may wait (CPU too).")
    ] = 300.0,
    backend: Annotated[
        str,
        typer.Option(
            "--backend", help="optuna: trials in autotune's worker processes; ray: trials in Ray Tune actors."
        ),
    ] = "optuna",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Ray cluster to join (HOST:PORT or ray://...). Default: a local Ray instance.",
            show_default=False,
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help="causal-lm, masked-lm or seq-classification. Default: from the model."),
    ] = None,
    pretrained: Annotated[
        bool,
        typer.Option(
            "--pretrained", help="Load the model's real weights (default: random weights from its config)."
        ),
    ] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Allow code from the model's hub repository.")
    ] = False,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Text/JSON lines/CSV/Parquet file or folder, or hub dataset. Default: synthetic.",
        ),
    ] = None,
    dataset_config: Annotated[
        str | None, typer.Option("--dataset-config", help="The hub dataset's configuration name.")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="Dataset split to train on.")] = "train",
    text_column: Annotated[
        str | None, typer.Option("--text-column", help="Column holding the text. Default: text.")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="Tokenizer folder or hub id. Default: the model's.")
    ] = None,
    pad_to_multiple_of: Annotated[
        int | None,
        typer.Option("--pad-to-multiple-of", help="Pad classification batches to a multiple of this."),
    ] = None,
    debug: DebugOpt = False,
) -> None:
    """Search the space for the configuration with the highest measured training throughput."""
    from autotune.cli._render import RichReporter
    from autotune.run.launcher import start_forkserver_for

    measure = MeasureSettings(
        warmup_steps=warmup_steps,
        max_warmup_steps=max(warmup_steps, MeasureSettings.max_warmup_steps),
        min_steps=min(MeasureSettings.min_steps, max_steps),
        max_steps=max_steps,
        max_seconds=max_seconds,
        target_rel_ci=target_ci,
        trial_timeout_s=trial_timeout,
    )
    config = RunConfig(
        model=model,
        space=space,
        trials=trials,
        storage=storage,
        study=study,
        seq_len=seq_len,
        memory_cap=memory_cap,
        seed=seed,
        measure=measure,
        global_batch_size=global_batch_size,
        keep_semantics=keep_semantics,
        base_args=base_args,
        finalists=finalists,
        finalist_rounds=finalist_rounds,
        allow_mismatch=tuple(allow_mismatch or ()),
        measure_baseline=baseline,
        workers=workers,
        nproc_per_node=nproc_per_node,
        ddp_timeout_s=ddp_timeout,
        isolation=isolation,  # type: ignore[arg-type]  # checked by RunConfig
        backend=backend,  # type: ignore[arg-type]  # checked by RunConfig
        ray_address=ray_address,
        task=task,
        pretrained=pretrained,
        trust_remote_code=trust_remote_code,
        dataset=dataset,
        dataset_config=dataset_config,
        split=split,
        text_column=text_column,
        tokenizer=tokenizer,
        pad_to_multiple_of=pad_to_multiple_of,
    )
    start_forkserver_for(config)  # before the imports below: both processes import side by side
    from autotune.run.driver import search

    with RichReporter() as reporter:
        search(config, reporter=reporter, debug=debug)
