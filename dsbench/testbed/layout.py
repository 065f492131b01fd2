"""A test bed of "nodes" on one machine, as data: names, addresses, files and commands (pure).

Each node is a Linux network namespace on a private bridge, with its own address, its own sshd (key-only root
login) started in its own UTS and mount namespaces, so it has its own hostname and sees a private
``/etc/hosts`` (every node's name) and an empty ``/etc/resolv.conf`` (no DNS to wait for: the namespaces
have no route off the machine, and a lookup would stall for seconds). Processes and files are shared with
the host: the project is at the same path on every node. :mod:`dsbench.testbed.manage` runs what this
module describes.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from dsbench.errors import UserError

PREFIX = "dsb"
SUBNET = "10.213.0"
"""A private /24 the bridge and the nodes live in; nothing routes it off the machine (no default route)."""
BRIDGE = f"{PREFIX}-br0"
HOST_ADDRESS = f"{SUBNET}.254"
NODE_INTERFACE = "eth0"
_RATE = re.compile(r"[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)")  # fullmatch: "$" passes "\n"


_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12, "bps": 8, "kbps": 8 * 10**3,
          "mbps": 8 * 10**6, "gbps": 8 * 10**9}
"""tc's rate units (tc(8)): ...bit are bits per second, ...bps bytes per second."""


def rate_bits(rate: str, flag: str = "--bandwidth") -> int:
    """A tc rate such as ``100mbit`` in bits per second (``flag`` names it in the error)."""
    found = _RATE.fullmatch(rate)
    if not found:
        raise UserError(f"{flag} {rate!r}: give a tc rate such as 1gbit, 100mbit or 500kbit")
    bits = int(float(rate[: -len(found.group(2))]) * _UNITS[found.group(2)])
    if not 8_000 <= bits <= 10**13:  # tc's tbf wants a burst of a few packets; beyond 10 Tbit/s no link shapes
        raise UserError(f"{flag} {rate!r}: give a rate between 8kbit and 10tbit")
    return bits


