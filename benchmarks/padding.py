"""Padding-free batches and length grouping on real variable-length text, against padded batches.

    python -m benchmarks.padding      # about 5 minutes on 2 CPU cores

The text is real English, one paragraph per sample (``--packing examples``): the license texts
under ``/usr/share/common-licenses`` and the installed packages' ``METADATA``. A BPE tokenizer is
trained on it and a small Llama-style model built from a config. Each configuration is one real
trial of ``autotune search`` (batch 8, sequence length 256, fp32, sdpa), three rotated rounds, each
its own study. Tokens/s counts real tokens only, so padding saved is speed gained. Results:
``results/padding.json`` and its section (`render`).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.assemble import store
from benchmarks.report import ratio_table, section

HERE = Path(__file__).resolve().parent

CONFIGS: dict[str, dict[str, Any]] = {
    "padded (defaults)": {"padding_free": False, "group_by_length": False},
    "padding-free": {"padding_free": True, "group_by_length": False},
    "grouped by length": {"padding_free": False, "group_by_length": True},
}
ROUNDS = 3
FIXED = {"per_device_train_batch_size": [8], "precision": ["fp32"], "attn_implementation": ["sdpa"]}


def paragraphs() -> list[str]:
    """Real text: the paragraphs (8 words or more) of license texts and installed package descriptions."""
    sources = sorted(Path("/usr/share/common-licenses").glob("*"))
    sources += sorted(Path(sys.prefix).glob("lib/python*/site-packages/*.dist-info/METADATA"))
    found: list[str] = []
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.name == "METADATA":  # the description follows the headers' blank line
            text = text.split("\n\n", 1)[-1]
        for block in re.split(r"\n\s*\n", text):
            words = block.split()
            if len(words) >= 8:
                found.append(" ".join(words))
    return list(dict.fromkeys(found))  # licenses repeat across packages


def write_workload(folder: Path, texts: list[str]) -> tuple[Path, Path]:
    """The data file and a model folder (Llama-style config and a BPE tokenizer trained on the text)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    data = folder / "paragraphs.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    model = folder / "model"
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=8000, special_tokens=["<pad>", "<unk>"])
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>")
    fast.save_pretrained(model)
    config = LlamaConfig(
        vocab_size=8000,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        architectures=["LlamaForCausalLM"],
    )
    config.save_pretrained(model)
    return data, model


def render(data: dict[str, Any]) -> str:
    rows = {
        name: {
            **row,
            "padding": "-" if row["padding_fraction"] is None else f"{100 * row['padding_fraction']:.0f}%",
        }
        for name, row in data["summary"].items()
    }
    return section(
        "padding",
        rounds=data["rounds"],
        table=ratio_table(rows, "padded (defaults)", extra=("padding",)),
        **data["corpus"],
        **data["machine"],
    )


def main() -> None:
    from benchmarks.harness import enqueued_rounds, machine

    texts = paragraphs()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-padding-") as temp:
        folder = Path(temp)
        data, model = write_workload(folder, texts)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        lengths = sorted(min(256, len(ids)) for ids in tokenizer(texts)["input_ids"])
        fixed = {k: v[0] for k, v in FIXED.items()}
        measured = enqueued_rounds(
            {name: {**fixed, **values} for name, values in CONFIGS.items()},
            {**FIXED, "padding_free": [False, True], "group_by_length": [False, True]},
            folder,
            ROUNDS,
            model=str(model),
            dataset=str(data),
            packing="examples",
            seq_len=256,
        )
    result = {
        "machine": machine(),
        "wall_s": time.monotonic() - began,
        "rounds": ROUNDS,
        "corpus": {
            "samples": len(texts),
            "tokens_median": lengths[len(lengths) // 2],
            "tokens_p90": lengths[int(0.9 * (len(lengths) - 1))],
        },
        **measured,
    }
    store("padding", result)


if __name__ == "__main__":
    main()
