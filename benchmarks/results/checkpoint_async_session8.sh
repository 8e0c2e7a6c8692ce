#!/bin/bash
# async blocking: base5 (issue filed) vs main, alternating; 2-rank (each tree's own checkpoint_dcp.py) and 1-process
cd /work/main
for r in 1 2 3; do
  for t in base5 main; do
    if [ $t = base5 ]; then S=/tmp/base5; else S=/work/main; fi
    echo "### round $r $t 2-rank $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    if [ $t = base5 ]; then X=""; else X=""; fi; PYTHONPATH=$S/src:$S timeout 600 .venv/bin/python $S/benchmarks/checkpoint_dcp.py --widths 1024 2048 --repeat 4 $X 2>&1 | grep -E "^### width|async"
    echo "### round $r $t 1-process"
    for w in 1024 2048; do PYTHONPATH=$S/src timeout 300 .venv/bin/python benchmarks/checkpoint_async_blocking.py $w 8 "$t w$w"; done
  done
done
