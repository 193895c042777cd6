#!/bin/bash
# Dev-Slurm demo of the per-user shared monitor: 20 concurrent guarded runs of examples/tiny_mlp,
# 3 of them broken (NaN, slow divergence, eval regression), one monitor job for all of them, and the
# monitor requeued from outside mid-way. Prints what to check; asserts nothing (bench/, not tests/).
#   PYTHONPATH=$PWD/wrapper PATH=/work/main/.venv/bin:$PATH bash bench/demo_shared_monitor.sh [/tmp/scale-demo]
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
DEMO=${1:-/tmp/scale-demo}
STEPS=${STEPS:-6000}
rm -rf "$DEMO" && mkdir -p "$DEMO/state" "$DEMO/work"
cp -r "$REPO/examples/tiny_mlp/." "$DEMO/work/" && rm -rf "$DEMO/work/runs" && mkdir -p "$DEMO/work/runs"
cat > "$DEMO/config.toml" <<TOML
[sidecar]
mode = "per-user"
fast_interval_seconds = 5.0   # dev cadence: a short demo; the default cadence is measured by bench_monitor.py
job_poll_seconds = 20.0
mem = "400M"
monitor_mem = "1G"
TOML
export GUARDED_SBATCH_STATE_DIR="$DEMO/state" GUARDED_SBATCH_USER_CONFIG="$DEMO/config.toml"
cd "$DEMO/work"
declare -A BREAK=([03]="--nan-at 600" [07]="--drift-at ${LATE_BREAK:-4500}" [11]="--overfit-at ${LATE_BREAK:-4500}")
( while true; do echo "$(date +%s) $(squeue -h -n guarded-sbatch-monitor -t all -o '%i:%T' | tr '\n' ' ')"; sleep 2; done ) \
  > "$DEMO/monitor-jobs.log" 2>&1 &
SAMPLER=$!
for i in $(seq -w 0 19); do
  name=synthetic-regression-tanh-mlp-bs64-lr0.05-r$i
  python -P -m guarded_sbatch --guard-tb runs/r$i --guard-notes "$DEMO/NOTES.md" --job-name "$name" \
    train.sh --steps "$STEPS" --step-seconds 0.05 --logdir runs/r$i ${BREAK[$i]:-} > "$DEMO/launch-$i.log" 2>&1
  tail -1 "$DEMO/launch-$i.log"
done
MONITOR=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['job_id'])" "$DEMO/state/shared-monitor/default/monitor.json")
sleep "${REQUEUE_AFTER:-30}"
echo "$(date +%s) requeue monitor job $MONITOR from outside"; scontrol requeue "$MONITOR"
while squeue -h -u "$(id -un)" -o '%j' | grep -q synthetic-regression; do sleep 5; done
sleep 30  # the monitor's last poll and exit
kill "$SAMPLER"
echo "--- monitor jobs listed per squeue sample, every 2 s from before the first launch (distinct ids):"; awk '{for(i=2;i<=NF;i++){split($i,a,":"); ids[a[1]]=1}; n=NF-1; c[n]++} END{for(k in c) print k" monitor job(s) listed in "c[k]" samples"; for(i in ids) print "monitor id "i}' "$DEMO/monitor-jobs.log"
echo "--- per run:"; for d in "$DEMO"/state/runs/*/; do python - "$d" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1]); s = json.loads((d / "sidecar-state.json").read_text())
out = (d / "sidecar-monitor.out").read_text()
stop = [line[len("sidecar: stop "):] for line in out.splitlines() if line.startswith("sidecar: stop ")]
print(d.name[-8:], s["last_decision"], s["last_reason"], "restarts", s["restarts"], "evidence", bool(s["evidence"]),
      "FINAL_SUMMARY x", out.count("FINAL_SUMMARY"), "| job", stop or s["last_job_state"])
PY
done
echo "--- notes: $(grep -c '^### ' "$DEMO/NOTES.md" 2>/dev/null) STOP note(s)"; grep '^### ' "$DEMO/NOTES.md"
echo "--- monitor output:"; cat "$DEMO"/state/shared-monitor/default/monitor-*.out
