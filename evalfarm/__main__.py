"""``python -m evalfarm``: the ``evalfarm`` command."""

from evalfarm.cli import main

main()
