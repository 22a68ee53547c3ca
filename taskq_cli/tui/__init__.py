"""``taskq top``: the live Textual dashboard.

``TopApp`` (app.py) reads everything through a ``DashboardSource`` (the read model in
``taskq_cli/dashboard/``, shared with the web UI), so the same app runs on PostgreSQL in
production and on the in-memory backend in tests. Each pane is a widget of its own under
``widgets/``; messages live in messages.py, styles in top.tcss.
"""
