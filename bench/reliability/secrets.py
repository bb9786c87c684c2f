"""Secrets: keys planted everywhere a run touches never reach a file.

The promise (``trajectories/redact.py`` states it in full): a secret in a **config**, in
the **LM's settings**, in a **prompt** (the task, the injected context), in a **model
output** (thoughts, answers, a decision's reason, tool arguments), in a **tool's
arguments or refusal**, or in an **exception** never reaches the database's run records
and event log, a JSONL export (``export_jsonl``, ``memstrata runs export``, ``Memory
.export``), the CLI's output, or a log file. What a user stores *as memory* (a turn
given to ``Memory.add``, a note written with ``mem_add``, a fact extracted from a turn)
is user data and is kept as given: that is what a memory is for, and it leaves with
``Memory.delete_all``. So no secret is planted there.

Each round draws fresh secrets of every shape the redactor knows (``PATTERNS``: OpenAI
and Anthropic keys, Bearer tokens, AWS key ids, GitHub, Slack, Google and Hugging Face
tokens, a password in a URL), the value of a secret-named environment variable, and
shapeless values under secret-named keys (``api_key``, ``password``...). Every channel
gets its own secrets, so a find names its channel. The channels run the real code: the
``Recorder``, ``run_executor`` (ReAct, with :class:`ObedientEngine` playing the model),
``Reconciler`` and ``store_decision``, ``Memory.answer``, the CLI in-process, and a log
handler at DEBUG on the root and DSPy loggers for the whole scenario.

At the end every byte of every file under ``ctx.work.parent`` (the suite's root: the
other scenarios' files too; SQLite files with their ``-wal`` and ``-shm``) is searched
for every planted secret as written, JSON-escaped, URL-quoted, base64-encoded at each
of the three alignments (standard and URL-safe alphabets), and as the first or last 16
characters of its random part (a secret cut short by a preview is still a leak). A
secret found counts once under ``secrets_found``, with the files and forms it was found
in (never its value: the report must not leak it either).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import random
import shutil
import string
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstrata.memory.runs import MASK

from .common import Context, Scenario
from .poisoning import ObedientEngine

ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
TENANT = "keeper"
CHANNELS = ("config", "lm_settings", "prompt", "model_output", "tool_error", "exception",
            "reconciler", "qa")


@dataclass(frozen=True)
class Secret:
    """One planted secret: its shape, the channel it went through, the secret itself,
    the random part of it (searched for on its own), and the text that carries it."""

    kind: str
    channel: str
    value: str
    body: str
    planted: str


def _draw(rng: random.Random, n: int, chars: str = ALNUM) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


# Every shape of ``trajectories.redact.PATTERNS``: (kind, prefix, body maker, how it is
# written where planted). A bearer token is the token; a URL's secret is its password.
SHAPES: tuple[tuple[str, Callable[[random.Random], tuple[str, str]], str], ...] = (
    ("openai", lambda r: ("sk-", _draw(r, 40)), "{value}"),
    ("openai_project", lambda r: ("sk-proj-", _draw(r, 48)), "{value}"),
    ("anthropic", lambda r: ("sk-ant-", _draw(r, 40)), "{value}"),
    ("bearer", lambda r: ("", _draw(r, 36)), "Bearer {value}"),
    ("aws_akia", lambda r: ("AKIA", _draw(r, 16, UPPER)), "{value}"),
    ("aws_asia", lambda r: ("ASIA", _draw(r, 16, UPPER)), "{value}"),
    ("github", lambda r: (f"gh{r.choice('pousr')}_", _draw(r, 36)), "{value}"),
    ("slack", lambda r: (f"xox{r.choice('abpr')}-", _draw(r, 32)), "{value}"),
    ("google", lambda r: ("AIza", _draw(r, 35)), "{value}"),
    ("huggingface", lambda r: ("hf_", _draw(r, 34)), "{value}"),
    ("url_password", lambda r: ("", _draw(r, 24)), "https://admin:{value}@10.0.0.5:8443/v1"),
    ("env", lambda r: ("", _draw(r, 30)), "{value}"),
)
SCAN_RESERVE_S = 10.0
"""Seconds of the budget kept for the final scan (no round starts inside them)."""
NAMED = "named"
"""A shapeless value that only its key (``api_key``, ``password``...) marks as secret."""


def fresh_secrets(rng: random.Random, channel: str) -> list[Secret]:
    """One secret of every shape (and a named one) for ``channel``."""
    out = []
    for kind, make, how in SHAPES:
        prefix, body = make(rng)
        value = prefix + body
        out.append(Secret(kind, channel, value, body, how.format(value=value)))
    body = _draw(rng, 32)
    out.append(Secret(NAMED, channel, body, body, body))
    return out


def forms(secret: Secret) -> dict[str, str]:
    """Every form of ``secret`` searched for, by name (each at least 16 characters)."""
    value, raw = secret.value, secret.value.encode()
    found = {"raw": value, "json": json.dumps(value)[1:-1],
             "url": urllib.parse.quote(value, safe=""), "head16": secret.body[:16],
             "tail16": secret.body[-16:]}
    for pad in range(3):
        for name, encode in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            # Characters that depend on the bytes around the secret are dropped: the first
            # group when something precedes it, and the last group.
            text = encode(b"\0" * pad + raw).decode()
            found[f"{name}{pad}"] = text[4 if pad else 0:-4]
    return {k: v for k, v in found.items() if len(v) >= 16}


def scan(root: Path, secrets: list[Secret]) -> dict[Secret, list[tuple[str, str]]]:
    """Every planted secret found under ``root``, with the (file, form) pairs it was
    found as. GNU ``grep -F`` (Aho-Corasick over every form at once) when there is one;
    Python otherwise. Patterns go through a pipe, never a file, so the scan cannot
    find its own list."""
    wanted: dict[str, list[tuple[Secret, str]]] = {}
    for secret in secrets:
        for form, text in forms(secret).items():
            wanted.setdefault(text, []).append((secret, form))
    hits: dict[Secret, list[tuple[str, str]]] = {}

    def note(path: str, text: str) -> None:
        for secret, form in wanted.get(text, ()):
            where = (os.path.relpath(path, root), form)
            if where not in hits.setdefault(secret, []):
                hits[secret].append(where)

    grep = shutil.which("grep")
    if grep is not None:
        proc = subprocess.run([grep, "-rFaoZ", "-f", "-", "--", str(root)],
                              input="\n".join(wanted).encode(), capture_output=True,
                              check=False)
        if proc.returncode in (0, 1):
            for line in proc.stdout.split(b"\n"):
                if b"\0" in line:
                    found_in, found = line.split(b"\0", 1)
                    matched = found.decode(errors="replace")
                    # grep prints the leftmost-longest match; a shorter form inside it
                    # (a fragment inside the whole secret) is the same secret.
                    for pattern in wanted:
                        if pattern in matched:
                            note(found_in.decode(errors="replace"), pattern)
            return hits
    for path in (p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for text in wanted:
            if text.encode() in data:
                note(str(path), text)
    return hits


# -- the channels ------------------------------------------------------------------------


@dataclass
class Bench:
    """What every channel works on: one store file and the round's environment secret."""

    work: Path
    memory: Any
    env_name: str

    @property
    def store(self) -> Any:
        """The store."""
        return self.memory.store


