"""taskq_cli: the ``taskq`` command line (typer + rich) and the ``taskq top`` dashboard."""
