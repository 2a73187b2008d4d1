"""A network of Linux network namespaces on one machine, for the multi-host soak
(`jobs/soak_net.py`): every "host" is a namespace with its own address, and faults are real
packet drops, loss, delay and a slow link made with `ip`, `nft` and `tc` (needs root).

Layout: a `hub` namespace holds a bridge; every node namespace has one interface `eth0` with
address 10.27.0.<n>/24 whose veth peer is a port of that bridge (both ends are created inside
their namespaces). Nothing is added to the machine's own namespace — no interface, route or
firewall rule — so the lab reaches no address outside this machine, and two runs (each with a
unique name prefix) never collide even when a killed run left namespaces behind.

Faults, one node at a time:
- `cut(node, peers)`: nft drops every packet between `node` and `peers` (both ways, silently,
  as a pulled cable or a dead switch port does; TCP sees a silent peer, not a reset);
- `loss(node, peers, percent)`: nft drops that share of `node`'s packets to `peers` only
  (asymmetric: the other direction is clean);
- `slow(node, rate_kbit)`: tc's token bucket (`tbf`) on `node`'s egress, a congested link;
- `delay(node, peers, delay_ms)`: `node`'s packets to `peers` are routed through the `wan`
  namespace, where `delayer` holds each one for `delay_ms` in a TUN device and sends it on.
  netem would do this in the kernel, but kernels built without `sch_netem` (this machine's, and
  small VM kernels generally) lack it; the TUN delayer works wherever TUN does.
`heal(node)` undoes everything on a node; `close()` kills every process in the lab's
namespaces (`ip netns pids`) and deletes them; `remove_labs(prefix)` does that for leftovers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

SUBNET = "10.27.0"
WAN = "wan"
WAN_OCTET = 254
_TABLE = "soak"  # the nft table in every node: chains `input` and `output`, policy accept
_WAN_TABLE = "100"  # the wan's routing table for packets that still have to be delayed


def sh(*argv: str, check: bool = True, timeout_s: float = 30) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process whose network namespace is `ns` (all of them started by the lab),
    then delete the namespace."""
    for _ in range(5):
        pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    sh("ip", "netns", "del", ns, check=False)


def remove_labs(prefix: str) -> list[str]:
    """Kill the processes of, and delete, every namespace named `prefix`-*; returns them."""
    found = [ns for ns in namespaces() if ns.startswith(prefix + "-")]
    for ns in found:
        _kill_namespace(ns)
    return found


