"""Sub-commands of the ``mbctl`` command line; each module has ``add_parser`` and ``run``."""
