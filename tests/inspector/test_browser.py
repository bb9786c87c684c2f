"""The inspector in a real headless browser: Playwright driving the system's Chromium
(Debian's ``chromium`` package; no browser download), against the app served by uvicorn
on a loopback port. The pages load with their stylesheet and nothing from elsewhere, a
search shows hits with their channels, an evidence link lands on its turn, forgetting a
user removes it, and the login (the inspector inside ``memstrata serve``) works.

Skipped only when Playwright or Chromium is missing (set ``MEMSTRATA_CHROMIUM`` to a
Chromium binary elsewhere than ``/usr/bin/chromium``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="Playwright is not installed (pip install playwright)")


def chromium_path() -> str | None:
    """The Chromium binary the tests drive: ``$MEMSTRATA_CHROMIUM``, else ``chromium`` on
    the PATH, else None."""
    found = os.environ.get("MEMSTRATA_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    return found if found and Path(found).exists() else None


expect = sync_api.expect
CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium to drive (apt-get install -y chromium, or set "
    "MEMSTRATA_CHROMIUM)")

from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from memstrata import Memory  # noqa: E402
from memstrata.inspector import create_app  # noqa: E402
from memstrata.inspector.demo import build_demo  # noqa: E402

ADMIN_KEY = "msk_admin_for_the_browser_test_0123456789"


class Served:
    """An ASGI app served by uvicorn in a thread on a free loopback port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Memory]:
    memory = build_demo(tmp_path / "demo.db")
    yield memory
    memory.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    yield opened
    context.close()


def _watch(page: Any, base: str) -> Callable[[], list[str]]:
    """Collect what goes wrong in the page: console errors, failed requests, and any
    request to another origin (the inspector must work offline)."""
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console: {m.text}")
            if m.type == "error" else None)
    # A click that navigates aborts what the page was still loading (its icon): not a fault.
    page.on("requestfailed", lambda r: None if "ERR_ABORTED" in (r.failure or "")
            else problems.append(f"failed: {r.url} {r.failure}"))
    page.on("request", lambda r: None if r.url.startswith(base)
            else problems.append(f"elsewhere: {r.url}"))
    page.on("response", lambda r: problems.append(f"{r.status}: {r.url}")
            if r.status >= 400 else None)
    return lambda: problems


def test_the_pages_load_styled_and_fetch_nothing_from_elsewhere(demo: Memory,
                                                                page: Any) -> None:
    with Served(create_app(demo)) as served:
        problems = _watch(page, served.base)
        page.goto(served.base + "/")
        expect(page.locator("h1")).to_have_text("Users")
        background = page.locator("header.top").evaluate(
            "e => getComputedStyle(e).backgroundColor")
        assert background == "rgb(31, 42, 55)"  # the stylesheet applied
        page.get_by_role("link", name="ana", exact=True).first.click()
        expect(page.locator("h1")).to_have_text("User ana")
        page.get_by_role("link", name="travel", exact=True).first.click()
        expect(page.locator("li.turn")).to_have_count(10)
        expect(page.locator("li.session")).to_have_count(2)
        page.get_by_role("link", name="Runs").click()
        page.locator("table.runs a").last.click()
        expect(page.locator("h1")).to_have_text(re.compile(r"^Run "))
        expect(page.locator("table.steps tbody tr")).to_have_count(2)
        page.get_by_role("link", name="Jobs").click()
        expect(page.locator("tr.job")).to_have_count(2)  # ana's: one done, one failed
        assert problems() == []


def test_a_search_shows_its_hits_with_channels_and_scores(demo: Memory, page: Any) -> None:
    with Served(create_app(demo)) as served:
        page.goto(served.base + "/user?u=ana")
        page.get_by_label("query").fill("where does the user live now")
        page.get_by_label("query").press("Enter")
        page.wait_for_url("**/search?**")
        hits = page.locator("tr.hit")
        expect(hits.first).to_be_visible()
        assert hits.count() >= 3
        assert "The user lives in Porto" in hits.first.inner_text()
        assert float(hits.first.locator("td.score").inner_text()) > 0.5
        channels = hits.first.locator(".channel").all_inner_texts()
        assert any(c.startswith("lexical") for c in channels)
        assert any(c.startswith("dense") for c in channels)


