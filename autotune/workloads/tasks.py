"""What a model is trained for: the task names ``--task`` takes and the transformers classes of each."""

from __future__ import annotations

from typing import Any, Literal

Task = Literal["causal-lm", "masked-lm", "sequence-classification"]
TASKS: dict[str, Task] = {
    "causal-lm": "causal-lm",
    "masked-lm": "masked-lm",
    "seq-classification": "sequence-classification",
    "sequence-classification": "sequence-classification",
}

# The `transformers` auto class that builds a model for each task, and the mapping (in
# `transformers.models.auto.modeling_auto`) from config type to model class behind it.
AUTO_CLASS: dict[Task, str] = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
}
MODEL_MAPPING: dict[Task, str] = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING",
}


def task_of(config: Any) -> Task:
    """The task a model config was saved for (its ``architectures``); causal LM when it names none."""
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "sequence-classification"
    if any(a.endswith("ForMaskedLM") for a in architectures):
        return "masked-lm"
    return "causal-lm"
