#!/usr/bin/env bash
# The GPU checks of one lent-device session, in one command (issues 20 and 23): the self-check
# (no host sync in the guarded step with every precursor statistic, SkipStepAdamW against AdamW,
# exact resume, FSDP2 sharded saves over NCCL, the pinned snapshot), then the guard's and the
# precursors' cost per step (benchmarks/gpu_overhead.py). Run from the repository root on a CUDA
# machine; results also go to $OUT when it is set.
set -u
out=${OUT:-/tmp}
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
timeout 240 python3 -m lossguard.testing.gpu_check 2>&1 | tee "$out/gpu_check.txt"
echo "gpu_check exit: ${PIPESTATUS[0]}"
timeout 240 python3 benchmarks/gpu_overhead.py "$@" 2>&1 | tee "$out/gpu_overhead.txt"
echo "gpu_overhead exit: ${PIPESTATUS[0]}"
