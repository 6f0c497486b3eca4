"""The web inspector in a real browser (Debian chromium + chromedriver, Selenium), against real
servers: ``elastimem ui`` on a store file and ``elastimem serve`` with keys (issue 29).

One headless browser for the module; each test drives it through pages as a person would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jinja2", reason="the inspector needs the extra elastimem[server]")
webdriver = pytest.importorskip("selenium.webdriver", reason="browser tests need selenium")

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

import elastimem  # noqa: E402
from tests.service.test_server import (  # noqa: E402
    TOKENS,
    backend_target,
    start_server,
    stop_server,
)

XSS = "<img src=x onerror=alert(1)>"
SCRIPT_END = "</script><script>alert(2)</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER), reason="needs Debian's chromium and chromium-driver"
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--window-size=1280,900",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``elastimem ui`` on a seeded store file: (its address, the file)."""
    store = tmp_path_factory.mktemp("ui") / "memory.db"
    with elastimem.open(store, disable_builtin_embedder=True) as mem:
        mem.begin_session()
        mem.record_turn(f"remember this {XSS}", f"sure {SCRIPT_END}")
        mem.record_turn("my sister Sofia lives in Chicago", "Chicago, noted.")
        mem.end_session()
        mem.remember("city", "Chicago")
        mem.remember("payload", XSS)
        mem.remember("closing", SCRIPT_END)
        mem.remember("pet", "Rex")
        mem.remember("pet", "R", source="auto")  # too short to replace Rex: quarantined
    proc = subprocess.Popen(
        [sys.executable, "-m", "elastimem.cli", "ui", "--db", str(store), "--no-browser",
         "--no-embedder"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    address = proc.stdout.readline().strip()
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", address), address
        _wait_up(address)
        yield address.rstrip("/"), store
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _wait_up(url: str) -> None:
    for _ in range(200):
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


def _follow(driver: Any, link: Any) -> None:
    page = driver.find_element(By.TAG_NAME, "html")
    link.click()
    WebDriverWait(driver, 30).until(staleness_of(page))


def _no_alert(driver: Any) -> None:
    try:
        alert = driver.switch_to.alert
    except NoAlertPresentException:
        return
    text = alert.text
    alert.dismiss()
    raise AssertionError(f"a script ran: alert({text!r})")


def _submit(driver: Any, button_text: str) -> None:
    for button in driver.find_elements(By.CSS_SELECTOR, "button"):
        if button.text.strip() == button_text:
            page = driver.find_element(By.TAG_NAME, "html")
            button.click()
            WebDriverWait(driver, 30).until(staleness_of(page))  # the next page is loaded
            return
    raise AssertionError(f"no button {button_text!r} on {driver.current_url}")


def test_xss_payloads_are_shown_as_text_and_never_run(browser: Any, ui: tuple[str, Path]) -> None:
    base, _ = ui
    session_link = None
    for path in ("/facts", "/facts/payload", "/facts/closing", "/search?q=remember", "/sessions"):
        browser.get(base + path)
        _no_alert(browser)
        assert not browser.find_elements(By.CSS_SELECTOR, "main img")
        scripts = browser.find_elements(By.TAG_NAME, "script")
        assert all("alert" not in (s.get_attribute("innerHTML") or "") for s in scripts)
        if path == "/sessions":
            session_link = browser.find_element(By.CSS_SELECTOR, "main a[href^='/sessions/']")
    assert session_link is not None
    _follow(browser, session_link)
    _no_alert(browser)
    assert SCRIPT_END in browser.find_element(By.TAG_NAME, "main").text
    browser.get(base + "/facts")
    assert XSS in browser.find_element(By.TAG_NAME, "main").text


def test_every_page_is_reachable_by_keyboard(browser: Any, ui: tuple[str, Path]) -> None:
    base, _ = ui
    browser.get(base + "/")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to content"
    reached = []
    for _ in range(10):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        reached.append(browser.switch_to.active_element.text)
    assert {"Facts", "Search", "Sessions", "Quarantine"} <= set(reached)
    facts = next(e for e in browser.find_elements(By.CSS_SELECTOR, "nav a") if e.text == "Facts")
    page = browser.find_element(By.TAG_NAME, "html")
    facts.send_keys(Keys.ENTER)
    WebDriverWait(browser, 30).until(staleness_of(page))
    assert browser.current_url.endswith("/facts")


def test_browse_edit_forget_and_erase_a_fact(browser: Any, ui: tuple[str, Path]) -> None:
    base, store = ui
    browser.get(base + "/facts")
    browser.find_element(By.ID, "q").send_keys("chic\n")
    WebDriverWait(browser, 30).until(lambda d: "q=chic" in d.current_url)
    _follow(browser, browser.find_element(By.LINK_TEXT, "city"))
    assert browser.current_url.endswith("/facts/city")
    field = browser.find_element(By.ID, "value")
    field.clear()
    field.send_keys("Denver")
    _submit(browser, "Save as a new version")
    timeline = browser.find_element(By.CSS_SELECTOR, "ol.timeline").text
    assert timeline.index("Denver") < timeline.index("Chicago") and "retired" in timeline
    _submit(browser, "Forget (keep history)")
    assert "forgotten" in browser.find_element(By.CSS_SELECTOR, "main").text
    _follow(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "Erase every version"))
    assert "2 version(s) of 'city'" in browser.find_element(By.TAG_NAME, "main").text
    _submit(browser, "Erase for good")
    assert browser.current_url.endswith("/facts")
    with elastimem.open(store, disable_builtin_embedder=True) as mem:
        assert mem.fact_history("city") == []


def test_search_explains_and_a_quarantined_write_is_promoted(
    browser: Any, ui: tuple[str, Path]
) -> None:
    base, store = ui
    browser.get(base + "/search")
    browser.find_element(By.ID, "q").send_keys("sister Sofia\n")
    WebDriverWait(browser, 30).until(lambda d: "q=sister" in d.current_url)
    result = browser.find_element(By.CSS_SELECTOR, "ol.results li")
    assert "Sofia" in result.text
    result.find_element(By.TAG_NAME, "summary").click()
    legs = result.find_element(By.CSS_SELECTOR, "table.legs").text
    assert "keyword" in legs and "recency" in legs
    assert result.find_elements(By.TAG_NAME, "meter")
    browser.get(base + "/quarantine")
    assert "kept existing value" in browser.find_element(By.TAG_NAME, "main").text
    _follow(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "Promote to a fact"))
    _submit(browser, "Promote")
    assert "Promoted to a fact" in browser.find_element(By.TAG_NAME, "main").text
    with elastimem.open(store, disable_builtin_embedder=True) as mem:
        assert mem.facts()["pet"] == "R"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sign_in_and_out_under_serve(
    browser: Any, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    server = start_server(tmp_path, target=backend_target(backend, request))
    try:
        with server.open_user("ana") as mem:
            mem.remember("city", "Oslo")
        with server.open_user("ben") as mem:
            mem.remember("city", "Lima")
        browser.get(server.base + "/ui/facts")
        assert browser.current_url.endswith("/ui/signin")
        browser.find_element(By.ID, "key").send_keys(TOKENS["ana"] + "\n")
        WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/ui/"))
        browser.get(server.base + "/ui/facts")
        page = browser.find_element(By.TAG_NAME, "main").text
        assert "Oslo" in page and "Lima" not in page
        cookie = [c for c in browser.get_cookies() if c["path"] == "/ui"][0]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        _submit(browser, "Sign out")
        WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/ui/signin"))
        after = [c for c in browser.get_cookies() if c["path"] == "/ui"]
        assert all(c["value"] != cookie["value"] for c in after)  # the session is gone
        browser.get(server.base + "/ui/facts")
        assert browser.current_url.endswith("/ui/signin")
    finally:
        browser.delete_all_cookies()
        assert stop_server(server) == 0
