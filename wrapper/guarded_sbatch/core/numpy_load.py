"""numpy loaded with one OpenBLAS thread, by whatever process first needs it (the sidecar, `monitor`, `show`, the
pre-flight reading a reference run's events, the evidence plot's child).

At load OpenBLAS starts a thread per core that spins for a while: about 0.05 s of CPU on 2 cores, that much per
core on a GPU node, beside the training. Nothing here multiplies matrices; the setting is put back at once, so no
child process inherits it.
"""

from __future__ import annotations

import os
import sys


def import_numpy() -> None:
    if "numpy" in sys.modules:
        return
    was = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401, PLC0415 - the point of this module: numpy on first need only
    finally:
        if was is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = was
