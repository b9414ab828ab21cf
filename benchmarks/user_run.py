"""One configuration trained as a user trains it: a fresh process, a plain transformers `Trainer`.

    python -m benchmarks.user_run '{"model": "tiny-gpt2", "params": {...}, "seconds": 20}'

Optional: ``"seq_len"`` (default the model's), ``"slow_bf16"`` (a factor: bf16 steps slowed as
`slow_bf16.SlowBf16` does, for the screening benchmark's simulated CPU without native bf16).

No autotune code is in the training loop: the knob values become `TrainingArguments` and
model-load kwargs as the export writes them (`trial_kwargs`), on the preset's model and synthetic
data. It trains until it has measured `seconds` of steady state after its warm-up (`warmup_steps`
steps, then at least `warmup_seconds`). The last line of stdout is JSON: tokens/s over the steady
window (wall time, data loading included), its steps, the warm-up's length, the whole wall time.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from typing import Any

START = time.perf_counter()


def main() -> None:
    spec: dict[str, Any] = json.loads(sys.argv[1])
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from autotune.space.mapping import trial_kwargs
    from autotune.workloads.workload import resolve_workload

    workload = resolve_workload(spec["model"], spec.get("seq_len"))
    args_kwargs, model_kwargs = trial_kwargs(spec["params"])
    seed = int(spec.get("seed", 0))
    warmup_steps, warmup_seconds = int(spec.get("warmup_steps", 5)), float(spec.get("warmup_seconds", 3.0))
    seconds = float(spec.get("seconds", 20.0))
    tokens_per_step = (
        int(args_kwargs.get("per_device_train_batch_size", 8))
        * int(args_kwargs.get("gradient_accumulation_steps", 1))
        * workload.seq_len
    )

    class Window(TrainerCallback):
        """Times optimizer steps; stops the run once the steady window is long enough."""

        def __init__(self) -> None:
            self.steps = 0
            self.first_end: float | None = None
            self.window_start: float | None = None
            self.window_steps = 0
            self.window_s = 0.0

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.perf_counter()
            self.steps += 1
            if self.first_end is None:
                self.first_end = now
            if self.window_start is None:
                if self.steps >= warmup_steps and now - self.first_end >= warmup_seconds:
                    self.window_start = now
                return
            self.window_steps += 1
            self.window_s = now - self.window_start
            if self.window_s >= seconds and self.window_steps >= 5:
                control.should_training_stop = True

    window = Window()
    callbacks: list[Any] = [window]
    if spec.get("slow_bf16"):  # the screening benchmark's simulated CPU without native bf16
        from benchmarks.slow_bf16 import SlowBf16

        callbacks.append(SlowBf16(float(spec["slow_bf16"])))
    built = time.perf_counter()
    model = workload.build_model(model_kwargs)
    with tempfile.TemporaryDirectory(prefix="autotune-user-run-") as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            max_steps=1_000_000,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=seed,
            use_cpu=not torch.cuda.is_available(),
            **args_kwargs,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=workload.dataset(seed),
            data_collator=workload.collator(),
            callbacks=callbacks,
        )
        began = time.perf_counter()
        trainer.train()
    rate = window.window_steps * tokens_per_step / window.window_s if window.window_s > 0 else None
    print(
        json.dumps(
            {
                "tokens_per_s": rate,
                "window_steps": window.window_steps,
                "window_s": window.window_s,
                "warmup_steps": window.steps - window.window_steps,
                "setup_s": began - built,
                "process_s": time.perf_counter() - START,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
