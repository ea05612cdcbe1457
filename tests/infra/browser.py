"""Open a page file in real headless Chromium and report what a user's browser did with it."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def open_file(path: Path, screenshot: Path | None = None, width: int = 1400) -> dict:
    """Every request the page made, console errors, how many charts rendered with a size, and whether
    the page is wider than the window (a table that does not fit)."""
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": 1000})
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        page.wait_for_load_state("networkidle")
        charts = page.evaluate(
            "Array.from(document.querySelectorAll('figure svg')).filter(s => s.getBoundingClientRect().width > 100"
            " && s.getBoundingClientRect().height > 100).length"
        )
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        title = page.title()
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    return {"requests": requests, "errors": errors, "charts": charts, "overflow_px": overflow, "title": title}
