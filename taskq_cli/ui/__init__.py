"""``taskq ui serve``: the admin web UI, a Litestar app over the same read model as ``taskq top``.

Pages are server-rendered Jinja2 templates refreshed in place by htmx (vendored in ``static/``,
no build step); every page's data is also served as JSON under ``/api/``, documented at
``/api/openapi.json``. ``app.create_app`` builds the application; ``pages/`` holds one module
of route handlers per page.
"""
