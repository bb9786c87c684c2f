"""Take the inspector's screenshots for ``docs/inspector.md`` (``docs/img/inspector-*.png``).

    python docs/gen_screenshots.py                 # rewrite every screenshot
    python docs/gen_screenshots.py --chromium PATH # another Chromium than /usr/bin/chromium

Builds the demo memory (``memstrata.inspector.demo``) in a temporary folder, serves the
inspector on a loopback port with uvicorn, and photographs each page with headless
Chromium driven by Playwright (the system's Chromium: nothing is downloaded). Needs the
``server`` extra and ``playwright``.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

OUT = Path(__file__).resolve().with_name("img")
VIEWPORT = {"width": 1280, "height": 820}


def _serve(app: object) -> tuple[str, object, threading.Thread, socket.socket]:
    """Serve ``app`` with uvicorn in a thread on a free loopback port; (base URL, server,
    thread, socket)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("uvicorn did not start")
        time.sleep(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread, sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium",
                        help="the Chromium binary to drive (default: chromium on the PATH)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from memstrata.inspector import create_app
    from memstrata.inspector.demo import build_demo

    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        memory = build_demo(Path(tmp) / "demo.db")
        base, server, thread, sock = _serve(create_app(memory))
        store = memory.store
        nurse = next(i for i in store.items("ana", kind="fact") if "nurse" in i.text)
        porto = next(i for i in store.items("ana", kind="fact") if "Porto" in i.text)
        ingest = next(r for r in store.runs.list("ana") if r.program == "ingest")
        shots = {
            "users": "/",
            "user": "/user?u=ana",
            "conversation": "/conversation?u=ana&c=travel",
            "fact": f"/memory?u=ana&id={porto.id}",
            "versions": f"/memory?u=ana&id={nurse.id}",
            "search": "/search?u=ana&q=where+does+the+user+live+now",
            "runs": "/runs?u=ana",
            "run": f"/run?u=ana&id={ingest.id}",
            "jobs": "/jobs",
            "forget": "/forget?u=ben",
        }
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=args.chromium, headless=True)
                page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
                for name, path in shots.items():
                    page.goto(base + path)
                    page.screenshot(path=str(OUT / f"inspector-{name}.png"))
                    print(f"docs/img/inspector-{name}.png  {path}", file=sys.stderr)
                browser.close()
        finally:
            server.should_exit = True  # type: ignore[attr-defined]
            thread.join(timeout=10)
            sock.close()
            memory.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
