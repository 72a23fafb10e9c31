"""The console in a real browser (Debian's Chromium, driven by Selenium) against `make run`'s runtime, started
in-process on free ports: sign in with the token, a task created through the API appears and is cancelled, a
failed task retried, a backup run started and watched to the end, hostile text inert, the first view under
100 KB, keyboard and 320 px, and the whole console under a stage prefix.  One browser and one stage serve the
module; the tests run in order and share what they made.

Without Chromium and its driver these tests are skipped (one line says so); CONSOLE_BROWSER_REQUIRED=1 (CI)
makes that a failure.  CONSOLE_SCREENSHOTS=1 (make console-screenshots) also writes docs/console/*.png.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest

from local.client import ApiClient, wait_until
from local.stage import LocalSettings, LocalStage, start_local_stage
from tests.e2e.console_support import REQUIRED, SCREENSHOTS, PrefixProxy, chromium, missing_browser

pytestmark = pytest.mark.e2e

MISSING = missing_browser()
if MISSING is not None and os.environ.get(REQUIRED) != "1":
    pytest.skip(f"console browser tests skipped: {MISSING}; CI sets {REQUIRED}=1", allow_module_level=True)

if MISSING is None:  # Selenium is imported only where the browser is
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
BUDGET_BYTES = 100_000
TAG = secrets.token_hex(3)
# Markup and script in every field a user's data can fill: if any of it were parsed, window.__xss is set.
IMG = "<img src=x onerror=window.__xss=1>"
SCRIPT = "<script>window.__xss=2</script>"


@pytest.fixture(scope="module")
def started() -> Iterator[tuple[LocalStage, Any]]:
    """The local stage and Chromium, started side by side (Chromium takes about 2 s of the stage's start)."""
    if MISSING is not None:
        pytest.fail(f"the console's browser tests need Chromium ({REQUIRED}=1): {MISSING}", pytrace=False)
    opened: list[tuple[Any, Any]] = []  # (the context manager, its driver), entered by the thread

    def open_browser() -> None:
        manager = chromium()
        opened.append((manager, manager.__enter__()))

    opening = threading.Thread(target=open_browser, daemon=True)
    opening.start()
    with ExitStack() as stack:
        try:
            local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
            # one attempt per execution (a failed task fails at once); the backup monitor polls every second
            stage = start_local_stage(local, overrides={"TASK_MAX_ATTEMPTS": "1", "BACKUP_MONITOR_DELAY_SECONDS": "1"},
                                      out=lambda line: None)
            stack.callback(stage.stop)
        finally:
            opening.join(60)
            for manager, _ in opened:
                stack.push(manager)
        assert opened, "Chromium did not start within 60 s"
        yield stage, opened[0][1]


@pytest.fixture(scope="module")
def stage(started: tuple[LocalStage, Any]) -> LocalStage:
    return started[0]


@pytest.fixture(scope="module")
def browser(started: tuple[LocalStage, Any]) -> Any:
    return started[1]


@pytest.fixture(scope="module")
def api(stage: LocalStage) -> ApiClient:
    return ApiClient(stage.api_url, stage.environment["API_TOKEN"])


def wait(driver: Any, check: Callable[[Any], Any], what: str, timeout: float = 10) -> Any:
    """Poll ``check`` until it is true; an element of a view drawn again meanwhile (stale) is looked up again."""
    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(lambda d: check(d) or None, message=what)


def main_text(driver: Any) -> str:
    """The view and the notice above it (an action's answer)."""
    return str(driver.find_element(By.ID, "notice").text) + "\n" + str(driver.find_element(By.ID, "main").text)


def shows(driver: Any, words: str, timeout: float = 10) -> None:
    try:
        wait(driver, lambda d: words in main_text(d), f"the console to show {words!r}", timeout)
    except Exception as exc:
        raise AssertionError(f"the console did not show {words!r}; it shows:\n{main_text(driver)}") from exc


def live(driver: Any, on: bool) -> None:
    """Set the live switch without its change event (no refresh now): the tests keep it off, so that no refresh
    redraws a view under them on a slow machine; the live views' tests turn it on and run tick() themselves."""
    driver.execute_script("const s = document.getElementById('live'); if (s) s.checked = arguments[0]", on)


def go(driver: Any, hash_: str) -> None:
    live(driver, False)
    driver.execute_script("location.hash = arguments[0]", hash_)


def task_page(driver: Any, task_id: str) -> None:
    """Open a task's page and wait until it is that task's (the task page shown before stays until it is drawn)."""
    go(driver, f"#/task/{task_id}")
    wait(driver, lambda d: d.execute_script("const h = document.querySelector('main h2'); return h && h.textContent")
         == f"Task {task_id}", f"the page of task {task_id}")


def click(driver: Any, selector: str, label: str) -> None:
    """Click the element labelled ``label``, found and clicked in one step (a view drawn again between the two
    leaves a stale element: it is looked up again, never clicked)."""
    def clicked(d: Any) -> bool:
        for element in d.find_elements(By.CSS_SELECTOR, selector):
            if element.text == label:
                element.click()
                return True
        return False

    wait(driver, clicked, f"the {label} button")


def confirm(driver: Any, button: str, value: str | None = None) -> None:
    """Click the view's button, then Confirm in its dialog (typing ``value`` first when given)."""
    click(driver, "main button", button)
    dialog = driver.find_element(By.ID, "confirm")
    wait(driver, lambda d: dialog.is_displayed(), "the confirmation dialog")
    if value is not None:
        field = driver.find_element(By.ID, "confirm-input")
        field.clear()
        field.send_keys(value)
    driver.find_element(By.ID, "confirm-ok").click()


MADE: set[str] = set()  # the screenshots this run made (docs/console.md may show no other)


def screenshot(driver: Any, name: str) -> None:
    """Take the picture docs/console.md shows as console/<name>.png; written there under CONSOLE_SCREENSHOTS=1."""
    png = driver.get_screenshot_as_png()
    assert png.startswith(b"\x89PNG"), name
    MADE.add(name)
    if os.environ.get(SCREENSHOTS) == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        (DOCS / f"{name}.png").write_bytes(png)


def no_script_ran(driver: Any) -> None:
    assert driver.execute_script("return window.__xss") is None
    fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert not [name for name in fetched if name.rstrip("/").endswith("/x")], fetched  # no <img src=x> loaded


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def sign_in(driver: Any, url: str, token: str, scheme: str = "bearer") -> None:
    driver.get(url)
    live(driver, False)
    field = wait(driver, lambda d: d.find_element(By.ID, "token").is_displayed() and d.find_element(By.ID, "token"),
                 "the sign-in form")
    assert "Sign in" in driver.find_element(By.ID, "sign-in").text
    Select(driver.find_element(By.ID, "scheme")).select_by_value(scheme)
    field.send_keys(token + Keys.ENTER)


def test_sign_in_shows_the_now_view_and_the_first_view_is_under_100_kb(stage: LocalStage, api: ApiClient,
                                                                       browser: Any) -> None:
    soon = datetime.now(UTC) + timedelta(minutes=20)
    body = {"id": f"welcome-{TAG}", "run_at": iso(soon),
            "action": {"type": "email", "to": "ops@example.com", "subject": "hello", "body": "due soon"}}
    assert api.post("/tasks", body).status == 201
    for i in range(6):  # executions for the Lateness view, done by the time it is shown
        quick = {"id": f"quick-{i}-{TAG}", "run_at": iso(datetime.now(UTC) + timedelta(seconds=1 + i % 3)),
                 "action": {"type": "email", "to": "ops@example.com", "subject": "quick", "body": "done soon"}}
        assert api.post("/tasks", quick).status == 201

    browser.get(stage.api_url + "/console")
    wait(browser, lambda d: d.find_element(By.ID, "sign-in").is_displayed(), "the sign-in form")
    sign_in(browser, stage.api_url + "/console", "not-the-token")
    wait(browser, lambda d: "Unauthorized: HTTP 403" in d.find_element(By.ID, "sign-in").text, "the refusal's words")
    assert browser.execute_script("return sessionStorage.length") == 0

    sign_in(browser, stage.api_url + "/console", stage.environment["API_TOKEN"])
    shows(browser, "Due in the next hour")
    shows(browser, f"welcome-{TAG}")
    assert "pending" in main_text(browser) and "dead-lettered" in main_text(browser)
    wait(browser, lambda d: "Updated" in d.find_element(By.ID, "status").text, "the view to finish loading")
    screenshot(browser, "now")

    transferred = browser.execute_script(
        "return performance.getEntries().filter(e => 'transferSize' in e).reduce((n, e) => n + e.transferSize, 0)")
    assert 0 < transferred < BUDGET_BYTES, transferred
    # the token: in this tab's sessionStorage only, never in a URL or a cookie
    assert browser.execute_script("return document.cookie") == ""
    assert stage.environment["API_TOKEN"] not in browser.current_url
    names = browser.execute_script("return performance.getEntries().map(e => e.name)")
    assert not [n for n in names if stage.environment["API_TOKEN"] in n]
    problems = [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert [e for e in problems if "403" not in e["message"]] == [], problems  # the wrong token's 403 only


def test_a_task_created_through_the_api_appears_and_is_cancelled_from_its_page(api: ApiClient, browser: Any) -> None:
    task_id = f"cancel-me-{TAG}"
    due = datetime.now(UTC) + timedelta(minutes=30)
    body = {"id": task_id, "run_at": iso(due), "recurrence": "rate(1 day)", "end_at": iso(due + timedelta(days=9)),
            "max_occurrences": 3, "window_seconds": 300, "retry": {"max_retries": 2},
            "action": {"type": "email", "to": "ops@example.com", "subject": IMG, "body": SCRIPT},
            "on_failure": {"type": "email", "to": "ops@example.com", "subject": f"callback-{TAG}", "body": "failed"}}
    assert api.post("/tasks", body).status == 201
    go(browser, "#/tasks?status=PENDING")
    shows(browser, task_id)
    screenshot(browser, "tasks")
    browser.find_element(By.LINK_TEXT, task_id).click()
    shows(browser, "Act on it")
    assert IMG in main_text(browser) and SCRIPT in main_text(browser)  # shown as text, literally
    shown = main_text(browser)  # the task's end, window and retries beside its other fields
    assert "0 of 3" in shown and "300 s" in shown and '"max_retries":2' in shown, shown
    end = iso(due + timedelta(days=9)).replace("T", " ").split(".")[0]  # in UTC on hover, as every time is
    assert browser.execute_script("return [...document.querySelectorAll('main time')].map(t => t.title)").count(
        f"{end.removesuffix('Z')}Z (UTC)") == 1
    assert "Callbacks" in main_text(browser) and f"callback-{TAG}" in main_text(browser)  # its on_failure
    screenshot(browser, "task")
    confirm(browser, "Cancel")
    shows(browser, "Cancel: done.")
    shows(browser, "CANCELLED")
    assert api.get(f"/tasks/{task_id}").body["status"] == "CANCELLED"
    no_script_ran(browser)


def test_hostile_keys_ids_and_error_texts_are_shown_as_text_and_nothing_runs(stage: LocalStage, browser: Any) -> None:
    key = f"{IMG}{SCRIPT}@example.com"
    boto3.client("dynamodb", endpoint_url=stage.aws_endpoint).put_item(
        TableName="seed-sessions", Item={"email": {"S": key}, "expires_at": {"N": str(int(time.time()) + 3600)}})
    go(browser, "#/source/sessions/" + quote(key, safe=""))
    shows(browser, "Item of task source sessions")  # the page before (a task of the test's own) has IMG and SCRIPT too
    assert IMG in main_text(browser) and SCRIPT in main_text(browser)
    task_page(browser, f"welcome-{TAG}")  # not the source item's page, which offers Reschedule as well
    confirm(browser, "Reschedule", IMG)  # refused: the API's error quotes what it was given
    shows(browser, "Reschedule refused — HTTP 400")
    assert IMG in main_text(browser), main_text(browser)  # the API's error text, literally
    no_script_ran(browser)


def test_a_failed_task_is_listed_and_retried_with_the_apis_answer_shown(stage: LocalStage, api: ApiClient,
                                                                      browser: Any) -> None:
    task_id = f"fails-{TAG}"
    queue = f"{stage.aws_endpoint}/123456789012/no-such-queue-{TAG}"
    body = {"id": task_id, "run_at": iso(datetime.now(UTC) + timedelta(seconds=1)),
            "action": {"type": "sqs", "queue_url": queue, "message": SCRIPT}}
    assert api.post("/tasks", body).status == 201
    wait_until(lambda: api.get(f"/tasks/{task_id}").body["status"] == "FAILED", 20, "the task to fail", 0.2)
    go(browser, "#/tasks?status=FAILED")
    shows(browser, task_id)
    browser.find_element(By.LINK_TEXT, task_id).click()
    shows(browser, "Act on it")
    confirm(browser, "Retry", "")
    wait(browser, lambda d: "Retry: done." in main_text(d) or "Retry refused" in main_text(d), "the retry's answer")
    shows(browser, "Retry: done.")  # POST /tasks/{id}/retry accepted the redrive (issue 23)
    no_script_ran(browser)


def test_a_source_item_the_stream_dead_letters_is_counted_dead_lettered_on_the_now_view(
        stage: LocalStage, api: ApiClient, browser: Any) -> None:
    key = f"bad-ttl-{TAG}@example.com"  # a TTL that is there but wrong: the stream dead-letters the item
    boto3.client("dynamodb", endpoint_url=stage.aws_endpoint).put_item(
        TableName="seed-sessions", Item={"email": {"S": key}, "expires_at": {"S": "soon"}})

    def listed() -> list[dict[str, Any]]:
        return [t for t in api.get("/tasks?status=DEAD_LETTERED&source=sessions").body["tasks"] if key in t["id"]]

    [task] = wait_until(listed, 30, "the item listed DEAD_LETTERED", 0.2)
    assert task["dead_letter"]["source"] == "task_stream:sessions", task
    def counted(driver: Any) -> bool:
        try:
            shown = driver.find_element(By.CSS_SELECTOR, "li[data-count='dead-lettered'] .n").text
            return int(shown.rstrip("+")) >= 1
        except Exception:  # not drawn yet, or drawn again meanwhile
            return False

    go(browser, "#/now")
    wait(browser, counted, "the Now view counting it dead-lettered")


def test_the_task_list_pages_forward_and_back(browser: Any) -> None:
    go(browser, "#/tasks?limit=1")
    wait(browser, lambda d: d.find_elements(By.LINK_TEXT, "Next page"), "the next page's link")
    first = browser.find_element(By.CSS_SELECTOR, "main tbody a").text
    browser.find_element(By.LINK_TEXT, "Next page").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main tbody a")
         and d.find_element(By.CSS_SELECTOR, "main tbody a").text not in ("", first), "another task on the next page")
    [back] = [b for b in browser.find_elements(By.CSS_SELECTOR, "main button") if b.text == "Previous page"]
    back.click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main tbody a")
         and d.find_element(By.CSS_SELECTOR, "main tbody a").text == first, "the first page again")