def _by_kind(secrets: list[Secret]) -> dict[str, Secret]:
    return {s.kind: s for s in secrets}


def _sentence(secrets: list[Secret]) -> str:
    """Every shaped secret of a channel, written as it would be in text."""
    return "; ".join(f"{s.kind} {s.planted}" for s in secrets if s.kind != NAMED)


def _set_env(bench: Bench, secrets: list[Secret]) -> None:
    os.environ[bench.env_name] = _by_kind(secrets)["env"].value


def _handle(engine: ObedientEngine) -> Any:
    import dspy

    from memstrata.programs.lm import wrap_lm

    return wrap_lm(dspy.LM(engine.name, engine=engine, cache=False, num_retries=0),
                   engine.name)


def _session(bench: Bench) -> Any:
    from memstrata.tools import ToolSession

    return ToolSession(bench.store, TENANT)


def channel_config(bench: Bench, secrets: list[Secret]) -> None:
    """A recorded run whose config, task and steps carry keys."""
    from memstrata.trajectories import Recorder

    k = _by_kind(secrets)
    text = _sentence(secrets)
    config = {"api_key": k[NAMED].value, "model": "openai/gpt-4o-mini",
              "api_base": k["url_password"].planted,
              "nested": {"password": k[NAMED].value, "client_secret": k["openai"].value},
              "headers": [{"Authorization": k["bearer"].planted}], "note": text,
              "keys": [k["github"].value, k["aws_akia"].value]}
    with Recorder(bench.store, TENANT, "secrets.config", task=f"deploy with {text}",
                  config=config) as rec:
        rec.step("llm", "call", input={"headers": {"Authorization": k["bearer"].planted}},
                 output=text, data={"credentials": [k[NAMED].value], "echo": text})
        rec.finish(output={"said": text}, config={"access_key": k[NAMED].value})


