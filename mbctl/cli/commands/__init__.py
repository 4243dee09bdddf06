"""Sub-commands of the ``mbctl`` command line; each module has ``add_arguments(parser)`` and ``run(args)``."""
