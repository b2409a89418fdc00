#!/bin/bash
# session script (untracked): the static suite and logs of what fails
b=$PWD/.bundle
export LD_LIBRARY_PATH=$b/deps
cd $b
echo "commit $(cat COMMIT) $(date -u)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bash scripts/run-suite.sh $b --static --timeout 90 2>&1 | tail -60
for f in gpu-suite-logs/*.static.*.log; do
  if grep -q "^PASS" $f; then :; else echo "=== $f"; tail -25 $f; fi
done
bash scripts/run-suite.sh $b --timeout 90 graphs graph_conditional_body managed_matmul managed_phases ipc_pipeline 2>&1 | tail -12
mkdir -p $OUT/logs; cp gpu-suite-logs/*.log $OUT/logs/ 2>/dev/null
