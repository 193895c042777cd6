"""guarded-sbatch: a pre-flight for sbatch and a sidecar that watches the run."""

__version__ = "0.1.0"
