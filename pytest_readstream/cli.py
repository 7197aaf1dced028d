"""The ``readstream`` console script."""


def main(argv=None) -> int:
    raise SystemExit("readstream: no subcommands yet")
