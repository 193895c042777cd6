#!/bin/bash
#SBATCH --job-name=synthetic-tanh-mlp-bs64-lr5e-2
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=400M
#SBATCH --time=00:15:00
# A small real training run; submit it from this folder. Healthy by default;
# `sbatch train.sh --diverge-at 120` (or DIVERGE_AT=120 in the environment) blows the learning
# rate up from step 120 and the loss explodes to NaN.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
logdir="${TB_LOGDIR:-runs/synthetic-tanh-mlp-bs64-lr5e-2}"
extra=()
if [[ -n "${DIVERGE_AT:-}" ]]; then extra+=(--diverge-at "$DIVERGE_AT"); fi
exec "${PYTHON:-python3}" train.py --logdir "$logdir" "${extra[@]}" "$@"
