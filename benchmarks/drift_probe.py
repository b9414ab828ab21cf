"""The machine probe's cost and sensitivity (`autotune.measure.drift`): idle, against
os.cpu_count() busy processes and against the tests' throttle, in alternating rounds, with
tiny-gpt2-sized training steps (2 layers, 64 wide, batch 8 x 32 tokens) as the yardstick.

    python -m benchmarks.drift_probe 8      # 8 rounds; prints medians and per-round ratios

Every process it starts ends within 60 s on its own and is ended by pid after its round."""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

logging.set_verbosity_error()
from autotune.measure import drift  # noqa: E402


def least():  # the alternative: the least of 5 repetitions of 12 matmuls (about 2 ms each)
    a = torch.full((256, 256), 1 / 256)
    b = torch.eye(256)
    o = torch.empty(256, 256)
    t = []
    for _ in range(6):
        s = time.perf_counter()
        for _ in range(12):
            torch.mm(a, b, out=o)
        t.append(time.perf_counter() - s)
    return min(t[1:])


cfg = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=64)
model = GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 1000, (8, 32))


def step():
    t = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()
    return time.perf_counter() - t


HELPERS = Path(__file__).resolve().parents[1] / "tests" / "helpers.py"
THROTTLE = HELPERS.read_text().split('_THROTTLE = """')[1].split('"""')[0]


def throttle():
    return [subprocess.Popen([sys.executable, "-c", THROTTLE, str(os.getpid()), "0.008", "0.002", "30"])]


def busy(n):
    return [
        subprocess.Popen(
            [sys.executable, "-c", "import time\nend=time.time()+60\nwhile time.time()<end: pass"]
        )
        for _ in range(n)
    ]


for _ in range(3):
    step()
    drift.probe_s()
M = statistics.median
rows: dict[str, list[tuple[float, float, float, float, float]]] = {"idle": [], "busy": [], "throttle": []}
for _rnd in range(int(sys.argv[1])):
    for cond in rows:
        procs = busy(os.cpu_count()) if cond == "busy" else throttle() if cond == "throttle" else []
        time.sleep(0.3)
        try:
            t = time.perf_counter()
            p = drift.probe_s()
            cost = time.perf_counter() - t
            lst = least()
            s = [step() for _ in range(8)]
        finally:
            for q in procs:
                q.terminate()
                q.wait()
        rows[cond].append((p, cost, lst, min(s), M(s)))
        time.sleep(0.3)
print("threads", torch.get_num_threads(), "busy processes", os.cpu_count())
for k, name in enumerate(["probe reading", "probe wall cost", "least of 5x2ms", "step min", "step median"]):
    i = [r[k] for r in rows["idle"]]
    line = f"{name:15s} idle {1e3 * M(i):7.1f} ms"
    for cond in ("busy", "throttle"):
        b = [r[k] for r in rows[cond]]
        per_round = [round(x / y, 1) for x, y in zip(b, i, strict=False)]
        line += f" | {cond} {1e3 * M(b):7.1f} ms ratio {M(b) / M(i):5.2f} rounds {per_round}"
    print(line)