def unavailable_reason() -> str | None:
    """Why this machine cannot build a lab (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2")):
        if sh("sh", "-c", f"command -v {tool}", check=False).returncode != 0:
            return f"`{tool}` is missing: `make netns-tools` installs Debian's {package}"
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing (the delay fault needs TUN)"
    return None


class Lab:
    """Namespaces `<name>-<node>` on one bridge. `nodes` maps a node to its host number."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.addresses: dict[str, str] = {}
        self._delayer: subprocess.Popen | None = None
        self._delayed_routes: list[tuple[str, str]] = []

    def ns(self, node: str) -> str:
        return f"{self.name}-{node}"

    def address(self, node: str) -> str:
        return self.addresses[node]

    def node_of(self, address: str) -> str:
        return next(n for n, a in self.addresses.items() if a == address)

    # -- building --------------------------------------------------------------------------

    def create(self, nodes: dict[str, int]) -> Lab:
        hub = self.ns("hub")
        sh("ip", "netns", "add", hub)
        sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", hub, "link", "set", "br0", "up")
        for node, octet in {**nodes, WAN: WAN_OCTET}.items():
            self._add_node(node, octet)
        self._make_wan()
        return self

    def _add_node(self, node: str, octet: int) -> None:
        ns, hub, address = self.ns(node), self.ns("hub"), f"{SUBNET}.{octet}"
        sh("ip", "netns", "add", ns)
        # both ends are born in their namespaces: the machine's own namespace never sees them
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth",
           "peer", "name", f"p{octet}", "netns", hub)  # fmt: skip
        sh("ip", "-n", hub, "link", "set", f"p{octet}", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        self.nft(node, f"add table inet {_TABLE}")
        for chain in ("input", "output"):
            self.nft(
                node,
                f"add chain inet {_TABLE} {chain} "
                f"{{ type filter hook {chain} priority 0; policy accept; }}",
            )
        self.addresses[node] = address

    def _make_wan(self) -> None:
        """The wan forwards what it is sent, but packets arriving on eth0 go first into tun0,
        where the delayer holds them; written back, they arrive on tun0 and take the main
        table to their destination."""
        wan = self.ns(WAN)
        sh("ip", "-n", wan, "tuntap", "add", "dev", "tun0", "mode", "tun")
        sh("ip", "-n", wan, "link", "set", "tun0", "up")
        for knob, value in (
            ("ipv4/ip_forward", 1),
            ("ipv4/conf/all/rp_filter", 0),
            ("ipv4/conf/tun0/rp_filter", 0),
            ("ipv4/conf/all/send_redirects", 0),
            ("ipv4/conf/eth0/send_redirects", 0),
        ):
            self.run(WAN, "sh", "-c", f"echo {value} > /proc/sys/net/{knob}")
        sh("ip", "-n", wan, "rule", "add", "iif", "eth0", "lookup", _WAN_TABLE, "pref", "100")
        sh("ip", "-n", wan, "route", "add", "default", "dev", "tun0", "table", _WAN_TABLE)

    # -- running ---------------------------------------------------------------------------

    def run(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", self.ns(node), *argv, check=check)

    def nft(self, node: str, command: str) -> None:
        self.run(node, "nft", command)

    def popen(
        self,
        node: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log_path: Path,
        private_dir: tuple[Path, Path] | None = None,
    ) -> subprocess.Popen:
        """Start `argv` in `node`'s namespace, output to `log_path`. `private_dir=(disk, at)`
        bind-mounts `disk` on `at` in a mount namespace of its own: every host sees its own
        disk at the same path, as separate machines do."""
        if private_dir is not None:
            disk, at = private_dir
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f'mount --bind "{disk}" "{at}" && exec "$@"', "sh", *argv]  # fmt: skip
        out = open(log_path, "ab")  # noqa: SIM115 - the child owns it
        try:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.ns(node), *argv],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()

    # -- faults ----------------------------------------------------------------------------

    def cut(self, node: str, peers: Iterable[str], port: int | None = None) -> None:
        """Drop every packet between `node` and `peers` (to or from `port` on them only, when
        given), in both directions."""
        peers = _set(self.addresses[p] for p in peers)
        to_port = f" tcp dport {port}" if port is not None else ""
        from_port = f" tcp sport {port}" if port is not None else ""
        self.nft(node, f"add rule inet {_TABLE} output ip daddr {peers}{to_port} drop")
        self.nft(node, f"add rule inet {_TABLE} input ip saddr {peers}{from_port} drop")

    def loss(self, node: str, peers: Iterable[str], percent: int) -> None:
        """Drop `percent`% of `node`'s packets to `peers` (the replies are not touched)."""
        peers = _set(self.addresses[p] for p in peers)
        self.nft(
            node,
            f"add rule inet {_TABLE} output ip daddr {peers} numgen random mod 100 < {percent} drop",
        )

    def slow(self, node: str, rate_kbit: int) -> None:
        """Shape `node`'s egress to `rate_kbit` (queueing up to a second, then dropping)."""
        self.run(node, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                 "rate", f"{rate_kbit}kbit", "burst", "16kb", "latency", "1s")  # fmt: skip

    def delay(self, node: str, peers: Iterable[str], delay_ms: int) -> None:
        """Hold each of `node`'s packets to `peers` for `delay_ms` (one way)."""
        assert self._delayer is None, "one delay at a time"
        self._delayer = self.popen(
            WAN,
            [sys.executable, str(Path(__file__).resolve()), "delayer", "tun0", str(delay_ms)],
            env={**os.environ},
            log_path=Path(os.devnull),
        )
        for peer in peers:
            route = f"{self.addresses[peer]}/32"
            self.run(node, "ip", "route", "add", route, "via", f"{SUBNET}.{WAN_OCTET}")
            self._delayed_routes.append((node, route))

    def heal(self, node: str) -> None:
        """Undo every fault on `node` (and stop the delayer once no route uses it)."""
        for chain in ("input", "output"):
            self.nft(node, f"flush chain inet {_TABLE} {chain}")
        self.run(node, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        for at, route in [r for r in self._delayed_routes if r[0] == node]:
            self.run(at, "ip", "route", "del", route, check=False)
            self._delayed_routes.remove((at, route))
        if self._delayer is not None and not self._delayed_routes:
            time.sleep(1.0)  # what the delayer holds (at most its delay) still arrives
            self._delayer.kill()
            self._delayer.wait(10)
            self._delayer = None

    # -- ending ----------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every process in the lab's namespaces and delete them (idempotent)."""
        if self._delayer is not None:
            self._delayer.kill()
            self._delayer = None
        remove_labs(self.name)


def _set(addresses: Iterable[str]) -> str:
    return "{ " + ", ".join(sorted(addresses)) + " }"


def delayer(dev: str, delay_ms: int) -> None:
    """Read IP packets from TUN device `dev`, write each back `delay_ms` later, in order (a
    fixed delay keeps arrival order, so the queue is a FIFO). Runs until killed."""
    import fcntl
    import select
    import struct
    from collections import deque

    tunsetiff, iff_tun, iff_no_pi = 0x400454CA, 0x0001, 0x1000
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, tunsetiff, struct.pack("16sH", dev.encode(), iff_tun | iff_no_pi))
    held: deque[tuple[float, bytes]] = deque()
    delay_s = delay_ms / 1000
    while True:
        wait_s = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([fd], [], [], wait_s)
        now = time.monotonic()
        if readable:
            with contextlib.suppress(BlockingIOError):
                while True:
                    held.append((now + delay_s, os.read(fd, 65536)))
        while held and held[0][0] <= now:
            with contextlib.suppress(OSError):
                os.write(fd, held.popleft()[1])


if __name__ == "__main__":
    if sys.argv[1:2] == ["delayer"]:
        delayer(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["remove"]:
        print(remove_labs(sys.argv[2]))
    else:
        sys.exit("usage: netlab.py delayer DEV DELAY_MS | netlab.py remove PREFIX")
