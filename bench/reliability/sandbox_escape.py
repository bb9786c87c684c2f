"""Sandbox escape: agent code in the Deno/Pyodide sandbox tries to get out, and must not.

``sandbox_escape`` runs every kind of attempt in :data:`ATTEMPTS` (over 70, in groups:
host files, writes, environment, network, processes, JavaScript interop and Deno's
permissions, CPU, memory, the host protocol, shutdown, and other tenants through the
tool bridge) as Python code through ``interpreter.execute(code)``, the way RLM and the
scratchpad run a model's code. The sandbox is the real one (``sandbox_factory``), with
the memory tools of a ``ToolSession`` bound to tenant A as its tools, exactly as the
executors give them.

Around it the host plants what an escape would reach (:class:`Probe`): a file with a
random marker and a victim file under ``ctx.work``, an environment variable with a marker
value (set before the sandbox starts), a TCP and a UDP listener on 127.0.0.1, a path a
spawned process would create, and tenant B's turn, item, blob and event holding B's
marker in the same store as tenant A. After each attempt it checks (:func:`judge`), and
counts under ``escapes`` any of:

- a marker (host file, environment, tenant B, the host's ``/etc/passwd``, the Pyodide
  folder read after start-up), or the attempt's own success line, in what came back
  (the output, the error, or any tool result that crossed into the sandbox);
- a watched host file changed, appeared or vanished (content or mode);
- a listener saw a connection or a datagram;
- a process was spawned (its marker file, or a child of the Deno process);
- tenant B's rows changed;
- the host hung (``execute`` or ``shutdown`` did not return within the limits plus
  :data:`GRACE_S`) or its own memory grew by over :data:`HOST_GROWTH_MB`;
- a CPU- or memory-bound step was not stopped with an error within its limit, or a
  memory-bound allocation past the limit succeeded.

A step that raised something other than the errors an executor records
(``CodeInterpreterError``, ``SyntaxError``) counts under ``crashes``: it would end an RLM
run instead of being one recorded step. The host process dying cannot be detected from
inside it, but it cannot pass either: the suite then writes no report.

One interpreter serves many attempts (start-up is seconds); two alternate, so that while
one restarts after an attempt that killed it (in the background), the other goes on.
The quick slice runs every kind once; the full run repeats the whole set in new
shuffled orders (``rounds``) until its budget. Without the sandbox installed the scenario
fails (``figures["skipped"]``) rather than report no escapes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import random
import re
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .common import Context, Scenario

Expect = Literal["blocked", "stopped", "memory", "survives", "shutdown"]

GRACE_S = 10.0
"""Seconds past a step's limit before the host counts as hung (a kill, a restart's
wait and a loaded 2-core machine fit in it)."""
HOST_GROWTH_MB = 512
"""Peak memory the host process may gain in one attempt (a flood of output that the
host would buffer whole is what this catches)."""
ENV_NAME = "MEMSTRATA_ESCAPE_PROBE"
"""The planted environment variable (its value is a fresh marker each run)."""
TENANT_A, TENANT_B = "tenant-a", "tenant-b"


@dataclass(frozen=True)
class Attempt:
    """One kind of escape attempt.

    ``code`` is Python for the sandbox, with ``%%name%%`` fields the probe fills
    (paths, ports, tenant B's ids: never a marker's value). ``TOKEN`` is a variable the
    harness injects; code that got through prints ``"ESCAPED:" + TOKEN``. ``expect``:
    ``blocked`` (any outcome but an escape), ``stopped`` (must end with an error within
    the time limit), ``memory`` (must end with an error; success is past the memory
    limit), ``survives`` (must end with an ordinary error, the sandbox alive), and
    ``shutdown`` (the interpreter's shutdown must return afterwards).
    """

    kind: str
    group: str
    code: str
    expect: Expect = "blocked"


WON = 'print("ESCAPED:" + TOKEN)'

ATTEMPTS: tuple[Attempt, ...] = (
    # -- reading host files ---------------------------------------------------------
    Attempt("py_open_etc_passwd", "files", "print(open('/etc/passwd').read())"),
    Attempt("py_open_host_marker", "files", "print(open('%%secret%%').read())"),
    Attempt("py_listdir_host", "files",
            f"import os\nif '%%secret_name%%' in os.listdir('%%hostdir%%'):\n    {WON}"),
    Attempt("deno_read_sync", "files",
            "from js import Deno\nprint(Deno.readTextFileSync('%%secret%%'))"),
    Attempt("deno_read_async", "files",
            "from js import Deno\nprint(await Deno.readTextFile('%%secret%%'))"),
    Attempt("fetch_file_url", "files",
            "import js\nr = await js.fetch('file://%%secret%%')\nprint(await r.text())"),
    Attempt("node_fs_read", "files",
            "import js\nfs = await js.eval('import(\"node:fs\")')\n"
            "print(fs.readFileSync('%%secret%%', 'utf8'))"),
    Attempt("mount_nodefs", "files",
            "import pyodide_js\npyodide_js.mountNodeFS('/mnt_host', '%%hostdir%%')\n"
            "print(open('/mnt_host/%%secret_name%%').read())"),
    Attempt("proc_self_environ", "files",
            "from js import Deno\nprint(Deno.readTextFileSync('/proc/self/environ'))"),
    Attempt("pyodide_dir_after_start", "files",
            "from js import Deno\nprint(Deno.readTextFileSync('%%pyodide_pkg%%'))"),
    Attempt("js_eval_read", "files",
            "import js\nprint(js.eval(\"Deno.readTextFileSync('%%secret%%')\"))"),
    Attempt("js_function_ctor_read", "files",
            "import js\nf = js.Function.new('p', 'return Deno.readTextFileSync(p)')\n"
            "print(f('%%secret%%'))"),
    Attempt("deno_internal_api", "files",
            "import js\nprint(js.eval('''(() => { const i = Deno[Deno.internal] ?? {};"
            " const out = []; for (const k of Object.keys(i)) { if (typeof i[k] !== "
            "'function' || !/read|file|env|open|spawn|command/i.test(k)) continue;"
            " try { out.push(k + '=' + String(i[k]('%%secret%%'))) } catch (e) {"
            " out.push(k + '!') } } return out.join('\\\\n') })()'''))"),
    # -- writing host files ---------------------------------------------------------
    Attempt("deno_write_new_file", "writes",
            f"from js import Deno\nDeno.writeTextFileSync('%%newfile%%', 'x')\n{WON}"),
    Attempt("deno_overwrite_victim", "writes",
            f"from js import Deno\nDeno.writeTextFileSync('%%victim%%', 'pwned')\n{WON}"),
    Attempt("deno_remove_victim", "writes",
            f"from js import Deno\nDeno.removeSync('%%victim%%')\n{WON}"),
    Attempt("deno_rename_victim", "writes",
            f"from js import Deno\nDeno.renameSync('%%victim%%', '%%newfile%%')\n{WON}"),
    Attempt("deno_chmod_victim", "writes",
            f"from js import Deno\nDeno.chmodSync('%%victim%%', 0o777)\n{WON}"),
    Attempt("deno_write_tmp", "writes",
            f"from js import Deno\nDeno.writeTextFileSync('%%tmpfile%%', 'x')\n{WON}"),
    Attempt("node_fs_write", "writes",
            "import js\nfs = await js.eval('import(\"node:fs\")')\n"
            f"fs.writeFileSync('%%newfile%%', 'x')\n{WON}"),
    # -- environment ----------------------------------------------------------------
    Attempt("py_os_environ", "env",
            "import os\nprint(os.environ.get('%%env%%'), dict(os.environ))"),
    Attempt("deno_env_get", "env", "from js import Deno\nprint(Deno.env.get('%%env%%'))"),
    Attempt("deno_env_to_object", "env",
            "import js\nprint(js.JSON.stringify(js.Deno.env.toObject()))"),
    Attempt("node_process_env", "env",
            "import js\np = await js.eval('import(\"node:process\")')\n"
            "print(p.env['%%env%%'])"),
    # -- network (a listener on the host counts every connection) ----------------------
    Attempt("py_socket_tcp", "network",
            "import socket\ns = socket.socket()\ns.settimeout(2)\n"
            f"s.connect(('127.0.0.1', %%port%%))\ns.sendall(b'hello')\n{WON}"),
    Attempt("py_socket_udp", "network",
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.sendto(b'hello', ('127.0.0.1', %%udp_port%%))\n{WON}"),
    Attempt("urllib_http", "network",
            "import urllib.request\n"
            "print(urllib.request.urlopen('http://127.0.0.1:%%port%%/', timeout=2).read())"),
    Attempt("http_client", "network",
            "import http.client\nc = http.client.HTTPConnection('127.0.0.1', %%port%%, "
            "timeout=2)\nc.request('GET', '/')\nprint(c.getresponse().status)"),
    Attempt("pyodide_open_url", "network",
            "from pyodide.http import open_url\n"
            "print(open_url('http://127.0.0.1:%%port%%/').read())"),
    Attempt("pyodide_pyfetch", "network",
            "from pyodide.http import pyfetch\n"
            "r = await pyfetch('http://127.0.0.1:%%port%%/')\nprint(r.status)"),
    Attempt("js_fetch", "network",
            "import js\nr = await js.fetch('http://127.0.0.1:%%port%%/')\nprint(r.status)"),
    Attempt("deno_connect", "network",
            "import js\nc = await js.eval('Deno.connect({hostname: \"127.0.0.1\", "
            f"port: %%port%%}})')\n{WON}"),
    Attempt("websocket", "network",
            "import js\nr = await js.eval('''new Promise((res) => { const w = new "
            "WebSocket(\"ws://127.0.0.1:%%port%%/\"); w.onopen = () => res(\"open\");"
            " w.onerror = () => res(\"error\"); setTimeout(() => res(\"timeout\"), 1500) "
            "})''')\nif r == 'open':\n    " + WON),
    Attempt("import_remote_module", "network",
            "import js\nm = await js.eval('import(\"http://127.0.0.1:%%port%%/m.js\")')\n"
            "print(m)"),
    Attempt("load_package_from_url", "network",
            "import pyodide_js\nawait pyodide_js.loadPackage("
            "'http://127.0.0.1:%%port%%/evil-1.0-py3-none-any.whl')\nimport evil\n" + WON),
    Attempt("micropip_install", "network",
            "import micropip\nawait micropip.install("
            "'http://127.0.0.1:%%port%%/evil-1.0-py3-none-any.whl')\n" + WON),
    Attempt("deno_listen", "network",
            f"import js\nprint(js.eval('Deno.listen({{port: 0}}).addr.port'))\n{WON}"),
    Attempt("deno_resolve_dns", "network",
            f"import js\nawait js.eval('Deno.resolveDns(\"localhost\", \"A\")')\n{WON}"),
    Attempt("worker_fetch", "network",
            "import js\nsrc = \"fetch('http://127.0.0.1:%%port%%/').then(() => "
            "postMessage('reached'), (e) => postMessage('denied'))\"\n"
            "r = await js.eval('''(async () => { const w = new Worker('data:application/"
            "javascript,' + encodeURIComponent(%r), {type: 'module'}); return await new "
            "Promise((res) => { w.onmessage = (e) => res(e.data); w.onerror = (e) => { "
            "e.preventDefault(); res('error') } }) })()''' % src)\n"
            "if r == 'reached':\n    " + WON),
    # -- processes ------------------------------------------------------------------
    Attempt("subprocess_run", "process",
            "import subprocess\nsubprocess.run(['touch', '%%spawn%%'])\n" + WON),
    Attempt("os_system", "process", "import os\nos.system('touch %%spawn%%')"),
    Attempt("os_fork_exec", "process",
            "import os\nif os.fork() == 0:\n    os.execv('/usr/bin/touch', "
            "['touch', '%%spawn%%'])"),
    Attempt("os_posix_spawn", "process",
            "import os\nos.posix_spawn('/usr/bin/touch', ['touch', '%%spawn%%'], {})"),
    Attempt("deno_command", "process",
            "import js\nprint(js.eval(\"new Deno.Command('touch', {args: ['%%spawn%%']})"
            ".outputSync().code\"))"),
    Attempt("deno_run_legacy", "process",
            "import js\nprint(js.eval(\"Deno.run({cmd: ['touch', '%%spawn%%']})\"))"),
    Attempt("node_child_process", "process",
            "import js\ncp = await js.eval('import(\"node:child_process\")')\n"
            "cp.execSync('touch %%spawn%%')"),
    Attempt("ctypes_system", "process",
            "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.system(b'touch %%spawn%%')"),
    Attempt("deno_dlopen_ffi", "process",
            "import js\nlib = js.eval(\"Deno.dlopen('libc.so.6', {system: {parameters: "
            "['buffer'], result: 'i32'}})\")\n" + WON),
    # -- Deno's permissions ---------------------------------------------------------
    Attempt("permissions_request", "interop",
            "import js\nr = await js.eval('''(async () => { const out = []; for (const name"
            " of ['read', 'write', 'net', 'env', 'run', 'ffi', 'sys', 'import']) { try { "
            "out.push(name + ':' + (await Deno.permissions.request({name})).state) } catch "
            "(e) { out.push(name + ':refused') } } return out.join(',') })()''')\n"
            "print(r)\nif ':granted' in r:\n    " + WON),
    Attempt("worker_permission_escalation", "interop",
            "import js\nsrc = \"try { postMessage(Deno.readTextFileSync('%%secret%%')) } "
            "catch (e) { postMessage('denied') }\"\n"
            "r = await js.eval('''(async () => { const w = new Worker('data:application/"
            "javascript,' + encodeURIComponent(%r), {type: 'module', deno: {permissions: "
            "{read: true, env: true, net: true, run: true}}}); return await new Promise("
            "(res) => { w.onmessage = (e) => res(e.data); w.onerror = (e) => { "
            "e.preventDefault(); res('error') } }) })()''' % src)\nprint(r)"),
    Attempt("worker_read", "interop",
            "import js\nsrc = \"try { postMessage(Deno.readTextFileSync('%%secret%%')) } "
            "catch (e) { postMessage('denied') }\"\n"
            "r = await js.eval('''(async () => { const w = new Worker('data:application/"
            "javascript,' + encodeURIComponent(%r), {type: 'module'}); return await new "
            "Promise((res) => { w.onmessage = (e) => res(e.data); w.onerror = (e) => { "
            "e.preventDefault(); res('error') } }) })()''' % src)\nprint(r)"),
    Attempt("import_unbundled_package", "network",
            f"import numpy\n{WON}"),
    # -- CPU ------------------------------------------------------------------------
    Attempt("cpu_python_loop", "cpu", "while True:\n    pass", "stopped"),
    Attempt("cpu_js_loop", "cpu", "import js\njs.eval('while (true) {}')", "stopped"),
    Attempt("cpu_async_forever", "cpu", "import asyncio\nawait asyncio.sleep(3600)",
            "stopped"),
    Attempt("cpu_regex_bomb", "cpu", "import re\nprint(re.match('(a+)+$', 'a' * 60 + 'b'))",
            "stopped"),
    Attempt("cpu_tool_call_loop", "cpu",
            "while True:\n    ctx_stats(ref='%%a_key%%')", "stopped"),
    Attempt("cpu_recursion_bomb", "cpu",
            "import sys\nsys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1)\nf(0)",
            "stopped"),
    # -- memory ---------------------------------------------------------------------
    Attempt("memory_python_alloc", "memory",
            f"x = bytearray(%%over_mb%% * 2**20)\n{WON}", "memory"),
    Attempt("memory_python_growth", "memory",
            "keep = []\nfor i in range(%%over_mb%% // 8):\n"
            f"    keep.append(bytearray(8 * 2**20))\n{WON}",
            "memory"),
    Attempt("memory_js_heap", "memory",
            "import js\njs.eval('globalThis.keep = []; while (true) globalThis.keep.push("
            f"new Array(1e6).fill(1.5))')\n{WON}", "memory"),
    Attempt("memory_array_buffers", "memory",
            "import js\njs.eval('globalThis.bufs = []; for (let i = 0; i < %%over_mb%% / 16;"
            f" i++) globalThis.bufs.push(new Uint8Array(16 * 2**20).fill(1))')\n{WON}",
            "memory"),
    Attempt("memory_workers", "memory",
            "import js\nsrc = \"const a = new Uint8Array(%%over_mb%% * 2**20).fill(1); "
            "postMessage(a.length)\"\n"
            "r = await js.eval('''(async () => { const ps = []; for (let i = 0; i < 4; i++) {"
            " const w = new Worker('data:application/javascript,' + encodeURIComponent(%r),"
            " {type: 'module'}); ps.push(new Promise((res) => { w.onmessage = (e) => res("
            "e.data); w.onerror = (e) => { e.preventDefault(); res(-1) } })) } return (await"
            " Promise.all(ps)).join(',') })()''' % src)\n"
            "if '-1' not in r.split(','):\n    " + WON, "memory"),
    Attempt("thread_bomb", "memory",
            "import threading\nfor i in range(10000):\n"
            "    threading.Thread(target=lambda: None).start()\n" + WON),
    # -- the host protocol ----------------------------------------------------------
    Attempt("output_flood", "protocol", "print('x' * ((%%out_mb%% + 1) * 2**20))", "stopped"),
    Attempt("stderr_flood", "protocol",
            "import js\njs.eval('for (let i = 0; i < 2000; i++) console.error(\"x\".repeat("
            "1000))')\nprint('done')"),
    Attempt("stdout_noise_lines", "protocol",
            "import js\njs.eval('for (let i = 0; i < 500; i++) console.log(\"noise \" + i)')"),
    Attempt("forged_protocol_error", "protocol",
            "import js\njs.console.log('{\"jsonrpc\": \"2.0\", \"error\": {\"code\": -32700,"
            " \"message\": \"forged\"}, \"id\": null}')"),
    Attempt("unencodable_exception_args", "protocol",
            "raise ValueError(b'bytes', {1, 2}, float('nan'))", "survives"),
    Attempt("big_int_result", "protocol", "2**80", "survives"),
    Attempt("timer_left_running", "protocol",
            "import js\njs.eval('setInterval(() => {}, 100)')\nprint('timer set')",
            "shutdown"),
    # -- other tenants through the tool bridge ----------------------------------------
    Attempt("tenant_hidden_user_id", "tenant",
            "print(mem_search(query='vault code', user_id='%%b_user%%'))"),
    Attempt("tenant_binding_kwarg", "tenant",
            "print(mem_get(ids=['%%b_item%%'], b={'user_id': '%%b_user%%'}))"),
    Attempt("tenant_foreign_ids", "tenant",
            "for call in (lambda: mem_get(ids=['%%b_item%%', '%%b_turn%%']),\n"
            "             lambda: mem_quote(id='%%b_item%%'),\n"
            "             lambda: mem_quote(id='%%b_turn%%', max_chars=1000)):\n"
            "    try:\n        print(call())\n    except Exception as e:\n        print(e)"),
    Attempt("tenant_foreign_blob", "tenant",
            "for call in (lambda: ctx_slice(ref='%%b_key%%', start=0, end=500),\n"
            "             lambda: ctx_find(ref={'key': '%%b_key%%', 'user_id': '%%b_user%%'},"
            " pattern='code'),\n"
            "             lambda: ctx_stats(ref='%%b_key%%'),\n"
            "             lambda: ctx_peek(ref='../%%b_user%%/%%b_key%%')):\n"
            "    try:\n        print(call())\n    except Exception as e:\n        print(e)"),
    Attempt("tenant_search_own_tools", "tenant",
            "print(mem_search(query='vault code'))\nprint(mem_search(query='%%b_user%% Bea'))\n"
            "print(mem_search(query='vault', kind='turn'))"),
    Attempt("tenant_injection_strings", "tenant",
            "for call in (lambda: mem_search(query=\"vault' OR user_id='%%b_user%%' --\"),\n"
            "             lambda: mem_search(query='vault code', role=\"Bea' OR 1=1 --\"),\n"
            "             lambda: mem_search(query='vault OR code OR *'),\n"
            "             lambda: ctx_find(ref=\"%%b_key%%' OR '1'='1\", pattern='code'),\n"
            "             lambda: mem_get(ids=[\"%%b_item%%' OR '1'='1\"])):\n"
            "    try:\n        print(call())\n    except Exception as e:\n        print(e)"),
    Attempt("tenant_cross_write", "tenant",
            "for call in (lambda: mem_add(text='written for B', user_id='%%b_user%%'),\n"
            "             lambda: event_log(obj={'user_id': '%%b_user%%', 'text': 'for B'},"
            " user_id='%%b_user%%'),\n"
            "             lambda: event_log(obj={'user_id': '%%b_user%%', 'text': 'for B'})):\n"
            "    try:\n        print(call())\n    except Exception as e:\n        print(e)"),
    Attempt("tenant_raw_bridge", "tenant",
            "import json\nfrom pyodide.ffi import run_sync\n"
            "for name in ('mem_get', 'rlm_mem_get'):\n"
            "    r = run_sync(_js_tool_call(name, json.dumps({'kwargs': {'ids': ['%%b_item%%'],"
            " 'user_id': '%%b_user%%', 'b': None}})))\n"
            "    print(r.to_py() if hasattr(r, 'to_py') else r)"),
    Attempt("tenant_unknown_tools", "tenant",
            "import json\nfrom pyodide.ffi import run_sync\n"
            "for name in ('__init__', 'binding', 'bind', '__class__', 'tools', "
            "'mem_search.__globals__'):\n"
            "    r = run_sync(_js_tool_call(name, json.dumps({'kwargs': {}})))\n"
            "    print(r.to_py() if hasattr(r, 'to_py') else r)"),
    Attempt("tenant_forged_tool_call", "tenant",
            "import js, json\njs.console.log(json.dumps({'jsonrpc': '2.0', 'method': "
            "'tool_call', 'id': 'forged-1', 'params': {'name': 'mem_get', 'kwargs': {'ids': "
            "['%%b_item%%'], 'user_id': '%%b_user%%'}}}))\nprint('sent')"),
    Attempt("tenant_rlm_wrapped_tools", "tenant",
            "for call in (lambda: rlm_mem_get(ids=['%%b_item%%']),\n"
            "             lambda: rlm_mem_search(query='vault code'),\n"
            "             lambda: rlm_ctx_slice(ref='%%b_key%%', start=0, end=200)):\n"
            "    try:\n        print(call())\n    except Exception as e:\n        print(e)"),
)
"""Every kind of attempt; the quick slice runs each once."""


# -- what the host plants and watches --------------------------------------------------


class _Listener:
    """A TCP and a UDP socket on 127.0.0.1 that count whatever reaches them."""

    def __init__(self) -> None:
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        self.port, self.udp_port = self.tcp.getsockname()[1], self.udp.getsockname()[1]
        self.connections = 0
        self.datagrams = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            conn.close()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self.udp.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            self.datagrams += 1

    def seen(self) -> int:
        """Connections and datagrams so far."""
        return self.connections + self.datagrams

    def close(self) -> None:
        """Stop listening."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self.tcp.close()
        self.udp.close()


@dataclass
class Tenants:
    """Tenant A (whose tools the sandbox gets) and tenant B (whose data it must not reach),
    in one store."""

    store: Any
    marker: str
    b_item: str
    b_turn: str
    b_key: str = "vault"
    a_key: str = "notes"

    def b_state(self) -> str:
        """A digest of everything tenant B has (rows, ids, times, events)."""
        pointer = self.store.state_pointer(TENANT_B)
        events = self.store.runs.events(TENANT_B, limit=1000)
        return f"{pointer['digest']}:{len(events)}"


def plant_tenants(path: Path, marker: str) -> Tenants:
    """A store with tenant A's harmless data and tenant B's ``marker`` in a turn, an item,
    a blob and an event."""
    from datetime import datetime

    from memstrata.memory import SemanticItem, Store, Turn

    store = Store.open(path, embedder=None)
    turns = store.add_turns([
        Turn(user_id=TENANT_A, conversation_id="c", session_id="s", turn_id="D1:1", seq=1,
             speaker="Ann", text="I cycle to the harbour at sunset.",
             event_time=datetime(2024, 5, 1)),
        Turn(user_id=TENANT_B, conversation_id="c", session_id="s", turn_id="D1:1", seq=1,
             speaker="Bea", text=f"The vault code is {marker}.",
             event_time=datetime(2024, 5, 1))])
    store.add(SemanticItem(user_id=TENANT_A, text="Ann's bike is blue.", title="bike"))
    b_item = store.add(SemanticItem(user_id=TENANT_B, text=f"Bea's vault code is {marker}.",
                                    title="vault code"))
    store.blobs.put(TENANT_A, "notes", "Ann: groceries, harbour, bike repair.\n")
    store.blobs.put(TENANT_B, "vault", f"vault code {marker}\n")
    store.runs.log_event(TENANT_B, {"type": "note", "text": f"vault code {marker}"})
    return Tenants(store=store, marker=marker, b_item=b_item, b_turn=turns[1])


def _rlm_style(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as RLM hands a user tool to its interpreter (through ``dspy.Tool``)."""
    import dspy

    tool = dspy.Tool(fn)

    def invoke(**kwargs: Any) -> Any:
        return tool(**kwargs)

    functools.update_wrapper(invoke, fn)
    invoke.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    invoke.__name__ = f"rlm_{fn.__name__}"
    return invoke


def capturing(fn: Callable[..., Any], sink: list[str], name: str | None = None
              ) -> Callable[..., Any]:
    """``fn`` with its signature, keeping the text of every result and error in ``sink``
    (what crossed into the sandbox, checked for tenant B's marker)."""

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            sink.append(str(exc))
            raise
        sink.append(repr(result))
        return result

    if name:
        tool.__name__ = name
    return tool


def _file_state(root: Path) -> dict[str, tuple[str, int]]:
    """(sha256, mode) of every file under ``root``."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                       p.stat().st_mode)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc; none where there is no /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _rss_kb(pid: int | str = "self", key: str = "VmRSS") -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    # Writing 5 to clear_refs resets VmHWM (Linux), so each attempt's peak is its own.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


@dataclass
class Probe:
    """Everything an escape would reach, planted under ``work``, and how to tell."""

    work: Path
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    host_marker: str = field(default_factory=lambda: f"HOSTMARK-{secrets.token_hex(12)}")
    env_marker: str = field(default_factory=lambda: f"ENVMARK-{secrets.token_hex(12)}")
    tenant_marker: str = field(default_factory=lambda: f"TENANTB-{secrets.token_hex(12)}")
    over_mb: int = 768
    out_mb: int = 8
    pyodide_pkg: Path | None = None
    captured: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.hostdir = self.work / "host"
        self.hostdir.mkdir(parents=True, exist_ok=True)
        self.secret = self.hostdir / f"secret-{self.token}.txt"
        self.victim = self.hostdir / "victim.txt"
        self.newfile = self.hostdir / "escaped.txt"
        self.tmpfile = Path("/tmp") / f"memstrata-escape-{self.token}.txt"
        self.spawn = self.work / f"spawned-{self.token}"
        self.reset()
        self.listener = _Listener()
        self.tenants = plant_tenants(self.work / "tenants.db", self.tenant_marker)
        self.secrets_shown = {"host file": self.host_marker, "environment": self.env_marker,
                              "tenant B": self.tenant_marker}
        passwd = Path("/etc/passwd")
        with contextlib.suppress(OSError, IndexError):
            self.secrets_shown["/etc/passwd"] = passwd.read_text().splitlines()[0]
        if self.pyodide_pkg is not None:
            lines = self.pyodide_pkg.read_text().splitlines()
            self.secrets_shown["Pyodide folder"] = max(lines, key=len).strip()

    def values(self) -> dict[str, str]:
        """The ``%%name%%`` fields' values (paths, ports, ids: never a marker)."""
        t = self.tenants
        return {"secret": str(self.secret), "secret_name": self.secret.name,
                "hostdir": str(self.hostdir), "victim": str(self.victim),
                "newfile": str(self.newfile), "tmpfile": str(self.tmpfile),
                "spawn": str(self.spawn), "env": ENV_NAME,
                "port": str(self.listener.port), "udp_port": str(self.listener.udp_port),
                "pyodide_pkg": str(self.pyodide_pkg or "/nonexistent/package.json"),
                "over_mb": str(self.over_mb), "out_mb": str(self.out_mb),
                "b_user": TENANT_B, "b_item": t.b_item, "b_turn": t.b_turn, "b_key": t.b_key,
                "a_key": t.a_key}

    def fill(self, code: str) -> str:
        """``code`` with its ``%%name%%`` fields filled."""
        values = self.values()

        def one(match: re.Match[str]) -> str:
            return values[match.group(1)]

        return re.sub(r"%%(\w+)%%", one, code)

    def tools(self, tools: list[Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """``tools`` as the sandbox gets them (by name, and RLM's way as ``rlm_NAME``),
        each capturing what it hands back."""
        named = {t.__name__: capturing(t, self.captured) for t in tools}
        named.update({f"rlm_{t.__name__}": capturing(_rlm_style(t), self.captured,
                                                     f"rlm_{t.__name__}") for t in tools})
        return named

    def snapshot(self) -> dict[str, Any]:
        """The host state an attempt must leave as it is."""
        return {"files": _file_state(self.hostdir),
                "outside": [p.exists() for p in (self.tmpfile, self.spawn)],
                "listener": self.listener.seen(), "tenant_b": self.tenants.b_state(),
                "captured": len(self.captured)}

    def reset(self) -> None:
        """Put the host files back as planted, so that an escape is counted once, by the
        attempt that made it, and the next attempt starts clean."""
        for path in (self.newfile, self.tmpfile, self.spawn):
            with contextlib.suppress(OSError):
                path.unlink()
        for path, text in ((self.secret, f"the host's secret is {self.host_marker}\n"),
                           (self.victim, "leave me alone\n")):
            path.write_text(text)
            path.chmod(0o644)

    def close(self) -> None:
        """Stop the listener, close the store, remove anything outside ``work``."""
        self.listener.close()
        self.tenants.store.close()
        with contextlib.suppress(OSError):
            self.tmpfile.unlink()


# -- running and judging ----------------------------------------------------------------


@dataclass
class Outcome:
    """What one attempt did."""

    output: str = ""
    error: str | None = None
    error_type: str | None = None
    seconds: float = 0.0
    hung: bool = False
    recorded: bool = True
    stopped_kind: str | None = None
    shutdown_s: float | None = None
    shutdown_hung: bool = False
    children: list[int] = field(default_factory=list)
    host_growth_mb: float = 0.0
    sandbox_peak_mb: float = 0.0


def judge(probe: Probe, attempt: Attempt, outcome: Outcome, before: dict[str, Any],
          time_s: float, grace_s: float = GRACE_S
          ) -> list[tuple[str | None, str, dict[str, Any]]]:
    """The promises this attempt broke, as (headline counter or None, what, detail);
    empty when none."""
    broken: list[tuple[str | None, str, dict[str, Any]]] = []
    after = probe.snapshot()
    text = f"{outcome.output}\n{outcome.error or ''}"
    crossed = "\n".join(probe.captured[before["captured"]:])
    for what, secret in probe.secrets_shown.items():
        if secret and (secret in text or secret in crossed):
            broken.append(("escapes", f"the {what} marker came back to the sandbox",
                           {"where": "a tool result" if secret in crossed else "the output"}))
    if f"ESCAPED:{probe.token}" in text:
        broken.append(("escapes", "the attempt reported success", {"output": text[:300]}))
    if after["files"] != before["files"]:
        changed = sorted(set(after["files"]) ^ set(before["files"]) | {
            k for k in after["files"] if before["files"].get(k) != after["files"][k]})
        broken.append(("escapes", "a host file changed", {"files": changed}))
    if after["outside"] != before["outside"]:
        broken.append(("escapes", "a file appeared outside the sandbox",
                       {"paths": [str(probe.tmpfile), str(probe.spawn)]}))
    if after["listener"] != before["listener"]:
        broken.append(("escapes", "the host's listener saw a connection",
                       {"seen": after["listener"] - before["listener"]}))
    if outcome.children:
        broken.append(("escapes", "the sandbox spawned a process",
                       {"children": outcome.children}))
    if after["tenant_b"] != before["tenant_b"]:
        broken.append(("escapes", "tenant B's data changed", {}))
    if outcome.hung:
        broken.append(("escapes", "the host hung: the step never returned",
                       {"seconds": outcome.seconds}))
    if outcome.shutdown_hung:
        broken.append(("escapes", "the host hung: shutdown never returned", {}))
    if outcome.host_growth_mb > HOST_GROWTH_MB:
        broken.append(("escapes", "the host's own memory grew",
                       {"mb": round(outcome.host_growth_mb)}))
    if not outcome.recorded:
        broken.append(("crashes", f"the step raised {outcome.error_type}, which ends an "
                       "executor's run instead of being recorded", {"error": outcome.error}))
    if attempt.expect in ("stopped", "memory") and not outcome.hung:
        if outcome.error is None:
            broken.append(("escapes", f"a {attempt.group}-bound step ran to its end "
                           "without being stopped", {"output": outcome.output[:200]}))
        elif outcome.seconds > time_s + grace_s:
            broken.append(("escapes", "the step was stopped only after its limit",
                           {"seconds": outcome.seconds, "limit_s": time_s}))
    if attempt.expect == "survives" and outcome.stopped_kind is not None:
        broken.append((None, "an ordinary error ended the sandbox",
                       {"stopped": outcome.stopped_kind, "error": outcome.error}))
    return broken


class _Slot:
    """One interpreter and the one thread that uses it (DSPy's interpreter belongs to the
    thread that first runs code in it)."""

    def __init__(self, make: Callable[[], Any], tools: dict[str, Callable[..., Any]]) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="escape-slot")
        self.interp = make()
        self.interp.tools.update(tools)
        start = getattr(self.interp, "start", None)
        self.started = self.pool.submit(start) if start is not None else None

    @property
    def lost(self) -> bool:
        """Whether its sandbox is restarting (then the other slot goes on)."""
        return bool(getattr(self.interp, "_lost", False))

    def process(self) -> Any:
        return getattr(self.interp, "deno_process", None)

    def abandon(self) -> None:
        """Kill its process (a hung thread then returns) and let the thread go."""
        process = self.process()
        if process is not None:
            with contextlib.suppress(OSError):
                process.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def close(self, timeout_s: float) -> bool:
        """Shut the interpreter down; whether it returned in time."""
        try:
            self.pool.submit(self.interp.shutdown).result(timeout=timeout_s)
        except FutureTimeout:
            self.abandon()
            return False
        except Exception:  # a failing shutdown is no hang; the process is killed below
            self.abandon()
            return True
        self.pool.shutdown(wait=True)
        return True


class Harness:
    """Runs attempts on two alternating interpreters from ``make`` and judges each."""

    def __init__(self, make: Callable[[], Any], probe: Probe, tools: dict[str, Any], *,
                 time_s: float, wall_s: float, shutdown_s: float, start_s: float = 60.0,
                 grace_s: float = GRACE_S) -> None:
        self.make, self.probe, self.tools = make, probe, tools
        self.time_s, self.wall_s, self.shutdown_s = time_s, wall_s, shutdown_s
        self.start_s, self.grace_s = start_s, grace_s
        self.slots = [_Slot(make, tools), _Slot(make, tools)]
        self.used = list(self.slots)
        self.current = 0
        self.sandbox_peak_mb = 0.0

    def _slot(self) -> _Slot:
        slot = self.slots[self.current]
        if slot.lost:
            self.current = 1 - self.current
            slot = self.slots[self.current]
        return slot

    def run(self, attempt: Attempt) -> Outcome:
        """Run one attempt and gather what it did."""
        from dspy.primitives.code_interpreter import CodeInterpreterError

        slot = self._slot()
        code = self.probe.fill(attempt.code)
        outcome = Outcome()
        if not self._ready(slot):
            outcome.hung = True
            self._replace(slot)
            return outcome
        _reset_peak()
        host_before = _rss_kb()
        incidents = len(getattr(slot.interp, "incidents", []))
        started = time.monotonic()
        future = slot.pool.submit(slot.interp.execute, code, {"TOKEN": self.probe.token})
        try:
            result = future.result(timeout=max(self.time_s, self.wall_s) + self.grace_s)
            outcome.output = "" if result is None else str(result)
        except FutureTimeout:
            outcome.hung = True
        except (CodeInterpreterError, SyntaxError) as exc:
            outcome.error, outcome.error_type = str(exc), type(exc).__name__
            outcome.stopped_kind = getattr(exc, "kind", None)
        except Exception as exc:  # what an executor would not record: judged a crash
            outcome.error, outcome.error_type = str(exc), type(exc).__name__
            outcome.recorded = False
        outcome.seconds = round(time.monotonic() - started, 3)
        new = getattr(slot.interp, "incidents", [])[incidents:]
        if new and outcome.stopped_kind is None:
            outcome.stopped_kind = new[-1]["kind"]
        process = slot.process()
        if process is not None and process.poll() is None:
            outcome.children = _children(process.pid)
            self.sandbox_peak_mb = max(self.sandbox_peak_mb,
                                       _rss_kb(process.pid, "VmHWM") / 1024)
        outcome.host_growth_mb = (_rss_kb("self", "VmHWM") - host_before) / 1024
        if outcome.hung:
            self._replace(slot)
        elif attempt.expect == "shutdown":
            t0 = time.monotonic()
            outcome.shutdown_hung = not slot.close(self.shutdown_s + self.grace_s)
            outcome.shutdown_s = round(time.monotonic() - t0, 3)
            self._renew(slot)
        return outcome

    def _ready(self, slot: _Slot) -> bool:
        """Wait for the slot's interpreter to be started or restarted (not part of an
        attempt's time); whether it was, within ``start_s`` and the grace."""
        waits = [slot.started] if slot.started is not None else []
        restarted = getattr(slot.interp, "wait_restarted", None)
        if restarted is not None:
            waits.append(slot.pool.submit(restarted))
        try:
            for wait in waits:
                wait.result(timeout=self.start_s + self.grace_s)
        except FutureTimeout:
            return False
        except Exception:  # a failed start shows on the attempt's own execute
            return True
        return True

    def _replace(self, slot: _Slot) -> None:
        """Abandon a hung slot for a fresh one."""
        slot.abandon()
        self._renew(slot)

    def _renew(self, slot: _Slot) -> None:
        fresh = _Slot(self.make, self.tools)
        self.slots[self.slots.index(slot)] = fresh
        self.used.append(fresh)

    def close(self) -> None:
        """Shut both interpreters down."""
        for slot in self.slots:
            slot.close(self.shutdown_s + self.grace_s)


@contextlib.contextmanager
def _planted_env(value: str) -> Iterator[None]:
    """``ENV_NAME`` set to ``value`` in the host's environment (the sandbox's parent)."""
    old = os.environ.get(ENV_NAME)
    os.environ[ENV_NAME] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_NAME, None)
        else:
            os.environ[ENV_NAME] = old


def run_attempts(ctx: Context, make: Callable[[Probe], Callable[[], Any]],
                 attempts: tuple[Attempt, ...] = ATTEMPTS, *, rounds: int = 1,
                 time_s: float = 2.0, wall_s: float = 5.0, shutdown_s: float = 2.0,
                 start_s: float = 60.0, grace_s: float = GRACE_S, over_mb: int = 768,
                 out_mb: int = 8, pyodide_pkg: Path | None = None, tools_for: str = TENANT_A,
                 name: str = "sandbox_escape") -> Scenario:
    """Run ``attempts`` (``rounds`` times, shuffled after the first) and judge each.

    ``make(probe)`` returns the interpreter factory; the interpreters get the memory
    tools of ``tools_for`` (tenant A; capturing what they return). Tests pass a
    deliberately unsafe factory, or tenant B's tools, and see the escapes counted.
    """
    from memstrata.tools import ToolSession

    result = Scenario(name=name)
    probe = Probe(ctx.work, over_mb=over_mb, out_mb=out_mb, pyodide_pkg=pyodide_pkg)
    outcomes: dict[str, str] = {}
    stops: Counter[str] = Counter()
    stop_latency: list[float] = []
    started = time.monotonic()
    seen = 0
    try:
        with _planted_env(probe.env_marker):
            session = ToolSession(probe.tenants.store, tools_for)
            tools = probe.tools(session.handle_tools())
            t0 = time.monotonic()
            harness = Harness(make(probe), probe, tools, time_s=time_s, wall_s=wall_s,
                              shutdown_s=shutdown_s, start_s=start_s, grace_s=grace_s)
            try:
                first = harness.slots[0].started  # the second one starts meanwhile
                if first is not None:
                    first.result()
                result.figures["start_s"] = round(time.monotonic() - t0, 2)
                rng = random.Random(ctx.seed)
                for round_no in range(rounds):
                    order = _order(attempts, rng, shuffle=round_no > 0)
                    for attempt in order:
                        if ctx.expired():
                            result.stopped_early = True
                            break
                        before = probe.snapshot()
                        outcome = harness.run(attempt)
                        result.attempts += 1
                        if outcome.stopped_kind:
                            stops[outcome.stopped_kind] += 1
                        if attempt.expect == "stopped" and outcome.error is not None:
                            stop_latency.append(outcome.seconds)
                        broken = judge(probe, attempt, outcome, before, time_s, grace_s)
                        for counter, what, detail in broken:
                            result.fail(counter, what, kind=attempt.kind, group=attempt.group,
                                        **detail)
                        if broken:
                            probe.reset()
                        seen = probe.listener.seen()
                        outcomes[attempt.kind] = _summary(outcome, broken)
                    if result.stopped_early:
                        break
            finally:
                harness.close()
                time.sleep(0.5)  # a connection still on its way is counted too
                if probe.listener.seen() > seen:
                    result.fail("escapes", "the host's listener saw a connection after the "
                                "attempts", seen=probe.listener.seen() - seen)
                result.figures["sandbox_peak_mb"] = round(harness.sandbox_peak_mb, 1)
                result.figures["interpreters"] = len(harness.used)
                result.figures["restarts"] = sum(getattr(s.interp, "restarts", 0)
                                                 for s in harness.used)
    finally:
        probe.close()
    result.figures.update({
        "kinds": len({a.kind for a in attempts}), "kinds_run": len(outcomes),
        "rounds": rounds, "groups": dict(Counter(a.group for a in attempts)),
        "stops": dict(stops), "time_limit_s": time_s,
        "slowest_stop_s": max(stop_latency, default=0.0),
        "seconds_per_attempt": round((time.monotonic() - started) / max(result.attempts, 1), 3),
        "outcomes": outcomes})
    return result


def _order(attempts: tuple[Attempt, ...], rng: random.Random, *, shuffle: bool
           ) -> list[Attempt]:
    """The attempts to run: the ones that leave the sandbox running first (cheap, while
    the second interpreter starts), then those that end it (each costs a restart), each
    part shuffled after the first round."""
    stays = [a for a in attempts if a.expect == "blocked" and a.group != "protocol"]
    ends = [a for a in attempts if a not in stays]
    if shuffle:
        rng.shuffle(stays)
        rng.shuffle(ends)
    return stays + ends


def _summary(outcome: Outcome, broken: list[tuple[str | None, str, dict[str, Any]]]) -> str:
    """One line: how an attempt ended (for ``figures["outcomes"]``)."""
    if broken:
        return "BROKEN: " + "; ".join(what for _, what, _ in broken)
    if outcome.hung:
        return "hung"
    if outcome.error is not None:
        stop = f"stopped ({outcome.stopped_kind}), " if outcome.stopped_kind else ""
        first = outcome.error.splitlines()[0] if outcome.error else ""
        return f"blocked: {stop}{outcome.error_type}: {first[:160]}"
    return f"blocked: ran, nothing reached ({outcome.output.strip()[:120]!r})"


def run(ctx: Context) -> Scenario:
    """Every kind of escape attempt against the real sandbox (see the module)."""
    from memstrata.memory.extras import MissingExtraError
    from memstrata.programs.sandbox import (
        SandboxError,
        SandboxLimits,
        sandbox_factory,
        sandbox_paths,
    )

    limits = SandboxLimits(time_s=2.0, wall_s=5.0, memory_mb=1024, shutdown_s=2.0,
                           output_mb=8, start_s=60.0, max_restarts=100_000)
    try:
        sandbox_factory(limits=limits)  # raises when Pyodide or Deno is missing
        package = sandbox_paths().package / "package.json"
    except (SandboxError, MissingExtraError) as exc:
        result = Scenario(name="sandbox_escape")
        result.fail(None, "the sandbox is not installed, so no escape attempt ran: install "
                    "it with `pip install -e '.[sandbox]'` and `memstrata sandbox install` "
                    f"({str(exc)[:200]})")
        result.figures["skipped"] = True
        return result

    def make(probe: Probe) -> Callable[[], Any]:
        return sandbox_factory(limits=limits)

    return run_attempts(ctx, make, rounds=ctx.sized(1, 3), time_s=limits.time_s,
                        wall_s=limits.wall_s, shutdown_s=limits.shutdown_s,
                        start_s=limits.start_s,
                        over_mb=limits.memory_mb + 256, out_mb=limits.output_mb,
                        pyodide_pkg=package)


SCENARIOS = {"sandbox_escape": run}
