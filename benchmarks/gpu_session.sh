#!/usr/bin/env bash
# One lent GPU machine's session (the `device` tool in this workplace; any CUDA host with a Python
# that holds a CUDA torch otherwise): the never-run GPU paths first, then the GPU-only knob rows of
# benchmarks/gpu.py, then the older single-GPU tests, each bounded so that the whole fits in ~9
# minutes. Wheels for what the machine lacks travel in .whl/ (optuna, sqlalchemy, datasets,
# bitsandbytes, liger-kernel, torchao and their needs). Logs and JSON go to $OUT (default ./gpu-out).
#
#     COMMIT=$(git rev-parse --short HEAD) bash benchmarks/gpu_session.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "[gpu-session] $(( $(date +%s) - start ))s: $*" | tee -a "$OUT/steps.txt"; }

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >"$OUT/pip.txt" 2>&1 || { cat "$OUT/pip.txt"; exit 3; }
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
# A checkout that is not pip-installed lacks the package-data folder the shipped spaces install as.
if [ ! -e autotune/search_spaces ]; then cp -r search_spaces autotune/search_spaces; touch autotune/search_spaces/__init__.py; fi
stamp "installed"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    lscpu | grep -E '^Model name|^CPU\(s\)'
    python3 - <<'EOF'
import importlib
for name in ("torch", "transformers", "accelerate", "peft", "optuna", "datasets", "bitsandbytes",
             "liger_kernel", "torchao", "triton"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as error:  # noqa: BLE001 - a report of what imports
        print(name, "FAILED:", type(error).__name__, str(error).splitlines()[0][:200])
EOF
} 2>&1 | tee "$OUT/machine.txt"
stamp "machine read"

# 1. The paths that have never run on a GPU: Liger, fp8, the 4-bit base (alone and under LoRA in a
#    search), the compiled-kind memory estimate, one worker per GPU.
timeout -k 10 ${NEW_TESTS_S:-230} python3 -m pytest -q -p no:cacheprovider -rA --timeout 200 tests/gpu \
    -k "liger or fp8 or four_bit or compiled_trial_is_estimated or each_worker" >"$OUT/tests_new.log" 2>&1
stamp "new GPU tests: exit $?"; tail -25 "$OUT/tests_new.log"

# 2. The GPU-only knob values and LoRA/QLoRA against bf16 on one preset (benchmarks/gpu.py's rows).
timeout -k 10 ${KNOBS_S:-220} python3 - >"$OUT/knobs.log" 2>&1 <<EOF
import json, os
from benchmarks.gpu import LORA_ROWS, gpu_knobs
from benchmarks.harness import machine
model = os.environ.get("KNOBS_MODEL", "llama-1b")
info = machine()
info["commit"] = info["commit"] or os.environ.get("COMMIT", "")
out = {"machine": info}
path = os.path.join("$OUT", "gpu_knobs.json")
out["gpu_knobs"] = gpu_knobs(model)
json.dump(out, open(path, "w"), indent=1, default=str)
print(json.dumps(out["gpu_knobs"], indent=1, default=str))
out["lora"] = gpu_knobs(model, knob_rows=LORA_ROWS, peft="lora")
json.dump(out, open(path, "w"), indent=1, default=str)
print(json.dumps(out["lora"], indent=1, default=str))
EOF
stamp "knob rows: exit $?"; tail -40 "$OUT/knobs.log"

# 3. The single-GPU tests that passed on the first H100 run (compile modes last: max-autotune is slow).
left=$(( ${BUDGET_S:-560} - ($(date +%s) - start) ))
if [ "$left" -gt 40 ]; then
    timeout -k 10 $(( left - 15 )) python3 -m pytest -q -p no:cacheprovider -rA --timeout 200 tests/gpu \
        -k "precisions or fused or attention or pin_memory or compile_backends" >"$OUT/tests_old.log" 2>&1
    stamp "earlier GPU tests: exit $?"; tail -15 "$OUT/tests_old.log"
fi
stamp "done"
