"""Site enforcement: the marker shared by guarded-sbatch, the sbatch shim and Slurm's lua plugins,
the site's enforcement policy (what counts as a training job, reject or tag), and the shim itself."""