def _react(bench: Bench, question: str, engine: ObedientEngine, *, handle: Any = None,
           memory: str = "", tools: list[Any] | None = None) -> Any:
    from memstrata.programs.executors import ExecutorSettings, run_executor

    session = _session(bench)
    return run_executor(question, session, handle or _handle(engine),
                        ExecutorSettings(executor="react", max_iters=6),
                        context={"memory": memory} if memory else None,
                        tools=None if tools is None else [session.bind(t) for t in tools])


def channel_lm_settings(bench: Bench, secrets: list[Secret]) -> None:
    """A run on a provider LM configured with keys (``api_key``, a password in
    ``api_base``, auth headers), whose server refuses the connection (nothing listens
    on port 9 of the loopback): the run fails, recorded, and every library on the way
    logs what it logs."""
    import dspy

    from memstrata.programs.lm import wrap_lm

    k = _by_kind(secrets)
    url = k["url_password"].planted.replace("10.0.0.5:8443", "127.0.0.1:9")
    lm = dspy.LM("openai/gpt-4o-mini", api_key=k["openai_project"].value, api_base=url,
                 extra_headers={"Authorization": k["bearer"].planted,
                                "x-api-key": k["anthropic"].value,
                                "x-goog-api-key": k["google"].value},
                 cache=False, num_retries=0, timeout=5)
    with contextlib.suppress(Exception):  # the refused connection, after it is recorded
        _react(bench, "What is the dog called?", ObedientEngine(),
               handle=wrap_lm(lm, "openai/gpt-4o-mini"))


def channel_prompt(bench: Bench, secrets: list[Secret]) -> None:
    """Keys in the task and in the context injected into the prompt."""
    text = _sentence(secrets)
    _react(bench, f"Rotate these: {text}", ObedientEngine(), memory=f"notes: {text}")


def channel_model_output(bench: Bench, secrets: list[Secret]) -> None:
    """A model that writes keys into its thoughts and answer and, of its own accord,
    into tool arguments: a search query, an event it logs (the event log is a log, not
    memory), an id it fetches."""
    k = _by_kind(secrets)
    text = _sentence(secrets)

    def leak(out: dict[str, Any]) -> dict[str, Any]:
        for name in ("next_thought", "reasoning", "answer"):
            if name in out:
                out[name] = f"{out[name]} {text}"
        return out

    engine = ObedientEngine(reply_hook=leak, plan=[
        ("mem_search", {"query": text}),
        ("event_log", {"obj": {"note": text, "api_key": k[NAMED].value,
                               "auth": {"password": k[NAMED].value}}}),
        ("mem_get", {"ids": [k["openai"].value]})])
    _react(bench, "What is the dog called?", engine)


def channel_tool_error(bench: Bench, secrets: list[Secret]) -> None:
    """Tool calls refused with messages that quote the keys they were given."""
    k = _by_kind(secrets)
    engine = ObedientEngine(plan=[
        ("mem_search", {"query": "x", "role": k["openai_project"].value}),
        ("ctx_find", {"ref": k["huggingface"].value, "pattern": "x"}),
        ("ctx_slice", {"ref": k["google"].value, "start": 0, "end": 5}),
        ("mem_get", {"ids": [s.planted for s in secrets[:8]]}),
        ("mem_quote", {"id": k["slack"].value, "max_chars": 99999}),
        ("mem_search", {"query": _sentence(secrets), "k": 99999}),
        ("ctx_find", {"ref": "nope", "pattern": k["env"].value + "(" + k["aws_asia"].value})])
    _react(bench, "What is the dog called?", engine)


