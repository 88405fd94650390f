"""Hosts as Linux network namespaces on this machine, wired by veth pairs to two switches.

Each host is a namespace with a veth on the database network, the edge network, or both.
Both networks are /24s of 198.18.0.0/15, the range RFC 2544 sets aside for benchmark
networks; the /24s are picked per run so two runs on one machine never meet. The
switches are bridges in a namespace of their own, and the machine's own namespace joins
both as the control host (the benchmark or test that drives the cluster). No namespace
has a default route: a host reaches the addresses on its links and nothing beyond them.

Names start with ``hrc<pid>-``, so a run killed before its clean-up is recognised and
cleared by the next one (:func:`clear_stale`). Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

Net = Literal["db", "edge"]
# The two networks' /24s are 198.18.N.0/24 and 198.19.N.0/24 for one N per run.
FIRST_OCTETS: dict[Net, str] = {"db": "198.18", "edge": "198.19"}
CONTROL = 254  # the control host's last octet on both networks
PREFIX = "hrc"
_OURS = re.compile(rf"^{PREFIX}(\d+)-")


class Unavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no iproute2, no veth)."""


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed"
    return None


def namespace_pids(ns: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in done.stdout.split()]


def kill_namespace(ns: str, timeout: float = 30.0) -> int:
    """SIGKILL every process in ``ns`` (as a host losing power would); how many there were."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while pids := namespace_pids(ns):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes in {ns} outlived SIGKILL: {pids}")
        time.sleep(0.02)
    return len(killed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clear_stale() -> list[str]:
    """Remove the namespaces of earlier runs whose process is gone; their names."""
    cleared = []
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        m = _OURS.match(name)
        if m and not _alive(int(m.group(1))):
            kill_namespace(name)
            ip("netns", "del", name, check=False)
            cleared.append(name)
    return cleared


def _taken_subnets() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    routes = json.loads(ip("-j", "-4", "route", "show", "table", "all") or "[]")
    taken = set()
    for r in routes:
        with contextlib.suppress(ValueError):
            if r.get("dst") not in (None, "default"):
                taken.add(ipaddress.ip_network(r["dst"], strict=False))
    return taken


def _free_third_octet() -> int:
    taken = _taken_subnets()
    for _ in range(1000):
        n = secrets.randbelow(256)
        nets = [ipaddress.ip_network(f"{first}.{n}.0/24") for first in FIRST_OCTETS.values()]
        if not any(a.overlaps(b) for a in nets for b in taken):
            return n
    raise Unavailable("no free /24 left in 198.18.0.0/15 on this machine")


@dataclass(frozen=True)
class Host:
    """One namespace and its addresses (None on a network it is not on)."""

    name: str
    ns: str
    db: str | None
    edge: str | None

    def address(self, net: Net) -> str:
        addr = self.db if net == "db" else self.edge
        if addr is None:
            raise ValueError(f"{self.name} is not on the {net} network")
        return addr


@dataclass
class Network:
    """The switches, the control host's links and the hosts; :meth:`close` removes all."""

    prefix: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}-{secrets.token_hex(2)}")
    third: int = -1
    hosts: dict[str, Host] = field(default_factory=dict)
    _tag: str = field(default_factory=lambda: secrets.token_hex(3))

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def subnet(self, net: Net) -> str:
        return f"{FIRST_OCTETS[net]}.{self.third}.0/24"

    def addr(self, net: Net, last: int) -> str:
        return f"{FIRST_OCTETS[net]}.{self.third}.{last}"

    def control(self, net: Net) -> str:
        return self.addr(net, CONTROL)

    def open(self) -> Network:
        why = unavailable()
        if why:
            raise Unavailable(why)
        clear_stale()
        self.third = _free_third_octet()
        ip("netns", "add", self.switch)
        ip("link", "set", "lo", "up", ns=self.switch)
        for net in FIRST_OCTETS:
            ip("link", "add", f"br-{net}", "type", "bridge", ns=self.switch)
            ip("link", "set", f"br-{net}", "up", ns=self.switch)
            # The control host: this namespace, one veth per network.
            mine = f"hr{self._tag}{net[0]}"
            ip(
                "link", "add", mine, "type", "veth", "peer", "name", f"ctl-{net}",
                "netns", self.switch,
            )  # fmt: skip
            ip("link", "set", f"ctl-{net}", "master", f"br-{net}", "up", ns=self.switch)
            ip("addr", "add", f"{self.control(net)}/24", "dev", mine)
            ip("link", "set", mine, "up")
        return self

    def add_host(self, name: str, last: int, nets: Sequence[Net]) -> Host:
        """A namespace ``name`` at ``.last`` on each of ``nets``."""
        ns = f"{self.prefix}-{name}"
        ip("netns", "add", ns)
        ip("link", "set", "lo", "up", ns=ns)
        for net in nets:
            inside, port = f"{net}0", f"{name}-{net}"[:15]
            ip(
                "link", "add", inside, "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.switch,
            )  # fmt: skip
            ip("link", "set", port, "master", f"br-{net}", "up", ns=self.switch)
            ip("addr", "add", f"{self.addr(net, last)}/24", "dev", inside, ns=ns)
            ip("link", "set", inside, "up", ns=ns)
        host = Host(
            name,
            ns,
            self.addr("db", last) if "db" in nets else None,
            self.addr("edge", last) if "edge" in nets else None,
        )
        self.hosts[name] = host
        return host

    def set_link(self, host: Host, net: Net, *, up: bool) -> None:
        """Cut (or mend) ``host``'s cable to ``net``: its side of the veth goes down."""
        ip("link", "set", f"{net}0", "up" if up else "down", ns=host.ns)

    def argv(self, host: Host, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", host.ns, *argv]

    def kill_host(self, host: Host) -> int:
        """SIGKILL every process of ``host``; how many there were."""
        return kill_namespace(host.ns)

    def close(self) -> None:
        """Kill every process in the namespaces and delete them (their veths go with them)."""
        for ns in [h.ns for h in self.hosts.values()] + [self.switch]:
            with contextlib.suppress(RuntimeError):
                kill_namespace(ns)
            ip("netns", "del", ns, check=False)
        self.hosts.clear()
        for net in FIRST_OCTETS:  # gone with its peer already; this is for a half-built one
            ip("link", "del", f"hr{self._tag}{net[0]}", check=False)


@contextlib.contextmanager
def network() -> Iterator[Network]:
    """A :class:`Network`, removed on exit however the block ends."""
    net = Network()
    try:
        yield net.open()
    finally:
        net.close()
