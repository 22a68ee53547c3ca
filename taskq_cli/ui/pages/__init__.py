"""One module per page: its HTML route (the whole page, or its live part for htmx) and its
JSON twin under ``/api/``."""
