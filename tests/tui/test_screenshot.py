"""The README's picture of ``taskq top`` (docs/top.svg), rendered from the deterministic seed.

``TASKQ_WRITE_SCREENSHOT=1 .venv/bin/pytest tests/tui/test_screenshot.py`` rewrites the file;
without it the test checks that the committed picture is there and that a fresh render of
the main screen shows what the README describes.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.tui.conftest import SIZE, Dashboard, settle, top_app

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "top.svg"


async def test_the_main_screen_screenshot(dashboard: Dashboard) -> None:
    app = top_app(dashboard.source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        if os.environ.get("TASKQ_WRITE_SCREENSHOT"):
            app.save_screenshot(SCREENSHOT.name, path=str(SCREENSHOT.parent))
        svg = app.export_screenshot()
    for text in ("Queues", "Workers", "Recent&#160;failures", "webhooks", "media-1"):
        assert text in svg, text
    assert SCREENSHOT.is_file() and SCREENSHOT.read_text(encoding="utf-8").startswith("<svg")
