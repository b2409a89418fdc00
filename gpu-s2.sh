#!/bin/bash
# session script (untracked): suites static and shared, CuPy, table ids, PyTorch
b=$PWD/.bundle
export LD_LIBRARY_PATH=$b/deps
cd $b
{ echo "commit $(cat COMMIT) $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee $OUT/env.txt
bash scripts/run-suite.sh $b --static --timeout 90 > $OUT/static.txt 2>&1; echo "static rc=$?" | tee -a $OUT/static.txt
tail -40 $OUT/static.txt
bash scripts/run-suite.sh $b --timeout 90 > $OUT/shared.txt 2>&1; echo "shared rc=$?" | tee -a $OUT/shared.txt
tail -40 $OUT/shared.txt
date -u +%T
bash scripts/cupy/cupy-gpu.sh $b > $OUT/cupy.txt 2>&1; echo "cupy rc=$?" | tee -a $OUT/cupy.txt; tail -8 $OUT/cupy.txt
bash scripts/export-table-ids.sh $b cuda > $OUT/tables.txt 2>&1; echo "tables rc=$?" | tee -a $OUT/tables.txt; tail -4 $OUT/tables.txt
date -u +%T
timeout 200 bash scripts/torch/torch-gpu.sh $b > $OUT/torch.txt 2>&1; echo "torch rc=$?" | tee -a $OUT/torch.txt; grep -E "PASS|FAIL|SKIP" $OUT/torch.txt | tail -30
date -u +%T
