"""Train with the config `autotune export --format json` wrote: its TrainingArguments and model kwargs.

    autotune export --study tiny-gpt2-quick-seq128 --format json -o best.json
    python examples/use_export.py best.json

The model here is the tiny-gpt2 preset the study measured; with a hub model, load it as
``AutoModelForCausalLM.from_pretrained(name, **config["model_kwargs"])``.
"""

import json
import sys

from transformers import Trainer, TrainingArguments, default_data_collator

from autotune.workloads.workload import resolve_workload

with open(sys.argv[1]) as file:
    config = json.load(file)
workload = resolve_workload("tiny-gpt2")
model = workload.build_model(config["model_kwargs"])
args = TrainingArguments(
    output_dir="out",
    max_steps=20,
    report_to="none",
    save_strategy="no",
    disable_tqdm=True,
    use_cpu=True,  # as the search on a CPU did; leave it out on a GPU
    **config["training_args"],
)
trainer = Trainer(
    model=model, args=args, train_dataset=workload.dataset(seed=0), data_collator=default_data_collator
)
print(trainer.train())
optimizer = trainer.optimizer.optimizer
print(
    "bf16 autocast:",
    trainer.accelerator.mixed_precision,
    "| optimizer:",
    type(optimizer).__name__,
    "fused:",
    optimizer.defaults.get("fused"),
    "| attention:",
    model.config._attn_implementation,
)
