"""Hydra's submitit launcher through guarded-sbatch: `python train.py -m hydra/launcher=guarded_submitit_slurm ...`
(or `guarded_submitit_local`). See docs/user-guide.md, "Sweeps"."""
