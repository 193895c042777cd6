import sys

from guarded_sbatch.cli.entry import run

sys.exit(run())
