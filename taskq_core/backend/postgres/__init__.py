"""PostgresBackend (``backend.PostgresBackend``): the Backend protocol over asyncpg.

Each member repeats the protocol's signature word for word on purpose (mypy checks the match)
and has no docstring: the contract is ``backend/protocol``'s, as is logic both backends share.
"""
