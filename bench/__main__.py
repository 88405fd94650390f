"""``python -m bench NAME [--record] [options]``: run one benchmark, or ``all`` of them.

A benchmark is any module of this package whose name does not start with ``_`` and
that defines ``main()`` (a coroutine function or a plain one) parsing its own options
from ``sys.argv``. A new file needs no registration. Modules starting with ``_`` are
helper processes (the receiver, the load generator); ``common`` has no ``main``.
Figures are printed; ``--record`` also writes them into docs/operations/benchmarks.md
(or reliability.md), with the command that produced them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from bench import common
from hookrelay.service.server.event_loop import run as run_loop
from tests.harness.procs import ROOT

# The order of ``all``: the quick ones first, the soak last. Others follow by name.
ORDER = ("e2e", "latency", "api", "scale", "backlog", "vacuum", "upgrade", "soak")


def benchmarks() -> dict[str, Callable[[], Any]]:
    """Every benchmark module's ``main``, by module name, in the order ``all`` runs them."""
    found: dict[str, Callable[[], Any]] = {}
    for info in pkgutil.iter_modules([str(ROOT / "bench")]):
        if info.name.startswith("_"):
            continue
        main = getattr(importlib.import_module(f"bench.{info.name}"), "main", None)
        if callable(main):
            found[info.name] = main
    rank = {name: i for i, name in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda kv: (rank.get(kv[0], len(ORDER)), kv[0])))


def usage(found: dict[str, Callable[[], Any]]) -> str:
    lines = ["usage: python -m bench NAME|all [--record] [options]", "", "benchmarks:"]
    for name, main in found.items():
        doc = (sys.modules[main.__module__].__doc__ or "").strip().splitlines()
        lines.append(f"  {name:<10} {doc[0] if doc else ''}")
    lines += ["", "python -m bench NAME --help lists the options of one benchmark."]
    return "\n".join(lines)


def run_all(names: list[str], record: bool) -> int:
    """Each benchmark with its defaults, in its own process; 1 if any failed."""
    failed = []
    for name in names:
        print(f"== python -m bench {name}", flush=True)
        argv = [sys.executable, "-m", "bench", name, *(["--record"] if record else [])]
        if subprocess.run(argv, cwd=ROOT).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    found = benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(found))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    record = "--record" in rest
    rest = [a for a in rest if a != "--record"]
    if name == "all":
        return run_all(list(found), record)
    if name not in found:
        print(f"unknown benchmark {name!r}\n\n{usage(found)}", file=sys.stderr)
        return 2
    common.RECORDING = record
    sys.argv = [f"python -m bench {name}", *rest]
    result = found[name]()
    if inspect.iscoroutine(result):
        # On uvloop, as hookrelay's own processes run (hookrelay.service.server.event_loop.run): a
        # yardstick in the bench process, like the bare aiohttp client, is then
        # measured on the same kind of loop as what it is compared with.
        run_loop(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
