"""``python -m evalfarm.cli``: the ``evalfarm`` command."""

from evalfarm.cli import main

main()
