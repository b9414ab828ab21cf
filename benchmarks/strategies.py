"""Which data-parallel strategies run with `transformers.Trainer` on CPU/gloo, and what they cost.

Standalone: ``python -m benchmarks.strategies`` launches ``torchrun --standalone --nproc-per-node 2``
once per strategy (each in its own session, with a hard timeout; on timeout the launched process group
is killed by its pid), trains a small randomly initialised GPT-2 for a dozen steps and records, per
strategy:

* the status: ``ran`` or ``failed`` with a one-line reason (the first line of the exception, or the
  timeout);
* tokens/s over the steady steps (global tokens per optimizer step / median step time of the steps after
  the warm-up, taking the slowest rank);
* per rank: the RSS high-water mark (``ru_maxrss``) and the bytes of parameters, gradients and optimizer
  state that rank holds, read from the model and optimizer after an optimizer step (before
  ``zero_grad``): local shards for DTensor (FSDP2) parameters, the flat-parameter shard for FSDP1,
  the partitions for DeepSpeed ZeRO;
* what the Trainer really built (wrapper type, FSDP1 sharding strategy, FSDP2 ``FSDPModule`` count and
  ``reshard_after_forward``, DeepSpeed stage), read inside the run from a ``TrainerCallback``.

Writes ``benchmarks/results/strategies.json`` and prints a markdown table. DeepSpeed rows run only where
``deepspeed`` imports (e.g. ``pip install --target DIR deepspeed`` and ``PYTHONPATH=DIR``); otherwise
they are recorded as failed with the import error.

Findings on CPU/gloo (torch 2.13, transformers 5.23, accelerate 1.15, deepspeed 0.19.8):

* DDP needs ``use_cpu=True``: without it accelerate picks ``DistributedType.NO`` and each rank trains alone.
* FSDP (1 and 2, any strategy) is silently dropped: accelerate's ``AcceleratorState`` lets the FSDP plugin
  through only for MULTI_GPU-like distributed types, not MULTI_CPU, so the Trainer builds DDP. The rows
  ``*_forced`` relabel the PartialState MULTI_CPU -> MULTI_GPU: FSDP2 then trains; FSDP1 does not.
* DeepSpeed ZeRO 1-3 run (gloo), with or without ``use_cpu``; the first run JIT-compiles DeepSpeed's
  ``deepspeed_shm_comm`` op (a C++ compiler is needed; ~3 minutes on 2 cores, cached afterwards in
  ``~/.cache/torch_extensions``). A build killed halfway leaves a ``lock`` file there that makes the next
  run wait forever: delete that directory.

``STRATEGIES_STEPS=N`` shortens the runs for a quick check. The worker half of this file
(``--worker NAME``) is what torchrun starts on each rank.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HANG_ENV = "STRATEGIES_DUMP_STACKS_AFTER_S"
_FORCE_KEY = "_force_distributed_type"  # not a TrainingArguments kwarg: a workaround applied in the worker
NPROC = 2

# Model / workload: ~30M parameters, where sharding shows in the per-rank bytes on a CPU box.
MODEL = {"n_layer": 6, "n_embd": 512, "n_head": 8, "vocab_size": 16384, "n_positions": 128}
SEQ_LEN = 128
BATCH = 4  # per device
STEPS = int(os.environ.get("STRATEGIES_STEPS", "12"))  # override for quick checks
WARMUP = 4


def _ds_config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_optimization": {"stage": stage},
    }


# Every strategy runs with these; without `use_cpu=True` accelerate's PartialState on a GPU-less box
# under torchrun picks DistributedType.NO: each rank then trains alone (no process group, no DDP).
BASE_ARGS: dict[str, Any] = {"use_cpu": True}

_V1 = {"version": 1, "sync_module_states": False}  # FSDP1 default sync_module_states=True needs a GPU
_FORCE = {_FORCE_KEY: "MULTI_GPU"}

# name -> extra TrainingArguments kwargs (the exact ones the strategy is tried with, on top of BASE_ARGS).
# The name's prefix (ddp / fsdp1 / fsdp2 / deepspeed) is what the Trainer must have built for the row to
# count as `ran`; anything else is recorded as failed ("not applied") as soon as training starts.
STRATEGIES: dict[str, dict[str, Any]] = {
    "ddp": {},
    "ddp_without_use_cpu": {"use_cpu": False},
    "fsdp1_full_shard_default_cfg": {"fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 1}},
    "fsdp1_full_shard": {"fsdp": "full_shard auto_wrap", "fsdp_config": _V1},
    "fsdp1_shard_grad_op": {"fsdp": "shard_grad_op auto_wrap", "fsdp_config": _V1},
    "fsdp1_hybrid_shard": {"fsdp": "hybrid_shard auto_wrap", "fsdp_config": _V1},
    "fsdp1_no_shard": {"fsdp": "no_shard auto_wrap", "fsdp_config": _V1},
    # FSDP2 (transformers' default version): the sharding strategy is the bool reshard_after_forward.
    "fsdp2_full_shard": {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": True}},
    "fsdp2_shard_grad_op": {"fsdp": True, "fsdp_config": {"version": 2, "reshard_after_forward": False}},
    "fsdp2_hybrid_shard": {"fsdp": "hybrid_shard auto_wrap", "fsdp_config": {"version": 2}},
    "fsdp2_no_shard": {"fsdp": "no_shard auto_wrap", "fsdp_config": {"version": 2}},
    # FSDP2 HSDP goes through accelerate's ParallelismConfig (built inside the worker from this dict);
    # with 2 ranks only the degenerate 2 replicas x 1 shard (= replicated, FSDP2's no_shard) fits.
    "fsdp2_hsdp_2x1": {
        "fsdp": True,
        "fsdp_config": {"version": 2},
        "parallelism_config": {"dp_replicate_size": 2, "dp_shard_size": 1},
    },
    # Workaround rows: relabel accelerate's PartialState MULTI_CPU -> MULTI_GPU after TrainingArguments
    # built it, so that AcceleratorState lets the FSDP plugin through on CPU/gloo.
    "fsdp2_full_shard_forced": {"fsdp": True, "fsdp_config": {"version": 2}, **_FORCE},
    "fsdp2_shard_grad_op_forced": {
        "fsdp": True,
        "fsdp_config": {"version": 2, "reshard_after_forward": False},
        **_FORCE,
    },
    "fsdp2_hsdp_2x1_forced": {
        "fsdp": True,
        "fsdp_config": {"version": 2},
        "parallelism_config": {"dp_replicate_size": 2, "dp_shard_size": 1},
        **_FORCE,
    },
    "fsdp1_full_shard_forced": {"fsdp": "full_shard auto_wrap", "fsdp_config": _V1, **_FORCE},
    "deepspeed_zero1": {"deepspeed": _ds_config(1)},
    "deepspeed_zero2": {"deepspeed": _ds_config(2)},
    "deepspeed_zero3": {"deepspeed": _ds_config(3)},
}


def _expected_applied(name: str, applied: dict[str, Any]) -> bool:
    kind = name.split("_", 1)[0]
    return {
        "ddp": applied.get("ddp", False),
        "fsdp1": applied.get("fsdp1_root", False),
        "fsdp2": applied.get("is_fsdp2", False) and applied.get("fsdp2_root_is_fsdp_module", False),
        "deepspeed": applied.get("trainer_is_deepspeed_enabled", False),
    }.get(kind, False)


class NotAppliedError(RuntimeError):
    """The Trainer ran, but did not build the strategy that was asked for."""


# ----------------------------------------------------------------------------------------------------
# worker (one per rank, started by torchrun)
# ----------------------------------------------------------------------------------------------------


def _tensor_bytes(tensors: list[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one flat buffer count once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):  # DTensor: this rank's shard
            t = t.to_local()
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if storage.nbytes() == 0 or key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def _held_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """Parameter / gradient / optimizer-state bytes this rank holds (called before zero_grad)."""
    params = list(model.parameters())
    inner = getattr(optimizer, "optimizer", optimizer)  # AcceleratedOptimizer -> torch / DeepSpeed optim
    param_t: list[Any] = []
    grad_t: list[Any] = []
    for p in params:
        param_t.append(getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p)
        grad_t.append(p.grad)
    # FSDP1 (use_orig_params=True) exposes views; the flat parameters hold the real shard and its grad.
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        for m in FSDP.fsdp_modules(model):
            handle = getattr(m, "_handle", None)
            if handle is not None:
                param_t.append(handle.flat_param)
                grad_t.append(handle.flat_param.grad)
    except ImportError:
        pass
    opt_t: list[Any] = []
    ds_inner = getattr(inner, "optimizer", None)  # DeepSpeed ZeRO wraps the torch optimizer
    for opt in (inner, ds_inner):
        state = getattr(opt, "state", None)
        if isinstance(state, dict):
            for s in state.values():
                if isinstance(s, dict):
                    opt_t.extend(v for v in s.values() if hasattr(v, "untyped_storage"))
    # DeepSpeed ZeRO-1/2 fp32 master partitions and their gradients; ZeRO-3 fp32 partitions.
    for attr in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
        for t in getattr(inner, attr, None) or []:
            opt_t.append(t)
            grad_t.append(getattr(t, "grad", None))
    for attr in ("averaged_gradients",):
        val = getattr(inner, attr, None)
        if isinstance(val, dict):
            for lst in val.values():
                grad_t.extend(lst or [])
    return {
        "param_bytes": _tensor_bytes(param_t),
        "grad_bytes": _tensor_bytes(grad_t),
        "optim_state_bytes": _tensor_bytes(opt_t),
    }


def _applied(trainer: Any, model_kw: Any) -> dict[str, Any]:
    """What the Trainer actually built, read from a running Trainer (for tests to assert on)."""
    import torch
    import torch.distributed as dist

    wrapped = trainer.model_wrapped
    acc = trainer.accelerator
    info: dict[str, Any] = {
        "model_wrapped_type": f"{type(wrapped).__module__}.{type(wrapped).__qualname__}",
        "callback_model_type": f"{type(model_kw).__module__}.{type(model_kw).__qualname__}",
        "distributed_type": str(acc.distributed_type),
        "is_fsdp2": bool(getattr(acc, "is_fsdp2", False)),
        "trainer_is_fsdp_enabled": bool(trainer.is_fsdp_enabled),
        "trainer_is_deepspeed_enabled": bool(trainer.is_deepspeed_enabled),
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "ddp": isinstance(wrapped, torch.nn.parallel.DistributedDataParallel),
    }
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(wrapped, FSDP):
        info["fsdp1_root"] = True
        info["fsdp1_sharding_strategy"] = wrapped.sharding_strategy.name
        info["fsdp1_units"] = len(FSDP.fsdp_modules(wrapped))
        info["fsdp1_shard_group_size"] = wrapped.process_group.size()
    fsdp2 = [(n, m) for n, m in wrapped.named_modules() if isinstance(m, FSDPModule)]
    if fsdp2:
        info["fsdp2_root_is_fsdp_module"] = isinstance(wrapped, FSDPModule)
        info["fsdp2_units"] = len(fsdp2)
        # Per FSDP unit: reshard_after_forward (True <=> FULL_SHARD-like, False <=> SHARD_GRAD_OP-like).
        by_unit = {}
        for n, m in fsdp2:
            pg = m._get_fsdp_state()._fsdp_param_group
            if pg is not None:
                by_unit[n or "<root>"] = pg.post_forward_mesh_info is not None
        info["fsdp2_reshard_after_forward_by_unit"] = by_unit
        block_cls = tuple(getattr(model_kw, "_no_split_modules", None) or ())
        blocks = {by_unit[n] for n, m in fsdp2 if n in by_unit and type(m).__name__.endswith(block_cls)}
        info["fsdp2_block_reshard_after_forward"] = sorted(blocks)
        p = next(wrapped.parameters())
        if hasattr(p, "placements"):
            info["fsdp2_param_placements"] = [str(x) for x in p.placements]
            info["fsdp2_mesh_shape"] = list(p.device_mesh.shape)
            info["fsdp2_mesh_dim_names"] = list(p.device_mesh.mesh_dim_names or [])
    if trainer.is_deepspeed_enabled:
        info["deepspeed_zero_stage"] = acc.state.deepspeed_plugin.zero_stage
        info["deepspeed_engine_stage"] = wrapped.zero_optimization_stage()
        info["deepspeed_optimizer_type"] = type(wrapped.optimizer).__name__
    local = 0
    for p in wrapped.parameters():
        t = p.to_local() if hasattr(p, "to_local") else getattr(p, "ds_tensor", p)
        local += t.numel()
    info["local_param_numel"] = local
    return info


def worker(name: str, out_dir: Path) -> None:
    import faulthandler
    import resource

    # A hang (a collective that never completes, a JIT build lock) leaves every thread's stack in the log.
    faulthandler.dump_traceback_later(float(os.environ.get(_HANG_ENV, "0")) or 1e9, exit=False)
    rank = int(os.environ.get("RANK", "0"))
    out = out_dir / f"rank{rank}.json"
    result: dict[str, Any] = {"rank": rank, "strategy": name}
    probe: Any = None
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(**MODEL))
        result["model_params"] = sum(p.numel() for p in model.parameters())

        n_samples = STEPS * BATCH * NPROC
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, MODEL["vocab_size"], (n_samples, SEQ_LEN), generator=g)

        class DS(torch.utils.data.Dataset):
            def __len__(self) -> int:
                return n_samples

            def __getitem__(self, i: int) -> dict[str, Any]:
                return {"input_ids": ids[i], "labels": ids[i]}

        extra = {**BASE_ARGS, **STRATEGIES[name]}
        force_type = extra.pop(_FORCE_KEY, None)
        if "parallelism_config" in extra:
            from accelerate.parallelism_config import ParallelismConfig

            extra["parallelism_config"] = ParallelismConfig(**extra["parallelism_config"])
        args = TrainingArguments(
            output_dir=str(out_dir / "trainer_out"),
            per_device_train_batch_size=BATCH,
            max_steps=STEPS,
            learning_rate=1e-4,
            logging_strategy="no",
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
            **extra,
        )

        if force_type:
            # Bypass accelerate's gate (FSDP only for MULTI_GPU-like types): relabel the shared PartialState.
            from accelerate.state import PartialState
            from accelerate.utils import DistributedType

            _ = args.device  # builds the PartialState (MULTI_CPU, gloo)
            PartialState().distributed_type = DistributedType[force_type]

        class Probe(TrainerCallback):
            def __init__(self) -> None:
                self.trainer: Any = None
                self.t0 = 0.0
                self.times: list[float] = []
                self.mem: dict[str, int] = {}
                self.applied: dict[str, Any] = {}

            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.applied = _applied(self.trainer, kw.get("model"))
                if not _expected_applied(name, self.applied):
                    a = self.applied
                    raise NotAppliedError(
                        f"not applied: Trainer built {a['model_wrapped_type'].rsplit('.', 1)[-1]} "
                        f"({a['distributed_type']}, backend {a['backend']})"
                    )

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.t0 = time.perf_counter()

            def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step == WARMUP:  # 0-based: the (WARMUP+1)th step, grads still present
                    self.mem = _held_bytes(self.trainer.model_wrapped, self.trainer.optimizer)
                    self.applied = _applied(self.trainer, kw.get("model"))  # again, after a step

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.times.append(time.perf_counter() - self.t0)

        probe = Probe()
        trainer = Trainer(model=model, args=args, train_dataset=DS(), callbacks=[probe])
        probe.trainer = trainer
        trainer.train()
        steady = probe.times[WARMUP:]
        result.update(
            status="ran",
            step_times_s=[round(t, 4) for t in probe.times],
            median_step_s=statistics.median(steady) if steady else None,
            held=probe.mem,
            applied=probe.applied,
            torch_threads=torch.get_num_threads(),
        )
    except BaseException as exc:  # record, then fail the rank so torchrun reports it
        msg = (str(exc).strip().splitlines() or [""])[0]
        result.update(status="failed", error=f"{type(exc).__name__}: {msg}"[:400])
        if probe is not None and probe.applied:
            result["applied"] = probe.applied
        raise
    finally:
        result["ru_maxrss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        out.write_text(json.dumps(result, indent=1))


# ----------------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------------

_ERR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?([A-Za-z_.]*(?:Error|Exception|Exit)\w*: .+)$")


def _error_from_log(log: str) -> str:
    lines = [m.group(1) for line in log.splitlines() if (m := _ERR_LINE.match(line.strip()))]
    return lines[-1][:400] if lines else "no error line in the log (see log_tail)"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the session this benchmark started for one torchrun (its pgid is the launcher's pid)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)


def _torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def run_strategy(name: str, timeout: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"strat_{name}_"))
    log_path = tmp / "log.txt"
    cmd = [*_torchrun(), "--standalone", "--nproc-per-node", str(NPROC), __file__, "--worker", name]
    cmd += ["--out", str(tmp)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    env[_HANG_ENV] = str(max(timeout - 20, 10))
    t0 = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
        _kill_group(proc)  # also reaps stragglers after a normal exit
    wall = time.monotonic() - t0
    log_text = log_path.read_text(errors="replace")
    ranks = []
    for r in range(NPROC):
        f = tmp / f"rank{r}.json"
        if f.exists():
            ranks.append(json.loads(f.read_text()))
    row: dict[str, Any] = {
        "strategy": name,
        "training_args": {**BASE_ARGS, **STRATEGIES[name]},
        "returncode": rc,
        "wall_s": round(wall, 1),
    }
    ok = rc == 0 and len(ranks) == NPROC and all(r.get("status") == "ran" for r in ranks)
    if ok:
        med = max(r["median_step_s"] for r in ranks)
        global_tokens = BATCH * NPROC * SEQ_LEN
        row.update(
            status="ran",
            median_step_s=round(med, 4),
            tokens_per_s=round(global_tokens / med, 1),
            ranks=[
                {
                    "rank": r["rank"],
                    "ru_maxrss_mib": r["ru_maxrss_mib"],
                    **r["held"],
                    "held_total_mib": round(sum(r["held"].values()) / 2**20, 1),
                    "step_times_s": r["step_times_s"],
                }
                for r in sorted(ranks, key=lambda r: r["rank"])
            ],
            applied=ranks[0]["applied"],
            applied_rank1=ranks[1]["applied"] if len(ranks) > 1 else None,
            model_params=ranks[0]["model_params"],
            torch_threads=ranks[0]["torch_threads"],
        )
    else:
        errs = [r["error"] for r in ranks if r.get("error")]
        if timed_out:
            reason = f"timed out after {timeout:.0f}s"
        elif errs:
            reason = errs[0]
        else:
            reason = _error_from_log(log_text)
        row.update(status="failed", reason=reason, log_tail=log_text[-3000:])
        if ranks and ranks[0].get("applied"):
            row["applied"] = ranks[0]["applied"]
    shutil.rmtree(tmp, ignore_errors=True)
    return row


def _versions() -> dict[str, Any]:
    import accelerate

    try:
        import deepspeed

        found = deepspeed.__version__
    except Exception as exc:
        found = f"not importable: {type(exc).__name__}: {exc}"[:200]
    return {"accelerate": accelerate.__version__, "deepspeed": found}


def _table(rows: list[dict[str, Any]]) -> str:
    from benchmarks.report import table

    out = []
    kinds = ("param_bytes", "grad_bytes", "optim_state_bytes")
    for r in rows:
        if r["status"] != "ran":
            out.append([r["strategy"], f"failed: {r['reason'][:160]}"])
            continue
        held = "; ".join("/".join(f"{x[k] / 2**20:.0f}" for k in kinds) for x in r["ranks"])
        rss = "; ".join(f"{x['ru_maxrss_mib']:.0f}" for x in r["ranks"])
        out.append([r["strategy"], "ran", f"{r['tokens_per_s']:.0f}", f"{r['median_step_s']:.3f}", held, rss])
    held = "per-rank held MiB (p/g/opt)"
    return table(["strategy", "status", "tokens/s", "median step s", held, "per-rank RSS MiB"], out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--only", nargs="*", help="strategies to run (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="hard limit per strategy, seconds")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, Path(a.out))
        return
    from benchmarks.harness import machine  # not on the ranks: torchrun runs this file as a script
    from benchmarks.report import store

    names = a.only or list(STRATEGIES)
    rows = []
    for name in names:
        print(f"[strategies] {name} ...", flush=True)
        row = run_strategy(name, a.timeout)
        print(f"[strategies] {name}: {row['status']} {row.get('reason', '')} ({row['wall_s']}s)", flush=True)
        rows.append(row)
    doc = {
        "machine": machine(),
        "versions": _versions(),
        "workload": {
            "model": "GPT2LMHeadModel (random init)",
            "config": MODEL,
            "seq_len": SEQ_LEN,
            "per_device_batch": BATCH,
            "nproc": NPROC,
            "steps": STEPS,
            "warmup_steps": WARMUP,
            "tokens_per_s": "global tokens per step / max over ranks of the median steady step time",
            "held_bytes": "distinct storages of params, grads (before zero_grad) and optimizer state "
            f"after optimizer step {WARMUP + 1}; DDP's gradient buckets are not counted; DeepSpeed shows 0 "
            "grad bytes because its engine.step() (run inside accelerator.backward) already consumed them",
        },
        "results": rows,
    }
    print(_table(rows))
    store("strategies", doc, indent=1)


if __name__ == "__main__":
    main()
