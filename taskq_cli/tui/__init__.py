"""``taskq top``: the live Textual dashboard.

``TopApp`` (app.py) reads everything through a ``DashboardSource`` (source.py), so the same
app runs on PostgreSQL in production and on the in-memory backend in tests. Each pane is a
widget of its own under ``widgets/``; messages live in messages.py, styles in top.tcss.
"""