def test_a_backup_run_started_from_the_console_is_watched_to_complete(stage: LocalStage, api: ApiClient,
                                                                     browser: Any) -> None:
    go(browser, "#/backups")
    shows(browser, "Catalog")
    confirm(browser, "Start a backup run")
    wait(browser, lambda d: d.current_url.split("#", 1)[-1].startswith("/run/"), "the run's page")
    shows(browser, "sample-")  # its per-table grid
    shows(browser, "COMPLETE", timeout=45)
    run_id = browser.current_url.split("#/run/", 1)[1]
    assert api.get(f"/backups/runs/{run_id}").body["status"] == "COMPLETE"
    screenshot(browser, "run")
    go(browser, "#/backups")
    shows(browser, run_id)
    shows(browser, "AVAILABLE")
    assert not browser.find_elements(By.LINK_TEXT, "Next page")  # the catalog's one page: GET /backups ends there
    screenshot(browser, "backups")
    confirm(browser, "Restore…")  # the first backup of the catalog, to the name proposed
    shows(browser, "Restore…: done. Status now ")
    [restore] = api.get("/backups/restores").body["restores"]
    assert restore["target"].startswith(restore["table"] + "-restored-"), restore
    shows(browser, restore["target"])  # in the restores' list, with its progress
    export_run = export_now(stage, api)
    go(browser, f"#/run/{export_run}")  # the export run's page: its exports and counts
    shows(browser, "started 1, in_progress 0, completed 1, failed 0, item_count 25")
    confirm(browser, "Restore…")  # from the export, to the name proposed
    shows(browser, "Restore…: done. Status now RESTORING.")
    click(browser, "main a", "All backups")  # the catalog: the exports beside the backups
    wait(browser, lambda d: re.search(rf"sample-orders .+ COMPLETED \d+ B 25 {export_run} last_good, age — .+ ",
                                      main_text(d)), "the export in the catalog, its size, items, why kept, expiry")
    wait_until(lambda: all(api.get(f"/tasks/quick-{i}-{TAG}").body["status"] == "DONE" for i in range(6)), 20,
               "the quick tasks to run")
    go(browser, "#/lateness")
    wait(browser, lambda d: d.find_element(By.ID, "p50").text.endswith(" s"), "the lateness percentiles")
    assert "executions\n7" in main_text(browser), main_text(browser)  # six done, one failed
    screenshot(browser, "lateness")


