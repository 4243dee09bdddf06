"""Controllers and trajectories built on :mod:`mbctl.dynamics`, generated to C with CasADi."""
