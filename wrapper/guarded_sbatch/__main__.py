import sys

try:
    from guarded_sbatch.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command line loads: nothing was done yet
    from guarded_sbatch.core.errors import ExitCode

    sys.exit(int(ExitCode.INTERRUPTED))

sys.exit(main())
