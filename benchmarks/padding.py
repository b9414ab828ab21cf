"""Padding-free batches and length grouping on real variable-length text, against padded batches.

    python benchmarks/padding.py      # about 5 minutes on 2 CPU cores

The text is real English: every paragraph of the license texts under ``/usr/share/common-licenses``
and of the package descriptions (``METADATA``) installed in this environment, one paragraph per
sample (``--packing examples``), as fine-tuning data of documents of different lengths is. A BPE
tokenizer is trained on it (nothing is downloaded) and a small Llama-style model is built from a
config with random weights. Each configuration is one real trial of ``autotune search`` in a worker
process (batch 8, sequence length 256, fp32, sdpa, default measurement), three rounds in rotated
order, each round its own study. Tokens/s counts real tokens only, so padding saved is speed gained.
Results go to ``benchmarks/results/padding.json`` and ``benchmarks/sections/padding.md``.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "padding.json"
SECTION = HERE / "sections" / "padding.md"
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


def one_round(folder: Path, data: Path, model: Path, index: int) -> dict[str, dict[str, Any]]:
    import yaml

    import autotune

    names = list(CONFIGS)
    order = names[index % len(names) :] + names[: index % len(names)]
    space = folder / "space.yaml"
    space.write_text(
        yaml.safe_dump({"knobs": {**FIXED, "padding_free": [False, True], "group_by_length": [False, True]}})
    )
    fixed = {k: v[0] for k, v in FIXED.items()}
    result = autotune.search(
        model=str(model),
        dataset=str(data),
        packing="examples",
        space=str(space),
        trials=len(order),
        storage=f"sqlite:///{folder / f'round{index}.db'}",
        seq_len=256,
        finalists=0,
        measure_baseline=False,
        enqueue=[{**fixed, **CONFIGS[name]} for name in order],
        measure=autotune.MeasureSettings(screen_ratio=0.0),
    )
    rows: dict[str, dict[str, Any]] = {}
    for trial in result.trials:
        name = next(n for n, c in CONFIGS.items() if all(trial.params.get(k) == v for k, v in c.items()))
        attrs = trial.attrs
        rows[name] = {
            "state": trial.state,
            "reason": trial.reason,
            "tokens_per_s": trial.tokens_per_s,
            "rel_ci_halfwidth": trial.rel_ci_halfwidth,
            "padding_fraction": attrs.get("padding_fraction"),
            "peak_memory_bytes": trial.peak_memory_bytes,
            "window_tokens": attrs.get("window_tokens"),
            "measured_steps": attrs.get("measured_steps"),
        }
    return rows


def section(data: dict[str, Any]) -> str:
    m, corpus = data["machine"], data["corpus"]
    lines = [
        "## Padding-free batches and length grouping on real text\n",
        f"`python benchmarks/padding.py`, {m['date']}, commit {m['commit']}: {m['cpu']}, {m['cores']} "
        f"threads, torch {m['torch']}, transformers {m['transformers']}. {corpus['samples']} paragraphs of "
        f"license texts and installed package descriptions, one per sample (`--packing examples`), "
        f"{corpus['tokens_median']} tokens median, {corpus['tokens_p90']} at the 90th percentile, truncated "
        "at 256; a 4-layer Llama-style model (hidden 256, random weights), batch 8, fp32, sdpa. Each "
        f"configuration is one trial per round, {data['rounds']} rounds in rotated order. Tokens/s counts "
        "real tokens only.\n",
        "| configuration | tokens/s (median of rounds) | rounds | padding in the window | "
        "speedup over padded |",
        "|---|---|---|---|---|",
    ]
    base = data["summary"]["padded (defaults)"]["median_tokens_per_s"]
    for name, row in data["summary"].items():
        rates = ", ".join(f"{r / 1000:.1f}k" for r in row["tokens_per_s"])
        pad = row["padding_fraction"]
        speedup = row["median_tokens_per_s"] / base if base else None
        shown_pad = "-" if pad is None else f"{100 * pad:.0f}%"
        shown_speedup = "-" if speedup is None else f"{speedup:.2f}x"
        lines.append(
            f"| {name} | {row['median_tokens_per_s'] / 1000:.1f}k | {rates} | {shown_pad} | {shown_speedup} |"
        )
    lines.append(
        "\nThe speedup is the ratio of medians; the rounds' spread is in the third column. Padding-free "
        "removes the padding entirely (each batch is one row with position ids restarting per text, so "
        "the attention mask keeps texts apart); length grouping keeps padded batches but fills them with "
        "texts of similar length, and changes the data order (reported as a change to the training run).\n"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(HERE))
    from harness import machine

    texts = paragraphs()
    rounds: list[dict[str, dict[str, Any]]] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-padding-") as temp:
        folder = Path(temp)
        data, model = write_workload(folder, texts)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        lengths = sorted(min(256, len(ids)) for ids in tokenizer(texts)["input_ids"])
        for index in range(ROUNDS):
            rounds.append(one_round(folder, data, model, index))
            print(f"round {index + 1}: {json.dumps(rounds[-1])}", flush=True)
    summary: dict[str, Any] = {}
    for name in CONFIGS:
        rates = [r[name]["tokens_per_s"] for r in rounds if r.get(name, {}).get("tokens_per_s")]
        pads = [
            r[name]["padding_fraction"] for r in rounds if r.get(name, {}).get("padding_fraction") is not None
        ]
        summary[name] = {
            "tokens_per_s": rates,
            "median_tokens_per_s": statistics.median(rates) if rates else None,
            "padding_fraction": statistics.median(pads) if pads else None,
        }
    result = {
        "machine": machine(),
        "wall_s": time.monotonic() - began,
        "rounds": ROUNDS,
        "corpus": {
            "samples": len(texts),
            "tokens_median": lengths[len(lengths) // 2],
            "tokens_p90": lengths[int(0.9 * (len(lengths) - 1))],
        },
        "per_round": rounds,
        "summary": summary,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    SECTION.write_text(section(result))
    print(SECTION.read_text())


if __name__ == "__main__":
    main()
