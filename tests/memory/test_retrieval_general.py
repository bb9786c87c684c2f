"""Retrieval on a chat app's history, not only LoCoMo's: golden queries a person can check,
roles as fields, first-person questions, calibrated scores and per-tenant statistics."""

from __future__ import annotations

import sqlite3

import pytest

from memstrata import Memory
from memstrata.memory import Store
from memstrata.memory.query import addressed_speakers, analyse
from memstrata.memory.retrieval import DEFAULT_MIN_SCORE
from memstrata.memory.store import tenant_token
from memstrata.memory.text import context_of, names_place, nearest

README_HISTORY = [
    [{"role": "user", "content": "I moved to Lisbon in May"},
     {"role": "assistant", "content": "Exciting! How do you like it?"}],
    "I adopted a cat", "I visited Tokyo", "I got a job at a bakery",
    "My sister is a nurse in Berlin",
]

CODE_ANSWER = """Sure. Here is a deploy script that copies the build and restarts the app:

```bash
#!/usr/bin/env bash
set -euo pipefail
rsync -az build/ deploy@server:/srv/app/
ssh deploy@server 'systemctl restart app'
```

- `set -euo pipefail` stops at the first failing command.
- `rsync -az` sends only what changed.

| step | why |
|---|---|
| rsync | fast incremental copy |
| restart | load the new build |
"""

CHAT = [
    {"role": "system", "content": "You are a helpful assistant. The user is allergic to "
                                  "nothing you know of."},
    {"role": "user", "content": "Heads up: I'm allergic to peanuts, so keep them out of "
                                "any recipe you suggest."},
    {"role": "assistant", "content": "Noted, no peanuts. What would you like to cook?"},
    {"role": "user", "content": "Something quick with chickpeas for tonight."},
    {"role": "assistant", "content": "Try a chickpea curry: onion, garlic, tomatoes, "
                                     "coconut milk, 25 minutes in one pot."},
    {"role": "user", "content": "My budget for the new laptop is 1,800 euros at most."},
    {"role": "assistant", "content": "With 1,800 euros you can get 32 GB of memory."},
    {"role": "user", "content": "Can you write me a deploy script for my app?"},
    {"role": "assistant", "content": CODE_ANSWER},
    {"role": "user", "content": "Thanks, that's really useful."},
]


@pytest.fixture(scope="module")
def readme_memory() -> Memory:
    m = Memory.open(":memory:")
    for message in README_HISTORY:
        m.add(message, user_id="ana", infer=False)
    m.add("My brother lives in Porto and works as a chef", user_id="ben", infer=False)
    m.add(CHAT, user_id="cho", infer=False)
    return m


GOLDEN = [
    ("ana", "where does the user live?", "I moved to Lisbon in May"),
    ("ana", "where do I live?", "I moved to Lisbon in May"),
    ("ana", "what pet do I have?", "I adopted a cat"),
    ("ana", "what does my sister do?", "My sister is a nurse in Berlin"),
    ("ana", "what do I do for work?", "I got a job at a bakery"),
    ("ben", "who lives in Porto?", "My brother lives in Porto and works as a chef"),
    ("cho", "what am I allergic to?", CHAT[1]["content"]),
    ("cho", "what did I say my budget for the laptop was?", CHAT[5]["content"]),
    ("cho", "which chickpea dish did you recommend?", CHAT[4]["content"]),
    ("cho", "which rsync flags did you use in the deploy script?", CODE_ANSWER),
]


@pytest.mark.parametrize(("user", "query", "expected"), GOLDEN)
def test_golden_queries_rank_the_right_memory_first(readme_memory, user, query, expected):
    hits = readme_memory.search(query, user_id=user, k=3)
    assert hits, f"no hit for {query!r}"
    assert hits[0].text == expected, [h.text for h in hits]


@pytest.mark.parametrize("query", ["xyzzy plugh", "asdf qwer zxcv", "blorp fnord quux"])
def test_a_nonsense_query_returns_nothing(readme_memory, query):
    assert readme_memory.search(query, user_id="ana", k=5) == []
    assert readme_memory.search(query, user_id="cho", k=5) == []


