#!/bin/bash
#SBATCH --job-name=synthetic-tanh-mlp-bs64-lr5e-2
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=400M
#SBATCH --time=00:15:00
# A small real training run (numpy; TensorBoard events under runs/); submit it from this folder.
# Healthy by default; `guarded-sbatch train.sh --diverge-at 120` multiplies the learning rate by
# 300 from step 120 and the loss explodes to Inf/NaN. `python` is the one on your PATH.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
python train.py --config configs/synthetic-tanh-mlp.yaml "$@"
