"""`autotune search`: run or continue a throughput search."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.cli._options import (
    BaseArgsOpt,
    DebugOpt,
    IsolationOpt,
    MemoryCapOpt,
    ModelOpt,
    SeqLenOpt,
    SpaceOpt,
    StorageOpt,
    StoreRetryOpt,
    StudyOpt,
    WorkersOpt,
    apply_store_retry,
)
from autotune.config import MeasureSettings, RunConfig


def search_command(
    model: ModelOpt = "tiny-gpt2",
    space: SpaceOpt = "quick",
    trials: Annotated[int, typer.Option("--trials", "-n", help="Total trial budget of the study.")] = 8,
    storage: StorageOpt = None,
    study: StudyOpt = None,
    seq_len: SeqLenOpt = None,
    memory_cap: MemoryCapOpt = None,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the sampler and model init.")] = 0,
    warmup_steps: Annotated[int, typer.Option("--warmup-steps", help="Minimum unscored warm-up steps.")] = 3,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Most measured steps per trial.")] = 30,
    max_seconds: Annotated[
        float, typer.Option("--max-seconds", help="Most measured seconds per trial.")
    ] = 60.0,
    target_ci: Annotated[
        float, typer.Option("--target-ci", help="Stop measuring at this relative 95% CI half-width.")
    ] = 0.03,
    screen_ratio: Annotated[
        float,
        typer.Option(
            "--screen-ratio",
            help="Screening: stop a trial whose fastest step runs under this fraction of the best "
            "throughput measured so far (screened_out); 0: every trial gets its full window.",
        ),
    ] = MeasureSettings.screen_ratio,
    promote_ratio: Annotated[
        float,
        typer.Option(
            "--promote-ratio",
            help="Promotion line: end the window of a trial measured clearly under this fraction of "
            "the best (its 95% interval's upper end, after the window's minimum steps); 0: full windows.",
        ),
    ] = MeasureSettings.promote_ratio,
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
    base_args: BaseArgsOpt = None,
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
    packing: Annotated[
        str,
        typer.Option(
            "--packing",
            help="blocks: concatenate the text into --seq-len blocks; examples: one text per sample, "
            "padded per batch (where padding_free and group_by_length apply).",
        ),
    ] = "blocks",
    store_retry_s: StoreRetryOpt = None,
    compile_cache: Annotated[
        str | None,
        typer.Option(
            "--compile-cache",
            help="Folder the study's trials share compiled code in (shared storage for pools on several "
            "hosts). Default: next to a SQLite store, else ~/.cache/autotune/compile-cache/STUDY.",
            show_default=False,
        ),
    ] = None,
    # -- the user's run: loss parity, run length, price ------------------------------------------
    loss_tolerance: Annotated[
        float,
        typer.Option(
            "--loss-tolerance",
            help="A trial whose loss is worse than the baseline's at equal tokens by more than this "
            "fraction is infeasible (loss_diverged).",
        ),
    ] = 0.05,
    train_tokens: Annotated[
        int | None,
        typer.Option(
            "--train-tokens",
            help="Tokens of your whole run: pick by its predicted wall time (set-up + compile + "
            "tokens / throughput), not by throughput.",
            show_default=False,
        ),
    ] = None,
    train_steps: Annotated[
        int | None,
        typer.Option(
            "--train-steps",
            help="The same in optimizer steps of the baseline's batch.",
            show_default=False,
        ),
    ] = None,
    price_per_hour: Annotated[
        float | None,
        typer.Option(
            "--price-per-hour",
            help="Price of an hour of this machine: the answer states the run's cost.",
            show_default=False,
        ),
    ] = None,
    debug: DebugOpt = False,
) -> None:
    """Search the space for the configuration with the highest measured training throughput."""
    apply_store_retry(store_retry_s)
    from autotune.cli._render import RichReporter
    from autotune.executors.warm import start_forkserver_for
    from autotune.workloads.hub import require_reachable_model

    measure = MeasureSettings(
        warmup_steps=warmup_steps,
        max_warmup_steps=max(warmup_steps, MeasureSettings.max_warmup_steps),
        min_steps=min(MeasureSettings.min_steps, max_steps),
        max_steps=max_steps,
        max_seconds=max_seconds,
        target_rel_ci=target_ci,
        trial_timeout_s=trial_timeout,
        screen_ratio=screen_ratio,
        promote_ratio=promote_ratio,
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
        packing=packing,
        compile_cache=compile_cache,
        loss_tolerance=loss_tolerance,
        train_tokens=train_tokens,
        train_steps=train_steps,
        price_per_hour=price_per_hour,
    )
    require_reachable_model(config.model)  # a hub id without a hub fails before torch is imported
    start_forkserver_for(config)  # before the imports below: both processes import side by side
    from autotune.driver.search import search

    with RichReporter() as reporter:
        search(config, reporter=reporter, debug=debug)
