import sys

from guarded_sbatch.cli.main import main

sys.exit(main())