def export_now(stage: LocalStage, api: ApiClient) -> str:
    """The export schedule's firing, now (the local stage's EXPORT_SCHEDULE is minutes away), followed to its end."""
    from local.sources.schedules import ScheduledRule

    [exporter] = [s for s in stage.runtime.sources if isinstance(s, ScheduledRule) and s.name == "export_trigger"]
    at = datetime.now(UTC).replace(microsecond=0)
    exporter.fire(at)
    run_id = at.strftime("%Y%m%dT%H%M%SZ")
    wait_until(lambda: api.get(f"/backups/runs/{run_id}").body["status"] == "COMPLETE", 20, "the export run")
    return run_id


def wrapped_dates(driver: Any) -> list[str]:
    """The view's times drawn on more than one line (a box taller than its line height)."""
    return list(driver.execute_script("""
        return [...document.querySelectorAll('main time')].filter((t) => {
          const style = getComputedStyle(t), line = parseFloat(style.lineHeight) || 1.45 * parseFloat(style.fontSize);
          return t.getClientRects().length !== 1 || t.getBoundingClientRect().height > line * 1.2;
        }).map((t) => t.textContent)"""))


def test_the_views_are_keyboard_reachable_and_readable_at_320_px(browser: Any) -> None:
    go(browser, "#/now")
    shows(browser, "Due in the next hour")
    browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    body = browser.find_element(By.TAG_NAME, "body")
    reached = []
    for _ in range(8):
        body = browser.switch_to.active_element
        body.send_keys(Keys.TAB)
        reached.append(browser.switch_to.active_element.text)
        if reached[-1] == "Tasks":
            break
    assert reached[-1] == "Tasks", reached
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    shows(browser, "strategy")
    size = browser.get_window_size()
    try:
        browser.set_window_size(320, 800)
        for view in ("#/now", "#/tasks", "#/backups"):
            go(browser, view)
            wait(browser, lambda d: "Updated" in d.find_element(By.ID, "status").text, f"{view} at 320 px")
            width = browser.execute_script("return document.documentElement.scrollWidth")
            inner = browser.execute_script("return window.innerWidth")
            assert width <= inner, (view, width, inner)
            assert wrapped_dates(browser) == [], view  # narrower than 375 px: no date wraps here either
            assert browser.execute_script("return window.timekeeperConsole.armed()"), view  # a live view
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_times_are_in_the_browsers_zone_with_offset_relative_and_utc_on_hover_unwrapped_at_375_px(
        api: ApiClient, browser: Any) -> None:
    task_id = f"zoned-{TAG}"
    due = (datetime.now(UTC) + timedelta(minutes=30)).replace(microsecond=0)
    body = {"id": task_id, "run_at": iso(due),
            "action": {"type": "email", "to": "ops@example.com", "subject": "zoned", "body": "zoned"}}
    assert api.post("/tasks", body).status == 201
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})  # +05:30, no DST
    size = browser.get_window_size()
    try:
        browser.set_window_size(375, 800)
        task_page(browser, task_id)
        [due_cell] = [t for t in browser.find_elements(By.CSS_SELECTOR, "main dd time")
                      if t.get_attribute("datetime") == due.strftime("%Y-%m-%dT%H:%M:%S.000Z")]
        local = due.astimezone(timezone(timedelta(hours=5, minutes=30)))
        assert local.strftime("%H:%M:%S") + " +05:30" in due_cell.text, due_cell.text
        assert "in 30 min" in due_cell.text or "in 29 min" in due_cell.text, due_cell.text
        assert due_cell.get_attribute("title") == due.strftime("%Y-%m-%d %H:%M:%SZ") + " (UTC)"
        go(browser, "#/tasks?status=PENDING")
        shows(browser, task_id)
        cells = browser.find_elements(By.CSS_SELECTOR, "main tbody time")
        assert cells and all(browser.execute_script(
            "const r = arguments[0].getClientRects(); return r.length === 1 && getComputedStyle(arguments[0]).whiteSpace"
            " === 'nowrap'", cell) for cell in cells)
        found = browser.execute_script("""
            const c = window.timekeeperConsole, now = Date.parse('2026-11-28T20:00:00Z');
            return [c.relative(now + 180000, now), c.relative(now - 120000, now), c.relative(now + 5000, now),
                    c.relative(now - 3 * 3600000, now), c.relative(now + 3 * 86400000, now), c.relative(now, now),
                    c.localTime(Date.parse('2026-11-28T20:18:12Z'), now), c.localTime(Date.parse('2026-11-30T20:18:12Z'), now)];
        """)
        assert found == ["in 3 min", "2 min ago", "in 5 s", "3 h ago", "in 3 d", "now", "01:48:12 +05:30",
                         "2026-12-01 01:48:12 +05:30"], found
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})
        browser.set_window_size(size["width"], size["height"])


