#!/bin/bash
#SBATCH --job-name=synthetic-tanh-torch-lrsweep
#SBATCH --array=0-3
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=1G
#SBATCH --time=00:15:00
# A learning-rate sweep as a job array: each task picks its learning rate from SLURM_ARRAY_TASK_ID and logs
# TensorBoard to runs/<job name>-lr<lr> (torch's SummaryWriter). `guarded-sbatch train.sh` guards each task as a
# run of its own, all of them watched by one sidecar job; `guarded-sbatch train.sh --nan-task 2 --nan-at 30` makes
# task 2's loss NaN from step 30 (that task alone is stopped). `python` is the one on your PATH.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
LRS=(0.05 0.02 0.01 0.005)
LR=${LRS[${SLURM_ARRAY_TASK_ID:-0}]}
python train.py --config configs/synthetic-tanh-torch-sweep.yaml --lr "$LR" \
    --logdir "runs/${SLURM_JOB_NAME:-sweep}-lr${LR}" "$@"
