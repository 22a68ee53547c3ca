"""``python -m taskq_cli`` runs the ``taskq`` command."""

from taskq_cli.app import main

main()