def search(driver: Any, words: str) -> None:
    field = driver.find_element(By.ID, "search-input")
    field.clear()
    field.send_keys(words + Keys.ENTER)


def test_the_header_search_finds_a_task_by_id_prefix_and_source_key_on_every_view(stage: LocalStage, api: ApiClient,
                                                                                browser: Any) -> None:
    later = iso(datetime.now(UTC) + timedelta(hours=3))
    for name in ("alpha", "beta"):
        body = {"id": f"find-{TAG}-{name}", "run_at": later,
                "action": {"type": "email", "to": "ops@example.com", "subject": "find", "body": name}}
        assert api.post("/tasks", body).status == 201
    email = f"search-{TAG}@example.com"
    boto3.client("dynamodb", endpoint_url=stage.aws_endpoint).put_item(
        TableName="seed-sessions", Item={"email": {"S": email}, "expires_at": {"N": str(int(time.time()) + 3600)}})

    go(browser, "#/backups")  # the box is in the header, on every view
    shows(browser, "Catalog")
    search(browser, f"find-{TAG}-alpha")  # an id: the task's page
    wait(browser, lambda d: d.current_url.endswith(f"#/task/find-{TAG}-alpha"), "the task's page")
    shows(browser, "Act on it")
    search(browser, f"find-{TAG}-")  # a prefix: the tasks whose id starts with it
    shows(browser, "Tasks whose id starts with")
    assert sorted(link_texts(browser)) == [
        f"find-{TAG}-alpha", f"find-{TAG}-beta"]
    search(browser, f"api/find-{TAG}-beta")  # source/key, the API's own tasks too
    wait(browser, lambda d: d.current_url.endswith(f"#/task/find-{TAG}-beta"), "the API task's page")
    go(browser, "#/tasks")  # the Tasks view's lookup by source and key: the API's own tasks too
    wait(browser, lambda d: d.find_elements(By.ID, "lookup-source"), "the lookup form")
    browser.find_element(By.ID, "lookup-source").send_keys("api")
    browser.find_element(By.ID, "lookup-key").send_keys(f"find-{TAG}-alpha" + Keys.ENTER)
    wait(browser, lambda d: d.current_url.endswith(f"#/task/find-{TAG}-alpha"), "the API task's page from the lookup")
    shows(browser, "Act on it")
    search(browser, f"sessions/{email}")  # a task source's item key
    shows(browser, "Item of task source sessions")
    assert email in main_text(browser)
    search(browser, f"nothing-{TAG}")
    shows(browser, "No task has that id, an id starting with it, or that source/key.")
    no_script_ran(browser)


def due_times(driver: Any) -> list[str]:
    """The listed rows' times, read in one call (not one WebDriver round trip per row)."""
    return list(driver.execute_script(
        "return [...document.querySelectorAll('main tbody time')].map((t) => t.getAttribute('datetime'))"))


