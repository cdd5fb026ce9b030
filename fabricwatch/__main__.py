"""``python -m fabricwatch``: the CLI, for child processes started with this interpreter."""

from fabricwatch.cli import main

main()
