"""The workgroup supervisor behind ``taskq workgroup``, in three layers.

``config`` turns a TOML file into a validated plan of children, ``policy`` holds the pure
restart/backoff/burst/staleness decisions, and ``manager`` runs the processes.
"""