def link_texts(driver: Any) -> list[str]:
    """The listed rows' links as shown, read in one call."""
    return list(driver.execute_script(
        "return [...document.querySelectorAll('main tbody a')].map((a) => a.innerText.trim())"))


def test_the_lists_are_sorted_by_due_time_or_a_clicked_column_and_the_now_view_is_capped(api: ApiClient,
                                                                                       browser: Any) -> None:
    now = datetime.now(UTC)
    order = [7, 2, 24, 0, 15, 11, 3, 20, 9, 1, 18, 5, 22, 13, 6, 4, 17, 8, 23, 10, 14, 12, 19, 16, 21]
    for i in order:  # created out of due order: the API lists them as created
        body = {"id": f"due-{i:02d}-{TAG}", "run_at": iso(now + timedelta(minutes=25, seconds=20 * i)),
                "action": {"type": "email", "to": "ops@example.com", "subject": "due", "body": str(i)}}
        assert api.post("/tasks", body).status == 201
    go(browser, "#/tasks?status=PENDING")
    shows(browser, f"due-24-{TAG}")

    due = due_times(browser)
    assert due == sorted(due) and len(due) > 25, due
    ours = [text for text in link_texts(browser) if text.startswith("due-")]
    assert ours == [f"due-{i:02d}-{TAG}" for i in range(25)], ours
    [by_task] = [b for b in browser.find_elements(By.CSS_SELECTOR, "main th button") if b.text == "task"]
    by_task.click()
    ids = link_texts(browser)
    assert ids == sorted(ids), ids
    by_task.click()  # again: the other way
    ids = link_texts(browser)
    assert ids == sorted(ids, reverse=True), ids

    go(browser, "#/now")
    shows(browser, "Due in the next hour")
    wait(browser, lambda d: d.find_elements(By.ID, "due-more"), "the link to the rest")
    rows = browser.find_elements(By.CSS_SELECTOR, "main tbody tr")
    assert len(rows) == 20, len(rows)
    shown = due_times(browser)
    assert shown == sorted(shown), shown
    browser.find_element(By.ID, "due-more").find_element(By.TAG_NAME, "a").click()
    wait(browser, lambda d: d.current_url.endswith("#/tasks?status=PENDING"), "the pending tasks")


def buttons_of(driver: Any) -> list[str]:
    """The task page's action buttons, read at once (a view drawn again meanwhile leaves no stale element)."""
    return sorted(driver.execute_script(
        "return [...document.querySelectorAll('main p.buttons button')].map((b) => b.textContent)"))


def test_a_task_offers_only_the_actions_its_state_allows_and_links_back_to_the_list(
        stage: LocalStage, api: ApiClient, browser: Any) -> None:
    later = iso(datetime.now(UTC) + timedelta(hours=2))
    email = {"type": "email", "to": "ops@example.com", "subject": "acts", "body": "acts"}
    assert api.post("/tasks", {"id": f"once-{TAG}", "run_at": later, "action": email}).status == 201
    assert api.post("/tasks", {"id": f"every-{TAG}", "run_at": later, "recurrence": "rate(1 day)",
                               "action": email}).status == 201
    queue = f"{stage.aws_endpoint}/123456789012/no-such-queue-{TAG}"
    failing = {"id": f"broken-{TAG}", "run_at": iso(datetime.now(UTC) + timedelta(seconds=1)),
               "action": {"type": "sqs", "queue_url": queue, "message": "x"}}
    assert api.post("/tasks", failing).status == 201

    task_page(browser, f"once-{TAG}")
    assert buttons_of(browser) == ["Cancel", "Reschedule"]  # a one-time task: no Pause, no Resume, no Retry
    task_page(browser, f"every-{TAG}")
    assert buttons_of(browser) == ["Cancel", "Pause", "Reschedule"]  # a recurring task's actions
    confirm(browser, "Pause")
    shows(browser, "Pause: done.")
    wait(browser, lambda d: buttons_of(d) == ["Cancel", "Resume"], "a paused task's actions")
    wait_until(lambda: api.get(f"/tasks/broken-{TAG}").body["status"] == "FAILED", 20, "the task to fail", 0.2)
    task_page(browser, f"broken-{TAG}")
    assert buttons_of(browser) == ["Retry"]  # a failed one-time task's actions
    task_page(browser, f"once-{TAG}")  # the failed task's page stays shown until this one is drawn
    confirm(browser, "Cancel")
    shows(browser, "Cancel: done.")
    wait(browser, lambda d: d.find_elements(By.ID, "no-actions"), "no action for a cancelled task")
    assert buttons_of(browser) == []
    click(browser, "main a", "All tasks")
    wait(browser, lambda d: d.current_url.endswith("#/tasks"), "the task list")
    shows(browser, "strategy")


def test_the_views_numbers_percentiles_per_minute_buckets_and_capped_counts(stage: LocalStage, browser: Any) -> None:
    """The console's pure decisions, given data of the test's own in the page that uses them."""
    browser.get(stage.api_url + "/console")
    wait(browser, lambda d: d.execute_script("return !!window.timekeeperConsole"), "the console's script")
    found = browser.execute_script("""
        const c = window.timekeeperConsole, now = Date.parse('2026-11-26T12:00:00Z');
        const at = (s) => new Date(now + s * 1000).toISOString();
        const done = Array.from({length: 100}, (_, i) => ({id: 't' + i, status: 'DONE', run_at: at(i), finished_at: at(2 * i + 1)}));
        const late = c.lateness([...done, {id: 'x', run_at: null, finished_at: at(5)}]).map(p => p.seconds).sort((a, b) => a - b);
        const due = c.perMinute([{run_at: at(-1)}, {run_at: at(0)}, {run_at: at(59)}, {run_at: at(61)},
                                 {run_at: at(3599)}, {run_at: at(3600)}], now);
        return {n: late.length, p50: c.percentile(late, 50), p99: c.percentile(late, 99), empty: c.percentile([], 50),
                minutes: [due.minutes[0], due.minutes[1], due.minutes[59]], due: due.due.length,
                capped: c.countLabel(500, false), counted: c.countLabel(7, true)};
    """)
    # lateness i + 1 s for i in 0..99: p50 is the 50th smallest (50 s), p99 the 99th (99 s); no due time, no point
    assert found == {"n": 100, "p50": 50, "p99": 99, "empty": None, "minutes": [2, 1, 1], "due": 4,
                     "capped": "500+", "counted": "7"}


