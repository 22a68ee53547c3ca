"""The read model both dashboards share: ``taskq top`` (tui/) and the admin web UI (ui/).

``source.py`` is the ``DashboardSource`` protocol and ``BackendSource`` over any Backend;
``snapshot.py`` what one read returns; ``filters.py`` the jobs pane's filter;
``queue_blockers.py`` why a queue's work waits; ``failures.py`` outage or bug;
``limit_store.py`` where rate limits kept in Redis are read. No Textual, no web stack here.
"""
