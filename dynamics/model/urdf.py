"""Locating and parsing URDF files: paths relative to the config, or bundled robots.

``urdf = "example-robot-data:ur5"`` names a robot of the ``example-robot-data``
package, which installs its URDFs as data under ``cmeel.prefix/share/`` (no Python
module); the file is found offline through the package's installed-file list.
"""

from __future__ import annotations

from pathlib import Path

import pinocchio as pin

from mbctl.errors import ConfigError

__all__ = ["parse_urdf"]



def parse_urdf(path: Path) -> pin.Model:
    """Build the pinocchio model of a fixed-base URDF (no meshes needed).

    Raises:
        ConfigError: If pinocchio cannot parse the file.
    """
    try:
        return pin.buildModelFromUrdf(str(path))
    except (ValueError, RuntimeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise ConfigError(f"invalid URDF: {first_line}", file=path) from None
