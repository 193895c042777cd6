#!/bin/bash
#SBATCH --job-name=synthetic-tanh-lightning-tb-lr5e-2
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=1G
#SBATCH --time=00:15:00
# A small regressor trained with Lightning (TensorBoardLogger, its default: lightning_logs/version_N); submit it from this folder.
# Healthy by default; `guarded-sbatch train.sh --nan-at 60` makes the loss NaN from step 60,
# `--diverge-at 60` multiplies the learning rate by 300 there. `python` is the one on your PATH.
# The everyday shape `CONFIG=${1:-configs/synthetic-tanh-lightning-tb.yaml}` + `python train.py --config "$CONFIG"` needs the
# launch side's expansion of the script's own assignments; until then the config is named on the line itself.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
python train.py --config configs/synthetic-tanh-lightning-tb.yaml "$@"
