"""Command line: one module per subcommand, dispatched by ``xsweep.cli.main``."""
