#!/bin/bash
#SBATCH --job-name=synthetic-counting-gpt2-tiny-lr1e-3
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=2G
#SBATCH --time=00:15:00
# A tiny GPT-2 trained with the Hugging Face Trainer (TensorBoard + W&B offline); submit it from this folder.
# Healthy by default; `guarded-sbatch train.sh --nan-at 40` makes the loss NaN from step 40,
# `--diverge-at 60` multiplies the learning rate by 1000 there. `python` is the one on your PATH.
# The everyday shape `CONFIG=${1:-configs/tiny-gpt2.yaml}` + `python train.py --config "$CONFIG"` needs the
# launch side's expansion of the script's own assignments; until then the config is named on the line itself.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
export WANDB_MODE=offline WANDB_PROJECT=synthetic-counting-gpt2
python train.py --config configs/tiny-gpt2.yaml "$@"
