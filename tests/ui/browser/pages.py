"""Helpers the browser tests share: telling an in-place update from a full reload."""

from __future__ import annotations

from playwright.async_api import Page

_MARKER = "__taskqNoReload"


async def keep_marker(page: Page) -> None:
    """Set a value on ``window`` that a full reload (or a navigation) would lose."""
    await page.evaluate(f"window.{_MARKER} = true")


async def marker_kept(page: Page) -> bool:
    """Whether the page is still the document ``keep_marker`` marked."""
    kept: bool = await page.evaluate(f"window.{_MARKER} === true")
    return kept