def channel_exception(bench: Bench, secrets: list[Secret]) -> None:
    """Exceptions that carry keys: a tool's, a model call's, and unparseable output."""
    text = _sentence(secrets)

    def fetch_upstream(b: Any, url: str) -> dict[str, Any]:
        """Fetch a URL.

        Args:
            url: the address.
        """
        raise RuntimeError(f"upstream refused {url}: 401 for {text}")

    _react(bench, "What is upstream?", ObedientEngine(plan=[
        ("fetch_upstream", {"url": "https://example.invalid"})]), tools=[fetch_upstream])

    class Broken(ObedientEngine):
        def reply(self, request: Any) -> dict[str, Any]:
            raise RuntimeError(f"provider error: invalid key {text}")

    # The model call's exception leaves run_executor (recorded as the run's error first).
    with contextlib.suppress(Exception):
        _react(bench, "What is the dog called?", Broken())

    class Garbled(ObedientEngine):
        def complete(self, request: Any) -> Any:
            from dspy.lm15 import Message, Response, TextPart, Usage

            return Response(id=None, model=self.name, finish_reason="stop",
                            message=Message.assistant([TextPart(f"not json: {text}")]),
                            usage=Usage(input_tokens=1, output_tokens=1))

    _react(bench, "What is the dog called?", Garbled())


def channel_reconciler(bench: Bench, secrets: list[Secret]) -> None:
    """A reconciler whose model writes keys into its reason; the decision is stored."""
    import dspy

    from memstrata.programs.reconcile_run import store_decision
    from memstrata.programs.reconciler import Reconciler

    text = _sentence(secrets)

    def leak(out: dict[str, Any]) -> dict[str, Any]:
        if "reason" in out:
            out["reason"] = f"{text}"[:290]
            out["reasoning"] = text
        if "next_thought" in out:
            out["next_thought"] = text
        return out

    session = _session(bench)
    with dspy.context(lm=_handle(ObedientEngine(reply_hook=leak)).lm):
        decision = Reconciler(session)(name="Sam", conversation_a="c1", conversation_b="c2")
    store_decision(bench.store, TENANT, decision)


def channel_qa(bench: Bench, secrets: list[Secret]) -> None:
    """``Memory.answer`` with a model that answers with keys."""
    text = _sentence(secrets)

    def leak(out: dict[str, Any]) -> dict[str, Any]:
        if "answer" in out:
            out["answer"] = text[:95]
        return out

    from memstrata import Memory

    Memory(bench.store, lm=_handle(ObedientEngine(reply_hook=leak))).answer(
        f"Which of these is mine: {text}?", user_id=TENANT)


CHANNEL_RUNS: dict[str, Callable[[Bench, list[Secret]], None]] = {
    "config": channel_config, "lm_settings": channel_lm_settings, "prompt": channel_prompt,
    "model_output": channel_model_output, "tool_error": channel_tool_error,
    "exception": channel_exception, "reconciler": channel_reconciler, "qa": channel_qa}


def exports(bench: Bench, out: Path) -> None:
    """Every way runs and memory leave the store: ``export_jsonl``, the CLI's ``runs
    export``/``show``/``list`` (their output kept in files), ``Memory.export``."""
    from memstrata.trajectories import export_jsonl

    from .fuzz import cli_main

    main = cli_main()

    out.mkdir(parents=True, exist_ok=True)
    export_jsonl(bench.store, out / "runs.jsonl")
    bench.memory.export(TENANT, out / "memory.jsonl")
    db = str(bench.store.path)
    last = bench.store.runs.list(TENANT, limit=1)
    for name, argv in (
            ("cli-export.txt", ["runs", "export", "--db", db, "--out", str(out / "cli.jsonl"),
                                "-n", "10000"]),
            ("cli-list.txt", ["runs", "list", "--db", db, "-n", "10000"]),
            ("cli-show.txt", ["runs", "show", last[0].id if last else "none", "--user", TENANT,
                              "--db", db])):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer), \
                contextlib.suppress(SystemExit):
            main(argv)
        (out / name).write_text(buffer.getvalue(), encoding="utf-8")


