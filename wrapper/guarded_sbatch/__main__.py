import sys

try:
    from guarded_sbatch.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command line loads: nothing was done yet (130, as after any Ctrl-C)
    sys.exit(130)

sys.exit(main())