def test_scores_are_calibrated_and_fall_with_rank(readme_memory):
    hits = readme_memory.search("what does my sister do?", user_id="ana", k=5, min_score=0)
    scores = [h.score for h in hits]
    assert all(0 <= s <= 1 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == 1.0  # every content word of the question is in the best hit
    # The floor: everything returned is at or above it, and a higher floor returns less.
    default = readme_memory.search("what does my sister do?", user_id="ana", k=5)
    assert all(h.score >= DEFAULT_MIN_SCORE for h in default)
    strict = readme_memory.search("what does my sister do?", user_id="ana", k=5,
                                  min_score=0.9)
    assert [h.text for h in strict] == ["My sister is a nurse in Berlin"]
    assert len(hits) >= len(default) >= len(strict)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.2", None, True])
def test_min_score_must_be_a_number_from_0_to_1(readme_memory, bad):
    with pytest.raises(ValueError, match="min_score"):
        readme_memory.search("cat", user_id="ana", min_score=bad)


def test_role_words_are_fields_not_words_of_every_turn(readme_memory):
    store = readme_memory.store
    # No turn says "user" or "assistant": the role labels match nothing in the index.
    for word in ("user", "assistant"):
        assert store.lexical_refs("ana", [word], node="turn", k=10) == []
        assert store.lexical_refs("cho", [word], node="turn", k=10) == []
    hits = readme_memory.search("where does the user live?", user_id="ana", k=5, min_score=0)
    assert all("lexical" not in h.channels for h in hits)  # "live" is in no turn
    # A speaker named in the question still scores: its turns are lifted and searched apart.
    assert analyse("where does the user live?", ["assistant", "user"]).speakers == ["user"]


def test_first_person_questions_resolve_to_the_chat_roles():
    roles = ["assistant", "user"]
    assert addressed_speakers("where do I live?", roles) == ["user"]
    assert addressed_speakers("What’s my budget?", roles) == ["user"]
    assert addressed_speakers("what did you recommend?", roles) == ["assistant"]
    assert addressed_speakers("what did you suggest for my script?", roles) == [
        "user", "assistant"]
    # Named people, as in LoCoMo, are read as before: no role is assumed.
    assert addressed_speakers("what did I say to Caroline?", ["Caroline", "Melanie"]) == []
    assert analyse("where do I live?", roles).speakers == ["user"]
    assert analyse("Where does Caroline live?", ["Caroline", "Melanie"]).speakers == [
        "Caroline"]


def test_a_tenants_scores_do_not_move_when_another_tenant_writes(tmp_path):
    m = Memory.open(tmp_path / "t.db")
    for message in README_HISTORY:
        m.add(message, user_id="ana", infer=False)
    queries = ["where do I live?", "what does my sister do?", "cat", "nurse in Berlin"]

    def snapshot():
        out = []
        for q in queries:
            out.append([(h.id, h.score, h.channels)
                        for h in m.search(q, user_id="ana", k=5, min_score=0)])
            out.append(m.store.lexical_refs("ana", ["sister", "nurs", "berlin", "cat"],
                                            node="turn", k=10))
        return out

    before = snapshot()
    ids = [e["id"] for e in m.add([f"My sister and my cat visited Berlin, note {n}"
                                   for n in range(40)], user_id="zed", infer=False)]
    assert snapshot() == before  # bit for bit: another tenant's rows are not counted
    for node_id in ids[:25]:
        m.delete(node_id)
    assert snapshot() == before
    m.close()


def test_where_questions_lift_hits_that_name_a_place():
    assert names_place("I moved to Lisbon in May")
    assert names_place("My sister is a nurse in Berlin")
    assert not names_place("I moved in May") and not names_place("I got a job at a bakery")
    assert analyse("Where did she go?", []).asks_where
    assert analyse("Which city do I live in now?", []).asks_where
    assert not analyse("What did she cook?", []).asks_where


def test_a_long_neighbour_lends_only_its_nearest_words_to_a_turns_context():
    long_answer = "intro " + "filler " * 400 + "closing words"
    assert nearest(long_answer, 30, end=True).endswith("closing words")
    assert nearest(long_answer, 30).startswith("intro")
    assert len(nearest(long_answer, 30)) <= 30
    texts = ["question?", long_answer, "thanks"]
    assert "closing" in context_of(texts, 2) and "intro" not in context_of(texts, 2)
    assert context_of(texts, 0).startswith("intro") and "closing" not in context_of(texts, 0)
    assert context_of(["only"], 0) == ""


def test_opening_an_older_store_rewrites_its_turn_index_without_speakers(tmp_path):
    path = tmp_path / "old.db"
    store = Store.open(path, embedder=None)
    m = Memory(store)
    m.add([{"role": "user", "content": "I moved to Lisbon"},
           {"role": "assistant", "content": "How do you like it?"}], user_id="ana",
          infer=False)
    m.close()
    # Make it what a version-9 store holds: "speaker: text" indexed, migration 10 not run.
    conn = sqlite3.connect(path)
    token = tenant_token("ana")
    rows = conn.execute("SELECT rowid, body FROM turns_fts").fetchall()
    for rowid, body in rows:
        conn.execute("UPDATE turns_fts SET body = ? WHERE rowid = ?",
                     (f"{token}xspeakerword {body}", rowid))
    assert conn.execute("SELECT count(*) FROM turns_fts WHERE body LIKE '%speakerword%'"
                        ).fetchone()[0] == 2
    conn.execute("DELETE FROM schema_migrations WHERE version = 10")
    conn.commit()
    conn.close()
    store = Store.open(path, embedder=None)
    assert store.lexical_refs("ana", ["speakerword"], node="turn", k=5) == []
    assert store.lexical_refs("ana", ["lisbon"], node="turn", k=5)
    store.close()


def test_a_long_message_is_found_by_a_sentence_in_its_middle_and_quoted_there():
    filler = [f"Paragraph {n} is about scheduling, meetings and calendars in general."
              for n in range(30)]
    middle = "Your staging database password rotates every Thursday at noon."
    long_text = "\n\n".join([*filler[:15], middle, *filler[15:]])
    m = Memory.open(":memory:")
    m.add([{"role": "user", "content": "Tell me about my calendars and the staging setup."},
           {"role": "assistant", "content": long_text},
           {"role": "user", "content": "Meetings drain me, honestly."}],
          user_id="dev", infer=False)
    hits = m.search("when does the staging database password rotate?", user_id="dev", k=3)
    assert hits[0].text == long_text
    assert hits[0].quote is not None and middle in hits[0].quote
    assert len(hits[0].quote) <= 600 < len(long_text)
    short = m.search("meetings drain", user_id="dev", k=3)
    assert short[0].text == "Meetings drain me, honestly." and short[0].quote is None


def test_passages_keep_code_blocks_whole_and_windows_short():
    from memstrata.memory.passages import best_passage, split_passages

    prose = " ".join(f"Sentence number {n} talks about deployment." for n in range(40))
    text = f"{prose}\n\n```bash\nrsync -az build/ server:/srv/app/\n```\n\nDone."
    parts = split_passages(text, 200)
    assert "```bash\nrsync -az build/ server:/srv/app/\n```" in parts
    assert all(len(p) <= 200 for p in parts if not p.startswith("```"))
    assert "".join(parts).replace("\n", "").replace(" ", "") == text.replace(
        "\n", "").replace(" ", "")  # nothing lost, nothing repeated
    quote, share = best_passage(text, {"rsync", "srv"}, 200)
    assert quote.startswith("```bash") and share == 1.0
    assert split_passages("short", 200) == ("short",)


def test_a_long_query_is_searched_by_its_rarest_words_without_the_re_runs():
    m = Memory.open(":memory:")
    filler = ("the service logs a request and a response for every call it handles "
              "while the worker retries the queue")
    m.add([f"{filler} number {n}" for n in range(20)]
          + ["KeyError zorbulator in parse_manifest after the upgrade"],
          user_id="ops", infer=False)
    traceback = (f"{filler} and then it failed with KeyError zorbulator raised inside "
                 "parse_manifest while loading the configuration file for deployment stage "
                 "production cluster region")
    qa = m.retriever._bounded("ops", m.retriever.analyse("ops", traceback))
    assert qa.bounded and len(set(qa.tokens)) == 16
    assert "zorbul" in qa.tokens or "zorbulator" in qa.tokens  # the rarest words stay
    hits = m.search(traceback, user_id="ops", k=3)
    assert hits[0].text.startswith("KeyError zorbulator")
    assert "expansion" not in hits[0].channels
    short = m.retriever._bounded("ops", m.retriever.analyse("ops", "zorbulator error"))
    assert not short.bounded


def test_a_named_speaker_scores_as_a_field_in_the_lexical_channel():
    from memstrata.memory import Retriever, SearchWeights

    m = Memory.open(":memory:", embedder=None)
    m.add([{"speaker": "Ana", "content": "The tulips opened today"},
           {"speaker": "Ben", "content": "The tulips opened today"}],
          user_id="g", infer=False)
    only_lexical = SearchWeights(speaker_boost=0, speaker_channels=0, graph=0, session=0,
                                 context=0)
    hits = Retriever(m.store, None, only_lexical).search("g", "what did Ana say about tulips?")
    assert [h.speaker for h in hits] == ["Ana", "Ben"]
    assert hits[0].channels["lexical"] > hits[1].channels["lexical"]
    off = Retriever(m.store, None, only_lexical.model_copy(update={"speaker_field": 0}))
    tied = off.search("g", "what did Ana say about tulips?")
    assert tied[0].channels["lexical"] == tied[1].channels["lexical"]


def test_the_cli_search_applies_the_floor_and_takes_min_score(tmp_path, capsys):
    from memstrata.cli import main

    db = str(tmp_path / "c.db")
    assert main(["add", "--db", db, "--user", "zed", "My passport is in the blue drawer"]) == 0
    capsys.readouterr()
    assert main(["search", "--db", db, "--user", "zed", "xyzzy plugh"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["search", "--db", db, "--user", "zed", "xyzzy plugh", "--min-score", "0"]) == 0
    assert "blue drawer" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["search", "--db", db, "--user", "zed", "passport", "--min-score", "nan"])
