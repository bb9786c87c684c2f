"""The package's layers hold: every import-linter contract of pyproject.toml is kept, and no
module of memstrata imports itself back through others (function-level and TYPE_CHECKING
imports count).

memstrata's folders (memory/, programs/, ...) sit beside memstrata/ in a checkout, mapped
by ``[tool.setuptools.package-dir]``; import-linter (through grimp) reads a package from one
directory. So the check runs on the checkout laid out as installed (``typecheck.
build_layout``, a folder of links), in a fresh interpreter (this one has imported memstrata
from the checkout).

Run by hand: ``pytest tests/test_import_layers.py``; the failure names each broken contract's
imports and each cycle's chain with its lines.
"""

from __future__ import annotations

import subprocess
import sys

from typecheck import ROOT, build_layout  # the package laid out as installed (symlinks)

CHECK = r'''
import sys

sys.path.insert(0, sys.argv[1])
import grimp
from importlinter.cli import lint_imports

status = lint_imports(config_filename=sys.argv[2], no_cache=True, no_logo=True)
graph = grimp.build_graph("memstrata", cache_dir=None)
edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
index, low, stack, on, found = {}, {}, [], set(), []


def strongly_connected(start):
    # Tarjan's algorithm without recursion: (node, its next edge) frames.
    work = [(start, 0)]
    index[start] = low[start] = len(index)
    stack.append(start)
    on.add(start)
    while work:
        node, n = work.pop()
        if n < len(edges[node]):
            work.append((node, n + 1))
            nxt = edges[node][n]
            if nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, 0))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
            continue
        if work:
            parent = work[-1][0]
            low[parent] = min(low[parent], low[node])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))


def chain(group):
    # The shortest way from the group's first module back to it, inside the group.
    members, first = set(group), group[0]
    paths, seen = [[first]], {first}
    while paths:
        path = paths.pop(0)
        for nxt in edges[path[-1]]:
            if nxt == first:
                return [*path, first]
            if nxt in members and nxt not in seen:
                seen.add(nxt)
                paths.append([*path, nxt])
    return group


for module in sorted(edges):
    if module not in index:
        strongly_connected(module)
for group in found:
    links = chain(group)
    print("CYCLE " + " -> ".join(links))
    for a, b in zip(links, links[1:]):
        for detail in graph.get_import_details(importer=a, imported=b)[:1]:
            print(f"    {a}:{detail['line_number']}: {detail['line_contents']}")
print(f"MODULES {len(edges)}")
sys.exit(status or (1 if found else 0))
'''


def test_the_layer_contracts_hold_and_no_module_imports_itself_back() -> None:
    layout = build_layout()
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(layout), str(ROOT / "pyproject.toml")],
        cwd=layout, capture_output=True, text=True, timeout=120)
    report = done.stdout + done.stderr
    assert "Contracts: " in report and "MODULES" in report, report
    modules = int(report.rsplit("MODULES ", 1)[1].split()[0])
    assert modules > 200, report  # the whole package was read, not memstrata/ alone
    assert done.returncode == 0, report