@contextlib.contextmanager
def logged_to(path: Path) -> Iterator[None]:
    """Everything logged (root and DSPy loggers, DEBUG and up) goes to ``path`` too.

    The console handlers libraries brought (litellm's, DSPy's) are held at WARNING
    meanwhile, so DEBUG goes to the file and not to the terminal; all is restored after.
    """
    with contextlib.suppress(ImportError):
        import litellm  # noqa: F401 - its console handlers exist from its import on
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger(), logging.getLogger("dspy")]
    levels = [lg.level for lg in loggers]
    consoles = [h for lg in [logging.getLogger(), *(logging.getLogger(n) for n in list(
        logging.root.manager.loggerDict))] for h in lg.handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
    console_levels = [h.level for h in consoles]
    for h in consoles:
        h.setLevel(max(h.level, logging.WARNING))
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
        for h, level in zip(consoles, console_levels, strict=True):
            h.setLevel(level)
        handler.close()


def _seed(bench: Bench) -> None:
    bench.memory.add([{"speaker": "Ana", "content": "I adopted a beagle named Rex."},
                      {"speaker": "Lee", "content": "Rex is a lovely name."}],
                     user_id=TENANT, conversation_id="chat", infer=False)
    for conv, other, said in (("c1", "Ana", "I work at Globex."),
                              ("c2", "Lee", "I work at Initech.")):
        bench.memory.add([{"speaker": "Sam", "content": said},
                          {"speaker": other, "content": "Nice."}],
                         user_id=TENANT, conversation_id=conv, infer=False)


def secrets(ctx: Context) -> Scenario:
    """Plant fresh secrets in every channel, export everything, grep every byte."""
    from memstrata import Memory

    result = Scenario(name="secrets")
    rng = random.Random(f"{ctx.seed}-{time.time_ns()}")  # fresh secrets every run
    started = time.perf_counter()
    rounds = ctx.sized(1, 10)
    planted: list[Secret] = []
    per_channel: dict[str, int] = dict.fromkeys(CHANNELS, 0)
    raised: dict[str, int] = dict.fromkeys(CHANNELS, 0)
    bench = Bench(work=ctx.work, memory=Memory.open(ctx.work / "secrets.db", embedder=None),
                  env_name=f"MEMSTRATA_RELIABILITY_{rng.getrandbits(32):08X}_TOKEN")
    try:
        with logged_to(ctx.work / "app.log"):
            _seed(bench)
            for n in range(rounds):
                # A round takes a few seconds; the scan needs its share of the budget too.
                if time.monotonic() > ctx.deadline - SCAN_RESERVE_S:
                    result.stopped_early = True
                    break
                for channel in CHANNELS:
                    batch = fresh_secrets(rng, channel)
                    _set_env(bench, batch)
                    planted += batch
                    result.attempts += len(batch)
                    per_channel[channel] += len(batch)
                    try:
                        CHANNEL_RUNS[channel](bench, batch)
                    except Exception as exc:  # each channel absorbs what it expects
                        raised[channel] += 1
                        # The type only: the message may hold the planted keys.
                        result.fail("crashes", "a channel raised", channel=channel,
                                    error=type(exc).__name__)
                exports(bench, ctx.work / f"exports-{n}")
    finally:
        os.environ.pop(bench.env_name, None)
        bench.memory.close()
    scan_started = time.perf_counter()
    hits = scan(ctx.work.parent, planted)
    scan_s = time.perf_counter() - scan_started
    judge(result, hits)
    files = [p for p in ctx.work.parent.rglob("*") if p.is_file()]
    masked = sum(p.read_bytes().count(MASK.encode()) for p in ctx.work.rglob("*")
                 if p.is_file())
    if planted and not masked:  # the keys never reached the code under test at all
        result.fail(None, "nothing was redacted: the channels did not reach the records")
    result.figures.update({
        "secrets_planted": len(planted), "rounds": rounds,
        "planted_per_channel": per_channel, "channels_that_raised": raised,
        "files_scanned": len(files), "mb_scanned": round(sum(p.stat().st_size
                                                            for p in files) / 1e6, 1),
        "forms_per_secret": len(forms(planted[0])) if planted else 0,
        "masks_in_own_files": masked,
        "scan_s": round(scan_s, 2), "seconds": round(time.perf_counter() - started, 2)})
    return result


def judge(result: Scenario, hits: dict[Secret, list[tuple[str, str]]]) -> None:
    """Count each secret found once, naming where and as what, never what."""
    for secret, where in sorted(hits.items(), key=lambda kv: (kv[0].channel, kv[0].kind)):
        result.fail("secrets_found", "a planted secret was found", kind=secret.kind,
                    channel=secret.channel, files=sorted({f for f, _ in where})[:5],
                    forms=sorted({f for _, f in where}))


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {"secrets": secrets}
