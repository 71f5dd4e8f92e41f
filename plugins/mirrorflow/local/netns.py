"""Brokers on their own network address: a Linux network namespace per cluster, joined to ours by a veth pair.

Why: a network cut between the replicator and a cluster can only be staged when the cluster is reached over a
link we can take down; on loopback every connection shares `lo`. Each namespace gets a /30 out of 10.0.0.0/8 (the
root side `.1`, the broker `.2`) and a fallback `unreachable` route for that /30, so while the root side of the
link is down packets to the broker are dropped here instead of leaking to the default gateway. The broker keeps
its own address (its side only loses carrier), as a host behind a pulled cable would.

Needs root (CAP_NET_ADMIN) and iproute2's `ip`. Names carry a random token so parallel runs never clash; an
allocation lock keeps two runs from picking the same /30.
"""

from __future__ import annotations

import ipaddress
import random
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.file_lock import file_lock
from mirrorflow.local import process

_LOCK = Path("/tmp/mirrorflow-netns.lock")
_POOL = ipaddress.IPv4Network("10.0.0.0/8")
_IP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Placement:
    """Where a local broker runs: the address it listens on and advertises, and the prefix of its JVM command."""

    host: str = process.LOOPBACK
    launch_prefix: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkNamespace:
    """One namespace `name`; `link` is the root side of its veth pair, `peer` the side inside it."""

    name: str
    link: str
    peer: str
    subnet: ipaddress.IPv4Network

    @property
    def address(self) -> str:
        """The broker's address (inside the namespace)."""
        return str(self.subnet.network_address + 2)

    @property
    def gateway(self) -> str:
        """Our side of the link."""
        return str(self.subnet.network_address + 1)

    @property
    def placement(self) -> Placement:
        return Placement(self.address, ("ip", "netns", "exec", self.name))

    def cut(self) -> None:
        """Take our side of the link down: packets to the namespace are dropped, open connections stall."""
        _ip("link", "set", self.link, "down")

    def restore(self, timeout_s: float = 10.0) -> None:
        """Bring the link up again and wait until its route to the broker is back."""
        _ip("link", "set", self.link, "up")
        deadline = time.monotonic() + timeout_s
        while f"dev {self.link}" not in _ip("route", "get", self.address, check=False):
            if time.monotonic() > deadline:
                raise MirrorflowError(f"the link {self.link} to namespace {self.name} did not come back up")
            time.sleep(0.1)

    def delete(self) -> None:
        """Remove the namespace, both ends of the link and the fallback route; missing parts are fine."""
        _ip("netns", "delete", self.name, check=False)
        _ip("link", "delete", self.link, check=False)
        _ip("route", "delete", "unreachable", str(self.subnet), check=False)


def require_netns() -> None:
    """Raise, saying what is missing, unless this process may create network namespaces."""
    if shutil.which("ip") is None:
        raise MirrorflowError("network-namespace tests need iproute2's `ip` on PATH (apt-get install iproute2)")
    probe = f"mf-probe-{secrets.token_hex(4)}"
    try:
        _ip("netns", "add", probe)
    except MirrorflowError as err:
        raise MirrorflowError(
            f"cannot create a network namespace here ({err}); these tests need root or CAP_NET_ADMIN/"
            "CAP_SYS_ADMIN (in a container: --cap-add NET_ADMIN --cap-add SYS_ADMIN, or --privileged)"
        ) from None
    finally:
        _ip("netns", "delete", probe, check=False)


def pick_subnet(taken: Iterable[ipaddress.IPv4Network], rng: random.Random) -> ipaddress.IPv4Network:
    """A random /30 of 10.0.0.0/8 overlapping none of `taken` (addresses and routes already in use)."""
    used = [net for net in taken if net.prefixlen > 0]  # a default route overlaps everything
    for _ in range(1000):
        base = int(_POOL.network_address) + 4 * rng.randrange(1, _POOL.num_addresses // 4 - 1)
        subnet = ipaddress.IPv4Network((base, 30))
        if not any(subnet.overlaps(net) for net in used):
            return subnet
    raise MirrorflowError("no free /30 left in 10.0.0.0/8 for a test network namespace")


def create_namespaces(tags: Sequence[str]) -> list[NetworkNamespace]:
    """One namespace per tag (e.g. a cluster alias), each linked to ours; removes what it made on failure."""
    token = secrets.token_hex(4)
    made: list[NetworkNamespace] = []
    try:
        with file_lock(_LOCK):
            for index, tag in enumerate(tags):
                subnet = pick_subnet(_networks_in_use(), random.Random())
                made.append(
                    NetworkNamespace(
                        name=f"mirrorflow-{token}-{tag}",
                        link=f"mf{token}{index}h",  # interface names: at most 15 characters
                        peer=f"mf{token}{index}n",
                        subnet=subnet,
                    )
                )
                _build(made[-1])
    except BaseException:
        for ns in made:
            ns.delete()
        raise
    return made


@contextmanager
def namespaces(tags: Sequence[str]) -> Iterator[list[NetworkNamespace]]:
    """`create_namespaces(tags)`, deleted again on exit whatever happened."""
    made = create_namespaces(tags)
    try:
        yield made
    finally:
        for ns in made:
            ns.delete()


def _build(ns: NetworkNamespace) -> None:
    prefix = ns.subnet.prefixlen
    _ip("netns", "add", ns.name)
    _ip("link", "add", ns.link, "type", "veth", "peer", "name", ns.peer)
    _ip("link", "set", ns.peer, "netns", ns.name)
    _ip("address", "add", f"{ns.gateway}/{prefix}", "dev", ns.link)
    _ip("link", "set", ns.link, "up")
    _ip("route", "add", "unreachable", str(ns.subnet), "metric", "4000")
    inside = ("-n", ns.name)
    _ip(*inside, "address", "add", f"{ns.address}/{prefix}", "dev", ns.peer)
    _ip(*inside, "link", "set", ns.peer, "up")
    _ip(*inside, "link", "set", "lo", "up")
    ns.restore()


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    found = []
    for command in (("-4", "-o", "address", "show"), ("-4", "route", "show", "table", "all")):
        for word in _ip(*command).split():
            if word[:1].isdigit() and "." in word:
                try:
                    found.append(ipaddress.IPv4Network(word, strict=False))
                except ValueError:
                    continue
    return found


def _ip(*args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise MirrorflowError(f"`ip {' '.join(args)}` could not run: {err}") from None
    if check and done.returncode != 0:
        raise MirrorflowError(f"`ip {' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout + done.stderr
