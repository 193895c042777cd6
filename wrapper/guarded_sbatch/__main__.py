import sys

from guarded_sbatch.cli import main

sys.exit(main())
