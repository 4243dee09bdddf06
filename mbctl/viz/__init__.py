"""Pictures of mbctl's results: plots, MeshCat animations and a live view.

This layer sits above the studies and below the command line: it takes result
objects (feed-forward, simulation, run log, fits, sweeps) and writes figures, so a
user can draw the same pictures from Python as the command line does.
"""