def test_an_evidence_link_lands_on_its_turn(demo: Memory, page: Any) -> None:
    with Served(create_app(demo)) as served:
        page.goto(served.base + "/conversation?u=ana&c=travel")
        fact = page.locator("li.fact", has_text="allergic to shellfish")
        fact.locator("a.evidence").first.click()
        page.wait_for_url("**#t_*")
        target = page.locator("li.turn:target")
        expect(target).to_have_count(1)
        assert "I am allergic to shellfish" in target.inner_text()
        assert target.is_visible()
        # And back: from the turn to the fact extracted from it.
        target.locator(".meta a").first.click()
        expect(page.locator("h1")).to_have_text(re.compile(r"^Turn "))
        page.get_by_role("link", name="The user is allergic to shellfish").click()
        expect(page.locator("blockquote.text")).to_have_text(
            "The user is allergic to shellfish")


def test_what_was_read_links_to_where_it_was_read(demo: Memory, page: Any) -> None:
    with Served(create_app(demo)) as served:
        problems = _watch(page, served.base)
        page.goto(served.base + "/user?u=ana")
        page.get_by_role("link", name="Read and learned").first.click()
        expect(page.locator("h1")).to_have_text("Read and learned ana")
        expect(page.locator("table.strategies tbody tr")).to_have_count(2)
        page.locator("table.semantic a", has_text="starter doubles").click()
        expect(page.locator("h1")).to_have_text(re.compile(r"^Semantic "))
        page.locator("ul.links a").first.click()
        expect(page.locator("h1")).to_have_text(re.compile(r"^Episodic "))
        expect(page.locator("ul.links")).to_contain_text("procedures read from it")
        assert problems() == []


def test_forgetting_a_user_asks_then_removes_it(demo: Memory, page: Any) -> None:
    with Served(create_app(demo)) as served:
        page.goto(served.base + "/user?u=ana")
        page.get_by_role("link", name="Forget ana…").click()
        page.get_by_label("Type ana to confirm").fill("an")
        page.get_by_role("button", name="Forget this user").click()
        expect(page.locator("p.error")).to_contain_text("Type the user id exactly")
        assert demo.store.counts("ana")["turns"] == 14
        page.get_by_label("Type ana to confirm").fill("ana")
        page.get_by_role("button", name="Forget this user").click()
        expect(page.locator("h1")).to_have_text("Forgot ana")
        page.get_by_role("link", name="Back to the users").click()
        expect(page.locator("table.list tbody")).to_contain_text("ben")
        assert "ana" not in page.locator("table.list tbody").inner_text()
        assert demo.store.counts("ana")["turns"] == 0


def test_the_login_under_a_prefix_keeps_the_key_from_scripts(demo: Memory,
                                                             page: Any) -> None:
    inspector = create_app(demo, check_key=lambda key: key == ADMIN_KEY)
    with Served(Starlette(routes=[Mount("/ui", app=inspector)])) as served:
        problems = _watch(page, served.base)
        page.goto(served.base + "/ui/")
        expect(page.locator("h1")).to_have_text("Log in")
        page.get_by_label("Admin API key").fill("wrong-key")
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("p.error")).to_contain_text("not an admin API key")
        page.get_by_label("Admin API key").fill(ADMIN_KEY)
        page.get_by_role("button", name="Log in").click()
        expect(page.locator("h1")).to_have_text("Users")
        assert page.url == served.base + "/ui/"
        assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
        page.get_by_role("link", name="ben", exact=True).first.click()
        page.wait_for_url(served.base + "/ui/user?**")
        page.get_by_role("button", name="Log out").click()
        expect(page.locator("h1")).to_have_text("Log in")
        # The login page itself answers 401 (and the browser logs that): nothing else.
        assert [p for p in problems() if "401" not in p] == []
