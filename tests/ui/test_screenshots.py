"""The admin UI's pictures in docs/ (written by scripts/ui_screenshots.py from a seeded demo
database): each one docs/ui.md shows is there, a PNG of 1280x800, and the README shows one."""

from __future__ import annotations

import re
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PICTURE = re.compile(r"!\[[^\]]*\]\((?:docs/)?(ui-[a-z-]+\.png)\)")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def size_of(png: Path) -> tuple[int, int]:
    """Width and height from the PNG's header chunk."""
    head = png.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{png} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_every_screenshot_the_docs_show_is_there_at_1280x800() -> None:
    shown = PICTURE.findall((ROOT / "docs" / "ui.md").read_text(encoding="utf-8"))
    assert {"ui-overview.png", "ui-queues.png", "ui-jobs.png", "ui-job.png", "ui-batches.png"} <= (
        set(shown)
    )
    for name in shown:
        assert size_of(ROOT / "docs" / name) == (1280, 800), name


def test_the_readme_shows_the_ui() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = PICTURE.findall(readme)
    assert shown and all((ROOT / "docs" / name).is_file() for name in shown)
    assert "docs/ui.md" in readme