def loaded(driver: Any, hash_: str, on: bool = False) -> None:
    """Open a view (drawn again when it is the one shown), the live switch ``on`` or off, and wait until it is drawn
    (the status says Updated)."""
    live(driver, on)
    driver.execute_script("history.replaceState(null, '', '#/'); document.getElementById('status').textContent = '';"
                          " location.hash = arguments[0]", hash_)
    wait(driver, lambda d: "Updated" in d.find_element(By.ID, "status").text, f"{hash_} drawn")


def tick(driver: Any) -> str:
    """What the refresh timer runs, run now (the console's controllable timer)."""
    return str(driver.execute_script("return window.timekeeperConsole.tick()"))


def refreshed(driver: Any, before: int) -> None:
    wait(driver, lambda d: d.execute_script("return window.timekeeperConsole.refreshes()") > before, "a live refresh")


GROUP = [f"group-{i}-{TAG}" for i in range(3)]  # tasks that fail with one error
DEAD = [f"dead-{i}-{TAG}@example.com" for i in range(2)]  # items the stream dead-letters with one reason


@pytest.fixture(scope="module")
def failures_made(stage: LocalStage, api: ApiClient) -> None:
    """GROUP and DEAD, made once, before the tests that read them wait for them (they fail meanwhile)."""
    for task_id in GROUP:
        assert api.post("/tasks", failing(stage, task_id, f"gone-{TAG}")).status == 201
    for key in DEAD:  # a TTL that is there but wrong: the stream dead-letters the item, with the reason
        boto3.client("dynamodb", endpoint_url=stage.aws_endpoint).put_item(
            TableName="seed-sessions", Item={"email": {"S": key}, "expires_at": {"S": "soon"}})


def test_the_live_views_refresh_in_place_keeping_the_scroll_unless_paused_or_a_dialog_is_open(
        api: ApiClient, browser: Any, failures_made: None) -> None:
    email = {"type": "email", "to": "ops@example.com", "subject": "live", "body": "live"}
    due = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    assert api.post("/tasks", {"id": f"live-{TAG}", "run_at": iso(due), "action": email}).status == 201
    assert browser.execute_script("return window.timekeeperConsole.refreshEvery") == 15000
    loaded(browser, "#/tasks?status=PENDING", on=True)  # a live view sets its timer (the others: test_at_375_px_...)
    assert browser.execute_script("return window.timekeeperConsole.armed()")
    assert browser.find_element(By.ID, "live-switch").is_displayed()
    assert not browser.find_elements(By.ID, "retry-all")  # offered on FAILED and DEAD_LETTERED lists only
    click(browser, "main th button", "task")
    count = browser.execute_script("return window.timekeeperConsole.refreshes()")
    assert tick(browser) == "refreshed"
    refreshed(browser, count)
    assert [th.get_attribute("aria-sort") for th in browser.find_elements(By.CSS_SELECTOR, "main th")
            if th.text.startswith("task")] == ["ascending"]  # the operator's sort survives a refresh

    size = browser.get_window_size()
    try:
        browser.set_window_size(1000, 400)
        loaded(browser, f"#/task/live-{TAG}", on=True)
        browser.execute_script("window.sameDocument = true; window.scrollTo(0, 150)")
        later = due + timedelta(hours=1)
        assert api.request("PATCH", f"/tasks/live-{TAG}", {"run_at": iso(later)}).status == 200
        count = browser.execute_script("return window.timekeeperConsole.refreshes()")
        assert tick(browser) == "refreshed"
        refreshed(browser, count)
        stamps = browser.execute_script("return [...document.querySelectorAll('main time')].map(t => t.dateTime)")
        assert later.strftime("%Y-%m-%dT%H:%M:%S.000Z") in stamps, stamps  # read again, drawn in place
        assert browser.execute_script("return [window.sameDocument, window.scrollY]") == [True, 150]

        browser.find_element(By.ID, "live").click()  # the switch: paused
        count = browser.execute_script("return window.timekeeperConsole.refreshes()")
        assert tick(browser) == "paused"
        assert "paused" in browser.find_element(By.ID, "status").text
        browser.find_element(By.ID, "live").click()  # on again: read at once
        refreshed(browser, count)
        click(browser, "main button", "Reschedule")
        wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "the confirmation dialog")
        count = browser.execute_script("return window.timekeeperConsole.refreshes()")
        assert tick(browser) == "a dialog is open"
        browser.find_element(By.ID, "confirm-cancel").click()
        assert browser.execute_script("return window.timekeeperConsole.refreshes()") == count
        assert browser.execute_script("return window.timekeeperConsole.armed()")  # tried again later

        confirm(browser, "Reschedule", iso(later + timedelta(hours=1)))
        shows(browser, "Reschedule: done.")
        count = browser.execute_script("return window.timekeeperConsole.refreshes()")
        assert tick(browser) == "refreshed"
        refreshed(browser, count)
        assert "Reschedule: done." in browser.find_element(By.ID, "notice").text  # a refresh keeps an action's answer
    finally:
        live(browser, False)
        browser.set_window_size(size["width"], size["height"])


def failing(stage: LocalStage, task_id: str, queue: str) -> dict[str, Any]:
    return {"id": task_id, "run_at": iso(datetime.now(UTC) + timedelta(seconds=1)),
            "action": {"type": "sqs", "queue_url": f"{stage.aws_endpoint}/123456789012/{queue}", "message": "x"}}


def outcomes(driver: Any) -> list[str]:
    return list(driver.execute_script(
        "return [...document.querySelectorAll('#retry-outcomes tbody tr')].map(r => r.cells[1].textContent)"))


