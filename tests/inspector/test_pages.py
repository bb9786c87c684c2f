"""The inspector's pages through Starlette's test client: each renders, links stay under
the mount, user text is escaped, every read stays in its tenant, lists are bounded,
forgetting asks first and needs the form's token, and the login takes admin keys only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from memstrata import Memory
from memstrata.inspector import create_app
from memstrata.inspector.demo import build_demo
from memstrata.memory.models import FactItem, StrategyItem

HREF = re.compile(r'href="([^"]*)"')
ACTION = re.compile(r'action="([^"]*)"')


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Memory]:
    memory = build_demo(tmp_path / "demo.db")
    yield memory
    memory.close()


def _client(memory: Memory, **kwargs: Any) -> TestClient:
    return TestClient(create_app(memory, **kwargs))


def _mounted(memory: Memory, **kwargs: Any) -> TestClient:
    return TestClient(Starlette(routes=[Mount("/ui", app=create_app(memory, **kwargs))]))


def _links(html: str) -> list[str]:
    return [unescape(h) for h in HREF.findall(html)]


def _fact(memory: Memory, user: str, words: str) -> FactItem:
    item = next(i for i in memory.store.items(user, kind="fact") if words in i.text)
    assert isinstance(item, FactItem)
    return item


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


def test_every_page_renders_what_it_shows(demo: Memory) -> None:
    client = _client(demo)
    users = client.get("/")
    assert users.status_code == 200 and ">ana<" in users.text and ">ben<" in users.text
    assert users.headers["content-security-policy"].startswith("default-src 'none'")
    assert users.headers["cache-control"] == "no-store"

    user = client.get("/user", params={"u": "ana"})
    assert user.status_code == 200
    assert "travel" in user.text and "cooking" in user.text
    assert "The user is allergic to shellfish" in user.text and "superseded" in user.text

    conv = client.get("/conversation", params={"u": "ana", "c": "travel"})
    assert conv.status_code == 200
    assert "Session s1" in conv.text and "Session s2" in conv.text
    assert "I just moved to Lisbon" in conv.text and "The user lives in Porto" in conv.text

    porto = _fact(demo, "ana", "lives in Porto")
    fact = client.get("/memory", params={"u": "ana", "id": porto.id})
    assert fact.status_code == 200
    assert "I moved to Porto last week" in fact.text  # its evidence turn, quoted
    assert "supersedes" in fact.text  # Lisbon

    nurse = _fact(demo, "ana", "nurse")
    versions = client.get("/memory", params={"u": "ana", "id": nurse.id}).text
    assert "The user&#39;s sister Marta is a nurse<" in versions  # version 1 ...
    assert "a nurse in Coimbra" in versions  # ... and 2

    turn = demo.store.turns("ana", conversation_id="travel")[6]
    shown = client.get("/memory", params={"u": "ana", "id": turn.id})
    assert shown.status_code == 200 and "The user lives in Porto" in shown.text  # its fact

    search = client.get("/search", params={"u": "ana", "q": "where does the user live"})
    assert search.status_code == 200
    assert search.text.count('class="hit"') >= 2
    assert "lexical" in search.text and "dense" in search.text and "Fused" in search.text

    runs = client.get("/runs", params={"u": "ana"})
    assert runs.status_code == 200 and "ingest" in runs.text
    assert "1,874" in runs.text and "236" in runs.text  # tokens in and out
    run_id = demo.store.runs.list("ana")[-1].id
    run = client.get("/run", params={"u": "ana", "id": run_id})
    assert run.status_code == 200 and "extract" in run.text and "4870.0" in run.text

    assert client.get("/forget", params={"u": "ana"}).status_code == 200
    assert client.get("/static/style.css").headers["content-type"].startswith("text/css")
    jobs = client.get("/jobs")
    assert jobs.status_code == 200 and "failed" in jobs.text and "pending" in jobs.text


def test_every_link_stays_under_the_mount_and_resolves(demo: Memory) -> None:
    """A crawl from the mounted index: every link and form target is under /ui/, and
    every page it reaches (GET) renders."""
    client = _mounted(demo)
    seen: set[str] = set()
    queue = ["/ui/"]
    while queue and len(seen) < 80:
        url = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        page = client.get(url)
        assert page.status_code == 200, url
        if not page.headers["content-type"].startswith("text/html"):
            continue
        for action in ACTION.findall(page.text):
            assert unescape(action).startswith("/ui/"), (url, action)
        for link in _links(page.text):
            target = urlsplit(urljoin("http://testserver" + url, link))
            assert target.path.startswith("/ui/"), (url, link)
            full = target.path + (f"?{target.query}" if target.query else "")
            if "/ui/forget" not in full and full not in seen:
                queue.append(full)
    assert len(seen) >= 20
    assert any(u.startswith("/ui/conversation") for u in seen)
    assert any(u.startswith("/ui/run?") for u in seen)


def test_user_text_is_escaped_everywhere(tmp_path: Path) -> None:
    attack = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    with Memory.open(tmp_path / "x.db", embedder=None) as memory:
        memory.add([{"role": "user", "content": f"my name is {attack}"}],
                   user_id="<b>eve</b>", conversation_id="<i>c</i>", infer=False)
        fid = memory.store.add(FactItem(user_id="<b>eve</b>", text=f"eve is {attack}",
                                        conversation_id="<i>c</i>", evidence=["t0"]))
        memory.read(f"Eve read {attack}.\n1. Run {attack}\n2. Stop", user_id="<b>eve</b>",
                    title=attack, source=attack)
        memory.learn({"task": f"do {attack}", "trajectory": attack}, user_id="<b>eve</b>",
                     success=False, rationale=attack)
        client = _client(memory)
        pages = [client.get("/"),
                 client.get("/user", params={"u": "<b>eve</b>"}),
                 client.get("/conversation", params={"u": "<b>eve</b>", "c": "<i>c</i>"}),
                 client.get("/memory", params={"u": "<b>eve</b>", "id": fid}),
                 client.get("/search", params={"u": "<b>eve</b>", "q": f"name {attack}",
                                               "min": "0"}),
                 client.get("/forget", params={"u": "<b>eve</b>"}),
                 client.get("/knowledge", params={"u": "<b>eve</b>"}),
                 client.get("/user", params={"u": "<script>nobody</script>"})]
        for page in pages:
            assert "<script>" not in page.text and "<b>eve" not in page.text, page.url
            assert "<img" not in page.text, page.url
        assert "&lt;script&gt;" in pages[2].text and "&lt;b&gt;eve&lt;/b&gt;" in pages[1].text
        assert pages[4].text.count('class="hit"') >= 1


def test_every_read_stays_in_the_tenant_shown(demo: Memory) -> None:
    client = _client(demo)
    porto = _fact(demo, "ana", "lives in Porto")
    ana_turn = demo.store.turns("ana")[0]
    ana_run = demo.store.runs.list("ana")[0]
    for path, params in [("/memory", {"u": "ben", "id": porto.id}),
                         ("/memory", {"u": "ben", "id": ana_turn.id}),
                         ("/run", {"u": "ben", "id": ana_run.id}),
                         ("/conversation", {"u": "ben", "c": "travel"})]:
        page = client.get(path, params=params)
        assert page.status_code == 404, (path, params)
        assert "Lisbon" not in page.text and "Porto" not in page.text
    ben = client.get("/user", params={"u": "ben"}).text
    assert "brother lives in Porto" in ben and "Lisbon" not in ben and "sourdough" not in ben
    search = client.get("/search", params={"u": "ben", "q": "Lisbon sourdough nurse",
                                           "min": "0"}).text
    hits = search.split('<table class="list hits">')[-1]
    ids = re.findall(r"/memory\?u=ben&amp;id=([\w-]+)", hits)
    assert ids and all(demo.store.owner(i) == "ben" for i in ids)
    assert "/memory?u=ana" not in hits
    assert not any(word in hits for word in ("Lisbon", "sourdough", "nurse", "Bubbles"))
    assert client.get("/runs", params={"u": "ben"}).text.count("<code>run_") == 0


def test_lists_are_bounded_and_pages_cover_each_row_once(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "big.db", embedder=None) as memory:
        memory.add([{"role": "user" if i % 2 == 0 else "assistant",
                     "content": f"message number {i} " + ("word " * 20_000 if i < 60 else "")}
                    for i in range(260)], user_id="big", conversation_id="long",
                   infer=False)
        memory.store.add_many(FactItem(user_id="big", text=f"fact number {i}")
                              for i in range(130))
        client = _client(memory)
        first = client.get("/conversation", params={"u": "big", "c": "long"})
        assert first.status_code == 200
        assert first.text.count('class="turn ') == 50
        assert len(first.content) < 400_000  # 50 turns of ~100 KB each, cut to 2,000 chars
        seen: list[int] = []
        url: str | None = "/conversation?u=big&c=long&n=70"
        while url:
            page = client.get(url).text
            seen += [int(n) for n in re.findall(r">#(\d+)</a> <strong>", page)]
            nxt = re.search(r'<a rel="next" href="([^"]+)"', page)
            url = unescape(nxt.group(1)) if nxt else None
        assert seen == list(range(260))
        back = client.get("/conversation", params={"u": "big", "c": "long", "after": 139,
                                                   "n": 70}).text
        prev = re.search(r'<a rel="prev" href="([^"]+)"', back)
        assert prev is not None
        earlier = client.get(unescape(prev.group(1))).text
        assert re.findall(r">#(\d+)</a> <strong>", earlier)[0] == "70"  # 70..139

        huge = client.get("/conversation", params={"u": "big", "c": "long", "n": 10**9})
        assert huge.text.count('class="turn ') == 200  # the most one page shows
        bad = client.get("/conversation", params={"u": "big", "c": "long", "after": "x"})
        assert bad.status_code == 400

        user = client.get("/user", params={"u": "big"}).text
        assert user.count("fact number") == 50 and 'rel="next"' in user
        last = client.get("/user", params={"u": "big", "io": 100}).text
        assert last.count("fact number") == 30 and 'rel="prev"' in last
        assert client.get("/user", params={"u": "big", "io": 10**30}).status_code == 200


def test_forget_asks_first_and_needs_the_form_token(demo: Memory) -> None:
    client = _client(demo)
    page = client.get("/forget", params={"u": "ana"})
    token = _csrf(page.text)
    assert demo.store.counts("ana")["turns"] == 14  # asking deletes nothing

    refused = client.post("/forget", data={"u": "ana", "confirm": "ana"})
    assert refused.status_code == 403
    refused = client.post("/forget", data={"u": "ana", "confirm": "ana", "csrf": "0" * 64})
    assert refused.status_code == 403
    unconfirmed = client.post("/forget", data={"u": "ana", "confirm": "an", "csrf": token})
    assert unconfirmed.status_code == 400 and "Type the user id" in unconfirmed.text
    assert client.get("/forget", params={"u": "ana", "confirm": "ana",
                                         "csrf": token}).status_code == 200
    assert demo.store.counts("ana")["turns"] == 14

    done = client.post("/forget", data={"u": "ana", "confirm": "ana", "csrf": token})
    assert done.status_code == 200 and "Forgot" in done.text
    assert demo.store.counts("ana")["turns"] == 0
    assert ">ana<" not in client.get("/").text
    assert client.get("/user", params={"u": "ana"}).status_code == 404
    assert "job_" not in client.get("/jobs", params={"u": "ana"}).text
    assert demo.store.counts("ben")["turns"] == 3


def test_login_takes_admin_keys_into_a_strict_cookie(demo: Memory) -> None:
    keys = {"admin-key-0123456789"}
    client = _mounted(demo, check_key=lambda key: key in keys)

    locked = client.get("/ui/user", params={"u": "ana"})
    assert locked.status_code == 401 and 'name="key"' in locked.text
    assert "Lisbon" not in locked.text and "ben" not in client.get("/ui/").text
    assert client.get("/ui/static/style.css").status_code == 200

    wrong = client.post("/ui/login", data={"key": "not-a-key"}, follow_redirects=False)
    assert wrong.status_code == 401 and "memstrata_inspector_key" not in wrong.headers.get(
        "set-cookie", "")
    ok = client.post("/ui/login", data={"key": "admin-key-0123456789"},
                     follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/"
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui/" in cookie

    users = client.get("/ui/")
    assert users.status_code == 200 and ">ana<" in users.text
    token = _csrf(client.get("/ui/forget", params={"u": "ben"}).text)
    other = TestClient(client.app)  # another admin's session: another token
    other.post("/ui/login", data={"key": "admin-key-0123456789"})
    keys.add("second-admin-key-99999")
    second = TestClient(client.app)
    second.post("/ui/login", data={"key": "second-admin-key-99999"})
    refused = second.post("/ui/forget", data={"u": "ben", "confirm": "ben", "csrf": token})
    assert refused.status_code == 403 and demo.store.counts("ben")["turns"] == 3

    keys.discard("admin-key-0123456789")  # revoked: the cookie stops working at once
    assert client.get("/ui/").status_code == 401
    keys.add("admin-key-0123456789")
    out = client.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
    assert out.status_code == 303
    assert client.get("/ui/").status_code == 401


def test_the_knowledge_page_shows_what_read_learn_and_expect_wrote(demo: Memory) -> None:
    client = _client(demo)
    assert 'href="/knowledge?u=ana"' in client.get("/user", params={"u": "ana"}).text
    page = client.get("/knowledge", params={"u": "ana"})
    assert page.status_code == 200
    html = page.text
    sections = {name: html.split(f'id="{name}"')[1].split("<h2")[0]
                for name in ("documents", "semantic", "procedures", "strategies",
                             "expectations", "surprises", "intentions")}
    assert "Sourdough basics" in sections["documents"]
    assert "The Bread Lab" in sections["documents"]
    assert "A sourdough starter doubles in 4 to 8 hours" in sections["semantic"]
    assert ">bake a loaf<" in sections["procedures"] and '"n">4<' in sections["procedures"]
    assert "Worked for: When should Ana feed her starter?" in sections["strategies"]
    assert "guardrail" in sections["strategies"] and "shellfish" in sections["strategies"]
    assert "Can you suggest a rye bread recipe?" in sections["expectations"]
    assert "rye, recipe" in sections["expectations"]
    assert "Ana names her sourdough starter" in sections["surprises"]
    assert "None." in sections["intentions"]
    assert "Lisbon" not in html  # a fact said in a chat is not knowledge read or learned

    # A fact read links to the episode it was read in, which links to what it taught.
    fact = next(i for i in demo.store.items("ana", kind="semantic") if "doubles" in i.text)
    shown = client.get("/memory", params={"u": "ana", "id": fact.id}).text
    episode = next(i for i in demo.store.items("ana", kind="episodic"))
    assert "read in" in shown and f"id={episode.id}" in shown
    read_in = client.get("/memory", params={"u": "ana", "id": episode.id}).text
    assert "facts read from it" in read_in and "procedures read from it" in read_in
    procedure = demo.store.items("ana", kind="procedural")[0]
    steps = client.get("/memory", params={"u": "ana", "id": procedure.id}).text
    assert steps.count("<li>") >= 4 and "Shape and proof overnight in the fridge" in steps
    guardrail = next(i for i in demo.store.items("ana", kind="strategy")
                     if "Porto" in i.title)
    assert "guardrail (from a failure)" in client.get(
        "/memory", params={"u": "ana", "id": guardrail.id}).text

    ben = client.get("/knowledge", params={"u": "ben"}).text
    assert ben.count("None.") == 7 and "sourdough" not in ben.lower()
    assert client.get("/knowledge", params={"u": "nobody"}).status_code == 404
    assert client.get("/knowledge").status_code == 400


def test_the_knowledge_page_pages_each_section(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "k.db", embedder=None) as memory:
        for n in range(7):
            memory.store.add(StrategyItem(user_id="kim", title=f"strategy number {n}",
                                          text=f"Do step {n} first"))
        client = _client(memory)
        first = client.get("/knowledge", params={"u": "kim", "n": 3}).text
        assert first.count("strategy number") == 3
        nxt = re.search(r'<a href="([^"]+)" rel="next"', first)
        assert nxt is not None and "o_strategies=3" in unescape(nxt.group(1))
        seen = [first]
        url: str | None = unescape(nxt.group(1))
        while url:
            text = client.get(url).text
            seen.append(text)
            found = re.search(r'<a href="([^"]+)" rel="next"', text)
            url = unescape(found.group(1)) if found else None
        numbers = [int(x) for page in seen for x in re.findall(r"strategy number (\d)", page)]
        assert sorted(numbers) == list(range(7)) and len(seen) == 3


def test_the_jobs_pages_show_pending_failed_and_done_jobs(demo: Memory) -> None:
    client = _client(demo)
    every = client.get("/jobs")
    assert every.status_code == 200 and every.text.count('class="job"') == 3
    assert 'href="/jobs"' in client.get("/").text
    failed = client.get("/jobs", params={"status": "failed"}).text
    assert failed.count('class="job"') == 1 and "ProgramParseError" in failed
    ben = client.get("/user", params={"u": "ben"}).text
    assert ben.count('class="job"') == 1 and "status-pending" in ben
    done = demo.jobs(status="done")[0]
    page = client.get("/job", params={"u": "ana", "id": done["id"]})
    assert page.status_code == 200 and "The user bakes sourdough every Sunday" in page.text
    assert client.get("/job", params={"u": "ben", "id": done["id"]}).status_code == 404
    assert client.get("/jobs", params={"status": "nonsense"}).status_code == 400


def test_without_a_job_queue_there_is_no_jobs_page(demo: Memory) -> None:
    class NoJobs:
        """A memory of an older memstrata: everything but the job queue."""

        def __getattr__(self, name: str) -> Any:
            if name in ("jobs", "job"):
                raise AttributeError(name)
            return getattr(demo, name)

    client = TestClient(create_app(NoJobs()))  # type: ignore[arg-type]
    assert client.get("/jobs").status_code == 404
    assert "/jobs" not in client.get("/").text
    assert client.get("/user", params={"u": "ana"}).status_code == 200


def test_ui_refuses_a_public_host_without_the_flag(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from memstrata.cli import main

    db = tmp_path / "m.db"
    build_demo(db, embedder=None).close()
    with pytest.raises(SystemExit) as refused:
        main(["ui", "--db", str(db), "--host", "0.0.0.0"])
    assert refused.value.code == 2
    assert "not a loopback address" in capsys.readouterr().err
    with pytest.raises(SystemExit) as missing:
        main(["ui", "--db", str(tmp_path / "none.db")])
    assert missing.value.code == 1 and not (tmp_path / "none.db").exists()


def test_the_local_app_answers_loopback_names_only(demo: Memory) -> None:
    from memstrata.ui_commands import is_loopback, local_app

    app = local_app(demo, "127.0.0.1")
    assert TestClient(app, base_url="http://127.0.0.1:8081").get("/").status_code == 200
    assert TestClient(app, base_url="http://localhost:8081").get("/").status_code == 200
    assert TestClient(app, base_url="http://[::1]:8081").get("/").status_code == 200
    rebound = TestClient(app, base_url="http://attacker.example:8081").get("/")
    assert rebound.status_code == 400 and "ana" not in rebound.text
    assert is_loopback("127.0.0.2") and is_loopback("::1") and not is_loopback("0.0.0.0")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.com")


@pytest.mark.postgres
def test_on_postgresql_a_user_is_opened_by_id(pg_db_url: str) -> None:
    """Row-level security keeps the tenants from being listed; every page of one works."""
    with build_demo(pg_db_url, embedder=None) as memory:
        client = _client(memory)
        users = client.get("/")
        assert users.status_code == 200 and "cannot list its users" in users.text
        assert "The user lives in Porto" in client.get("/user", params={"u": "ana"}).text
        conv = client.get("/conversation", params={"u": "ana", "c": "travel"}).text
        assert "I just moved to Lisbon" in conv and 'class="evidence"' in conv
        porto = _fact(memory, "ana", "lives in Porto")
        assert client.get("/memory", params={"u": "ben", "id": porto.id}).status_code == 404
        assert "ingest" in client.get("/runs", params={"u": "ana"}).text
        hits = client.get("/search", params={"u": "ana", "q": "Porto"}).text
        assert 'class="hit"' in hits
