"""``python -m pigeon`` is the ``pigeon`` command."""

from pigeon.cli import main

main()
