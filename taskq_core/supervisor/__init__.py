"""The workgroup supervisor behind ``taskq workgroup``, in three layers.

The config: ``schema`` turns a TOML file into a validated ``WorkgroupConfig`` (``diagnostics``
words its errors as one line) and ``plan`` expands it into children. ``policy`` holds the pure
restart/backoff/burst/staleness decisions. ``manager`` is the state machine over injected
children (``children``), clock, health source and event sink (``status``); ``runtime`` wires it
to real processes, the runtime directory and the database for ``taskq workgroup start``.
"""
