"""Controllers and trajectories (built on :mod:`dynamics`)."""
