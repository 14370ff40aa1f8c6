"""The job report in a real browser: headless Chromium (Debian's chromium) opens report.html.

The page must log no console error, fail no request, and show every image (``naturalWidth > 0``).
Skipped where /usr/bin/chromium is missing, unless ``FANFIT_REQUIRE_BROWSER=1`` (CI sets it, so a
missing browser fails there instead). Playwright's own browser downloads are never used: its Python
wheel ships the driver, and the browser is the system's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fanfit.report import write_report

sys.path.insert(0, str(Path(__file__).parent))
from test_report import ESTIMATE, TRAIN  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _browser_or_skip() -> None:
    required = os.environ.get("FANFIT_REQUIRE_BROWSER") == "1"
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if missing:
        message = "no browser check: missing " + " and ".join(missing)
        if required:
            pytest.fail(message + "; FANFIT_REQUIRE_BROWSER=1 requires it")
        pytest.skip(message)


@pytest.mark.parametrize("kind", ["estimate", "train"])
def test_report_opens_in_chromium_without_errors_and_shows_every_image(tmp_path, kind):
    _browser_or_skip()
    from playwright.sync_api import sync_playwright

    # GIVEN a report written for a job
    page_path = write_report(ESTIMATE if kind == "estimate" else TRAIN, tmp_path)
    n_images = len(list(tmp_path.glob("*.png")))
    # WHEN headless Chromium opens it from the file system
    console: list[str] = []
    failed: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on(
                "console",
                lambda msg: (
                    console.append(f"{msg.type}: {msg.text}")
                    if msg.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda exc: console.append(f"pageerror: {exc}"))
            page.on("requestfailed", lambda req: failed.append(req.url[:80]))
            page.goto(page_path.as_uri(), wait_until="load", timeout=30_000)
            sizes = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
            )
            title = page.title()
        finally:
            browser.close()
    # THEN no console error and no failed request
    assert [c for c in console if c.startswith(("error", "pageerror"))] == []
    assert failed == []
    # AND every image is decoded and has a size
    assert len(sizes) == n_images == 3
    assert all(complete and w > 0 and h > 0 for complete, w, h in sizes), sizes
    assert kind in title