def test_failures_are_grouped_by_cause_and_the_shown_ones_retried_once_each(
        api: ApiClient, browser: Any, failures_made: None) -> None:
    ids = GROUP
    wait_until(lambda: all(api.get(f"/tasks/{i}").body["status"] == "FAILED" for i in ids), 20, "the tasks to fail", 0.2)
    shown = api.get(f"/tasks/{ids[0]}").body
    cause = browser.execute_script("return window.timekeeperConsole.causeOf(arguments[0], arguments[1])",
                                   shown["last_error"], shown["id"])
    loaded(browser, "#/failures")
    assert browser.execute_script("return window.timekeeperConsole.armed()")  # a live view
    rows = {r.find_element(By.CSS_SELECTOR, "td").text: r for r in browser.find_elements(By.CSS_SELECTOR, "main tbody tr")}
    assert cause in rows, list(rows)
    cells = rows[cause].find_elements(By.TAG_NAME, "td")
    assert cells[1].text.endswith(" tasks") and int(cells[1].text.split()[0]) >= 3, cells[1].text
    assert cells[2].find_element(By.TAG_NAME, "time") and cells[3].find_element(By.TAG_NAME, "time")  # first, last
    screenshot(browser, "failures")
    cells[1].find_element(By.TAG_NAME, "a").click()
    shows(browser, "one cause")
    listed = link_texts(browser)
    assert set(ids) <= set(listed), listed
    browser.find_element(By.ID, "retry-all").click()
    wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "one confirmation for all")
    live(browser, True)
    assert tick(browser) == "a dialog is open"  # no refresh under the dialog
    live(browser, False)
    browser.find_element(By.ID, "confirm-ok").click()
    wait(browser, lambda d: "Retried" in d.find_element(By.ID, "retry-summary").text, "every outcome")
    first = outcomes(browser)
    assert len(first) == len(listed) and all(o.startswith("ok: retried") for o in first), first
    assert f"Retried {len(listed)} of {len(listed)} tasks; 0 refused." == browser.find_element(By.ID, "retry-summary").text
    browser.find_element(By.ID, "retry-all").click()  # again: the same retry_ids, nothing runs twice
    wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
    browser.find_element(By.ID, "confirm-ok").click()
    wait(browser, lambda d: "Retried" in d.find_element(By.ID, "retry-summary").text, "every outcome again")
    again = outcomes(browser)
    assert all(o.startswith("ok: this retry was made already") for o in again), again
    loaded(browser, "#/tasks?status=FAILED")  # the Tasks list filtered by FAILED offers it for the tasks shown
    rows = browser.execute_script("return document.querySelectorAll('main tbody tr').length")
    assert browser.find_element(By.ID, "retry-all").text == f"Retry all shown ({rows})"


def test_the_dead_letter_view_groups_dead_lettered_tasks_by_reason_and_counts_the_task_dlq(
        api: ApiClient, browser: Any, failures_made: None) -> None:
    keys = DEAD

    def both() -> list[dict[str, Any]] | None:
        found = [t for t in api.get("/tasks?status=DEAD_LETTERED&source=sessions&limit=50").body["tasks"]
                 if any(key in t["id"] for key in keys)]
        return found if len(found) == 2 else None

    dead = wait_until(both, 30, "both items DEAD_LETTERED", 0.2)
    loaded(browser, "#/dead-letters")
    assert browser.execute_script("return window.timekeeperConsole.armed()")  # a live view
    held = api.get("/dead-letters").body
    assert held["messages"] >= 2, held
    shown = browser.find_element(By.ID, "dlq-count").text
    assert f"{held['queue']} holds {held['messages']} messages" in shown, shown
    causes = {browser.execute_script("return window.timekeeperConsole.causeOf(arguments[0], arguments[1])",
                                     t["dead_letter"]["reason"], t["id"]) for t in dead}
    assert len(causes) == 1, causes  # one reason for both, its key aside
    [cause] = causes
    rows = {r.find_element(By.CSS_SELECTOR, "td").text: r for r in browser.find_elements(By.CSS_SELECTOR, "main tbody tr")}
    assert cause in rows, list(rows)
    screenshot(browser, "dead-letters")
    rows[cause].find_elements(By.TAG_NAME, "td")[1].find_element(By.TAG_NAME, "a").click()
    shows(browser, "one cause")
    assert {t["id"] for t in dead} <= set(link_texts(browser))
    assert "task_stream:sessions" in main_text(browser)  # who dead-lettered it
    browser.find_element(By.ID, "retry-all").click()
    wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed(), "the confirmation")
    browser.find_element(By.ID, "confirm-ok").click()
    wait(browser, lambda d: "Retried" in d.find_element(By.ID, "retry-summary").text, "every outcome")
    refused = outcomes(browser)  # an item that is no task cannot run again: the API says why, per task
    assert refused and all(o.startswith("refused: HTTP 409: ") for o in refused), refused
    assert all("write it again" in o for o in refused), refused
    browser.find_element(By.CSS_SELECTOR, "main tbody a").click()  # a task source's item: its page, by source and key
    shows(browser, "Item of task source sessions")


def test_at_375_px_no_date_wraps_and_lateness_is_a_table_that_fits(browser: Any) -> None:
    size = browser.get_window_size()
    try:
        browser.set_window_size(375, 800)
        for view in ("#/failures", "#/dead-letters", "#/lateness", f"#/task/live-{TAG}"):  # the others: at 320 px
            loaded(browser, view)
            assert wrapped_dates(browser) == [], view
            assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), view
            armed = browser.execute_script("return window.timekeeperConsole.armed()")
            assert armed == (view != "#/lateness"), view  # every view but Lateness refreshes itself
            if view == "#/lateness":
                assert not browser.find_element(By.CSS_SELECTOR, "main svg.chart").is_displayed()
                table = browser.find_element(By.ID, "lateness-table")
                assert table.is_displayed() and "late by" in table.text
                assert browser.execute_script("return arguments[0].getBoundingClientRect().right <= window.innerWidth",
                                              table)
                screenshot(browser, "lateness-375")
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_the_grouping_the_retry_ids_and_the_lateness_table_on_data_of_the_tests_own(browser: Any) -> None:
    """The console's pure decisions behind Failures, Dead letters, Retry all shown and the 375 px lateness table."""
    found = browser.execute_script("""
        const c = window.timekeeperConsole;
        const failed = (id, at, error) => ({id, status: 'FAILED', run_at: '2026-11-28T20:00:00Z', finished_at: at, attempts: 1,
                                            last_error: error});
        const tasks = [failed('a', '2026-11-28T20:05:00Z', 'task a failed at 2026-11-28T20:00:00Z: request 0123456789abcdef0 refused'),
                       failed('b', '2026-11-28T20:01:00Z', 'task b failed at 2026-11-28T19:00:00Z: request fedcba98765432100 refused'),
                       failed('c', '2026-11-28T20:03:00Z', 'QueueDoesNotExist'), failed('d', null, null)];
        const groups = c.groupsOf(tasks, (t) => t.last_error, (t) => t.finished_at);
        const again = {...tasks[0]}, later = {...tasks[0], finished_at: '2026-11-28T21:00:00Z'};
        return {groups: groups.map((g) => [g.cause, g.tasks.map((t) => t.id), g.first, g.last]),
                same: c.retryIdOf(again) === c.retryIdOf(tasks[0]), moved: c.retryIdOf(later) !== c.retryIdOf(tasks[0]),
                other: c.retryIdOf(tasks[1]) !== c.retryIdOf(tasks[0]), id: c.retryIdOf(tasks[0]),
                buckets: c.latenessBuckets([0.5, 1, 4.9, 29, 59, 61, 299, 300, 9000].map((seconds) => ({seconds})))};
    """)
    assert found["groups"] == [
        ["task <task> failed at <time>: request <id> refused", ["a", "b"], "2026-11-28T20:01:00.000Z",
         "2026-11-28T20:05:00.000Z"],
        ["QueueDoesNotExist", ["c"], "2026-11-28T20:03:00.000Z", "2026-11-28T20:03:00.000Z"],
        ["no error recorded", ["d"], None, None]]
    assert found["same"] and found["moved"] and found["other"], found
    assert re.fullmatch(r"console-[0-9a-f]{16}", found["id"]), found["id"]  # a retry_id the API takes
    assert found["buckets"] == [["under 1 s", 1], ["1–5 s", 2], ["5–30 s", 1], ["30–60 s", 1], ["1–5 min", 2],
                                ["5 min or more", 2]]


