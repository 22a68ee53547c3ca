"""The leader's sweeps: one module per sweep, each a class whose ``run_once`` does one pass
and returns a small result (tests call it directly).

Every predicate runs on the database clock inside the backend; these classes only decide
*when* to ask, and log and count what each pass did. Which of them run, how often and on
which loop is declared once, in ``worker/leader_services.py``; ``maintenance.py`` groups the
short lease and cleanup passes that share TASKQ_SWEEP_INTERVAL into the ``sweeps`` loop.
"""
