"""Headless Chromium for the HTML flame graph tests.

Uses the system's chromium and chromedriver (never lets selenium download a browser). When
they are missing the tests are skipped, unless AIFLAME_REQUIRE_BROWSER=1 (CI), where a
missing browser is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PACKAGES = {CHROMIUM: "chromium", CHROMEDRIVER: "chromium-driver"}  # Debian's
REQUIRED = os.environ.get("AIFLAME_REQUIRE_BROWSER") == "1"


def _missing() -> str | None:
    absent = [p for p in PACKAGES if not (Path(p).exists() and os.access(p, os.X_OK))]
    if absent:
        packages = " ".join(PACKAGES[p] for p in absent)
        return f"{' and '.join(absent)} not found (apt-get install {packages})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def driver():
    reason = _missing()
    if reason:
        if REQUIRED:
            pytest.fail(f"AIFLAME_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(f"browser tests need Chromium and chromedriver: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=os.devnull), options=options)
    # Record alert() calls instead of showing them: an injected script would call it.
    drv.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": "window.__alerts = []; window.alert = (m) => window.__alerts.push(String(m));"},
    )
    yield drv
    drv.quit()