def veth_of(name: str) -> str:
    """The host end of node ``name``'s link (``dsb-n3`` -> ``dsb-v3``), on the bridge."""
    return f"{PREFIX}-v{name.removeprefix(f'{PREFIX}-n')}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Testbed:
    """``nodes`` nodes of ``slots`` ranks each; links optionally shaped to ``bandwidth`` and ``latency_ms``."""

    nodes: int
    slots: int = 1
    bandwidth: str | None = None
    """tc rate per direction of every node's link, e.g. ``1gbit``, ``100mbit`` (``--bandwidth``)."""
    latency_ms: float | None = None
    """Added one-way delay per direction of every node's link (``--latency``)."""
    root: Path
    """The folder holding keys, configs, the hostfile and the state (``DSBENCH_TESTBED_DIR``)."""

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 16:
            raise UserError(f"--nodes must be in 1..16, got {self.nodes}")
        if not 1 <= self.slots <= 64:
            raise UserError(f"--slots must be in 1..64, got {self.slots}")
        if self.bandwidth is not None:
            rate_bits(self.bandwidth)
        if self.latency_ms is not None and not 0 < self.latency_ms <= 10_000:
            raise UserError(f"--latency must be in (0, 10000] ms, got {self.latency_ms}")

    def names(self) -> list[str]:
        return [f"{PREFIX}-n{i}" for i in range(1, self.nodes + 1)]

    def address(self, name: str) -> str:
        return f"{SUBNET}.{self.names().index(name) + 1}"

    def veth(self, name: str) -> str:
        """The host end of the node's link (on the bridge)."""
        self.names().index(name)  # only this test bed's nodes
        return veth_of(name)

    def node_dir(self, name: str) -> Path:
        return self.root / name

    @property
    def hostfile(self) -> Path:
        return self.root / "hostfile"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def key(self) -> Path:
        return self.root / "id_ed25519"

    # ---- files -------------------------------------------------------------------------------------------

    def hostfile_text(self) -> str:
        """A DeepSpeed hostfile of the nodes (names resolve through the ssh config and the nodes' hosts file)."""
        return "".join(f"{name} slots={self.slots}\n" for name in self.names())

    def hosts_text(self) -> str:
        """The /etc/hosts every node sees: each node's name, the host's, localhost."""
        lines = ["127.0.0.1 localhost", f"{HOST_ADDRESS} {PREFIX}-host"]
        lines += [f"{self.address(name)} {name}" for name in self.names()]
        return "\n".join(lines) + "\n"

    def sshd_config_text(self, name: str) -> str:
        """One node's sshd: on its address only, key-only root login, keys and pid file in the test bed."""
        node = self.node_dir(name)
        return "\n".join([
            f"ListenAddress {self.address(name)}", f"HostKey {node / 'ssh_host_ed25519_key'}",
            f"PidFile {node / 'sshd.pid'}", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}", "StrictModes no", "UsePAM no",
            "LogLevel ERROR", ""])

    def ssh_config_text(self) -> str:
        """Client settings for the launching host (included from ~/.ssh/config: DeepSpeed and pdsh call plain
        ``ssh``): each node name, its address, the test bed's key, no host-key prompts."""
        blocks = [f"Host {name}\n  HostName {self.address(name)}\n" for name in self.names()]
        blocks.append(f"Host {PREFIX}-n*\n  User root\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
                      "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
                      "  ConnectTimeout 5\n")
        return "".join(blocks)

    # ---- commands ----------------------------------------------------------------------------------------

    def network_commands(self) -> list[list[str]]:
        """The bridge, and per node: its namespace, a veth pair (host end on the bridge), its address."""
        out = [["ip", "link", "add", BRIDGE, "type", "bridge"],
               ["ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", BRIDGE], ["ip", "link", "set", BRIDGE, "up"]]
        for name in self.names():
            veth = self.veth(name)
            out += [["ip", "netns", "add", name],
                    ["ip", "link", "add", veth, "type", "veth", "peer", "name", NODE_INTERFACE, "netns", name],
                    ["ip", "link", "set", veth, "master", BRIDGE], ["ip", "link", "set", veth, "up"],
                    ["ip", "-n", name, "addr", "add", f"{self.address(name)}/24", "dev", NODE_INTERFACE],
                    ["ip", "-n", name, "link", "set", NODE_INTERFACE, "up"],
                    ["ip", "-n", name, "link", "set", "lo", "up"]]
        return out + self.shaping_commands()

    def shaping_commands(self) -> list[list[str]]:
        """Shaping on both ends of every link, so each direction is shaped (tc shapes what leaves a device).

        Rate: a token bucket (tbf), the one rate shaper this machine's kernel has (../shared/FINDINGS.md: tbf
        at 100mbit measured ~94 Mbit/s); burst = 1 ms at the rate, at least 32 kbit, so the kernel's timer can
        keep up. Delay: netem as the root with the tbf under it (netem is absent from some kernels: `up`
        then says so).
        """
        if self.bandwidth is None and self.latency_ms is None:
            return []
        shapers = []
        if self.latency_ms:
            shapers.append(["root", "handle", "1:", "netem", "delay", f"{self.latency_ms:g}ms"])
        if self.bandwidth:
            burst = max(32_000, rate_bits(self.bandwidth) // 1000)
            shapers.append([*(["parent", "1:", "handle", "2:"] if self.latency_ms else ["root"]), "tbf", "rate",
                            self.bandwidth, "burst", f"{burst // 8}b", "latency", "400ms"])
        out = []
        for name in self.names():
            for shaper in shapers:
                verb = "replace" if shaper[0] == "root" else "add"
                out.append(["tc", "qdisc", verb, "dev", self.veth(name), *shaper])
                out.append(["ip", "netns", "exec", name, "tc", "qdisc", verb, "dev", NODE_INTERFACE, *shaper])
        return out

    def sshd_command(self, name: str) -> list[str]:
        """Start the node's sshd in its network namespace, with its own hostname, hosts and resolv.conf."""
        setup = (f"mount --bind {shlex.quote(str(self.root / 'hosts'))} /etc/hosts && "
                 f"mount --bind {shlex.quote(str(self.root / 'resolv.conf'))} /etc/resolv.conf && "
                 f"hostname {name} && exec /usr/sbin/sshd -f {shlex.quote(str(self.node_dir(name) / 'sshd_config'))}")
        return ["ip", "netns", "exec", name, "unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c",
                setup]

    def to_dict(self) -> dict[str, object]:
        return {"nodes": self.nodes, "slots": self.slots, "bandwidth": self.bandwidth,
                "latency_ms": self.latency_ms, "root": str(self.root), "names": self.names(),
                "addresses": {name: self.address(name) for name in self.names()}, "bridge": BRIDGE,
                "hostfile": str(self.hostfile)}