def test_a_tasks_page_reads_its_whole_history_a_failure_an_operators_retry_and_the_success(
        stage: LocalStage, api: ApiClient, browser: Any) -> None:
    """The task's history as a timeline: the execution that failed (its queue missing), the operator's retry (by
    whom, when), the execution that succeeded once the queue was made; and the Lateness chart counts a retried
    execution from the retry's time, not from the due time that failed."""
    task_id, name = f"history-{TAG}", f"later-{TAG}"
    queue = f"{stage.aws_endpoint}/123456789012/{name}"
    body = {"id": task_id, "run_at": iso(datetime.now(UTC) + timedelta(seconds=1)),
            "action": {"type": "sqs", "queue_url": queue, "message": SCRIPT}}
    assert api.post("/tasks", body).status == 201
    wait_until(lambda: api.get(f"/tasks/{task_id}").body["status"] == "FAILED", 20, "the task to fail", 0.1)
    boto3.client("sqs", endpoint_url=stage.aws_endpoint).create_queue(QueueName=name)
    assert api.post(f"/tasks/{task_id}/retry", {"retry_id": f"r-{TAG}"}).status == 202
    wait_until(lambda: api.get(f"/tasks/{task_id}").body["status"] == "DONE", 20, "the retry to succeed", 0.1)
    browser.get(f"{stage.api_url}/console#/task/{task_id}")  # signed in already, or now (when run alone)
    live(browser, False)
    wait(browser, lambda d: d.find_element(By.ID, "token").is_displayed() or "Act on it" in main_text(d),
         "the task's page or the sign-in form")
    if browser.find_element(By.ID, "token").is_displayed():
        browser.find_element(By.ID, "token").send_keys(stage.environment["API_TOKEN"] + Keys.ENTER)
    shows(browser, "Act on it")
    steps = browser.execute_script("return [...document.querySelectorAll('#history li')].map(li => li.innerText)")
    assert len(steps) == 3, steps
    failed, retried, done = steps
    assert "Execution" in failed and "FAILED" in failed and "attempt 1" in failed and "NonExistentQueue" in failed, failed
    assert "claimed" in failed and "finished" in failed and "duration" in failed, failed
    assert retried.startswith("Retried by api") and "due" in retried, retried
    assert "Execution" in done and "DONE" in done and "runs from" in done and "result" in done, done
    no_script_ran(browser)
    late = browser.execute_script("""
        const at = (s) => new Date(Date.parse('2026-11-26T12:00:00Z') + s * 1000).toISOString();
        return window.timekeeperConsole.lateness([{id: 'r', status: 'DONE', run_at: at(0), finished_at: at(111),
            last_execution: {runs_from: at(108), claimed_at: at(109), finished_at: at(111), lateness_ms: 1000}}])
            .map(p => p.seconds);""")
    assert late == [1]  # from the retry's own time (108 s after the due time that failed), not 111 s


def test_the_console_works_under_a_stage_prefix(stage: LocalStage, browser: Any) -> None:
    """As API Gateway serves it (/<stage>/console): every file and data call stays under the prefix."""
    token = stage.environment["API_TOKEN"]
    with PrefixProxy(stage.api_url, "/api") as proxy:
        # sent as an API key (API_AUTH api_key): this stage wants a bearer token and refuses it
        sign_in(browser, proxy.url + "/console", token, "api-key")
        wait(browser, lambda d: "Unauthorized: HTTP 401" in d.find_element(By.ID, "sign-in").text, "the refusal")
        assert proxy.credentials["GET /api/tasks?limit=1"] == {"x-api-key": token}
        sign_in(browser, proxy.url + "/console", token)
        shows(browser, "Due in the next hour")
        go(browser, "#/backups")
        shows(browser, "Catalog")
        assert proxy.strays == [], proxy.strays
        assert {"GET /api/console", "GET /api/console/app.js", "GET /api/console/app.css"} <= set(proxy.seen)
        assert any(line.startswith("GET /api/backups/runs") for line in proxy.seen), proxy.seen
        assert proxy.credentials["GET /api/backups/runs?limit=10"] == {"authorization": f"Bearer {token}"}
        assert sorted(json.loads(browser.execute_script("return JSON.stringify(Object.keys(sessionStorage))"))) == [
            "timekeeper.console.scheme", "timekeeper.console.token"]


def test_every_screenshot_docs_console_md_shows_is_one_this_run_made() -> None:
    """docs/console.md shows console/<name>.png only for pictures this test run takes (and commits under docs/console/)."""
    shown = set(re.findall(r"\]\(console/([\w-]+)\.png\)", (DOCS.parent / "console.md").read_text()))
    assert shown, "docs/console.md shows no screenshot"
    assert shown - MADE == set(), f"docs/console.md shows screenshots this run does not make: {sorted(shown - MADE)}"
    assert [name for name in shown if not (DOCS / f"{name}.png").exists()] == []
