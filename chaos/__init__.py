"""The chaos runner: real workers, a real PostgreSQL of its own, faults injected on purpose.

``make chaos`` runs every scenario in full; ``tests/chaos`` runs a short version of each.
"""
