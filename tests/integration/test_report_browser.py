"""The HTML report as people see it: opened in a real headless browser (Debian's chromium, driven through
Debian's chromedriver by selenium), with no console error, every image loaded, and a screenshot saved.

A planted page with a broken image and a script error checks that the inspection itself catches both.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsbench.report.build import build_report
from dsbench.report.render import columns_for
from tests.conftest import DATA

pytestmark = pytest.mark.browser

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                                   reason="Debian's chromium and chromium-driver are not installed "
                                          "(scripts/ensure_system_deps.sh installs them as root)")


@dataclass(frozen=True)
class PageCheck:
    title: str
    images: int
    broken_images: list[str]
    console_errors: list[str]
    table_rows: int
    screenshot: Path
    sorted_by: dict[str, list[list[str]]]
    """Per header clicked (once, then twice): the table's rows as the page shows them after each click."""


def inspect_page(page: Path, screenshot: Path, click: tuple[str, ...] = ()) -> PageCheck:
    """Open ``page`` in headless Chromium; collect console errors and images that did not load; click each header
    named in ``click`` twice and read the table after each click."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    # No network here: keep Chromium from trying its background services (their failures are not the page's).
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", f"--user-data-dir={screenshot.parent / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)  # no driver download
    try:
        driver.set_window_size(1400, 1800)
        driver.get(page.as_uri())
        broken = driver.execute_script(
            "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
            ".map(i => i.alt || i.src.slice(0, 60))")
        check = PageCheck(
            title=driver.title, images=driver.execute_script("return document.images.length"), broken_images=broken,
            console_errors=[e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"],
            table_rows=driver.execute_script("return document.querySelectorAll('table tbody tr').length"),
            screenshot=screenshot, sorted_by={header: _click_twice(driver, header) for header in click})
        driver.save_screenshot(str(screenshot))
    finally:
        driver.quit()
    return check


def _click_twice(driver, header: str) -> list[list[str]]:
    """Click the cells table's ``header`` twice; the rows' text after each click."""
    from selenium.webdriver.common.by import By

    th = next(th for th in driver.find_elements(By.CSS_SELECTOR, "#cells th") if th.text.strip() == header)
    seen = []
    for _ in range(2):
        th.click()
        seen.append(driver.execute_script("return Array.from(document.querySelectorAll('#cells tbody tr'))"
                                          ".map(r => Array.from(r.cells).map(c => c.textContent.trim()))"))
    return seen


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


@needs_browser
def test_report_opens_cleanly_in_a_browser(tmp_path):
    report = build_report([DATA / "runs" / "compare-cpu" / "cells"], tmp_path / "report")
    check = inspect_page(report.files["html"], tmp_path / "report.png", click=("tokens/s (wall)", "strategy"))
    print(f"screenshot: {check.screenshot}")
    assert check.title == "dsbench report"
    assert check.console_errors == [] and check.broken_images == []
    assert check.images == 5 and check.table_rows == len(report.rows)
    width, height = png_size(check.screenshot)
    assert width == 1400 and height > 1000 and check.screenshot.stat().st_size > 20_000
    # a click sorts by the column (figures by value, "-" last), a second click reverses; the oracle is the rows'
    # own figures sorted here
    column = [header for _, header, _ in columns_for(report.rows)].index("tokens/s (wall)")
    measured = sorted((row for row in report.rows if row.tokens_per_s is not None), key=lambda row: row.tokens_per_s)
    up, down = check.sorted_by["tokens/s (wall)"]
    assert [r[0] for r in up][:len(measured)] == [row.strategy for row in measured]
    assert [r[0] for r in down][:len(measured)] == [row.strategy for row in reversed(measured)]
    assert all(r[column] == "-" for r in up[len(measured):] + down[len(measured):])
    names = [r[0] for r in check.sorted_by["strategy"][0]]
    assert names == sorted(names) and len(names) == len(report.rows)


@needs_browser
def test_the_inspection_catches_a_broken_image_and_a_script_error(tmp_path):
    page = tmp_path / "planted.html"
    page.write_text("<!doctype html><html><head><title>planted</title></head><body>"
                    "<img alt='missing' src='data:image/png;base64,bm90IGEgcG5n'>"
                    "<script>undefinedFunction()</script></body></html>")
    check = inspect_page(page, tmp_path / "planted.png")
    assert check.broken_images == ["missing"]
    assert any("undefinedFunction" in message for message in check.console_errors), check.console_errors
