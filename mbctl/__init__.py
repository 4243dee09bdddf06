"""mbctl: model-based control of robot arms.

The physics lives in the top-level packages ``dynamics``, ``ctrl``, ``hardware``
and ``identification``; this package holds the command-line entry point and the
few leaf modules every layer may import (:mod:`mbctl.errors`, :mod:`mbctl.fileio`).
"""

__version__ = "0.1.0"
