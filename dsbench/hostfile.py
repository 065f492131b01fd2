"""DeepSpeed hostfiles: ``host slots=N`` per line, ``#`` comments, blank lines.

:func:`parse_hostfile` is pure over lines and stricter than DeepSpeed's own parser
(``deepspeed/launcher/runner.py:_parse_hostfile``), which matches ``^(\\S+)\\s+slots=(\\d+)`` with
``re.search`` and so accepts ``slots=2foo`` as 2 slots and any hostname-looking token, including
ones that start with ``-`` or hold shell metacharacters. Here every line must be exactly
``HOST slots=N`` (an optional trailing ``# comment`` is allowed), HOST must be a DNS name or an IP
address, and N a positive integer. All problems are collected with their line numbers.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dsbench.errors import UserError
from dsbench.io import read_text

# RFC 1123 label: letters, digits, hyphens; no leading or trailing hyphen; 1-63 characters.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_LINE = re.compile(r"^(?P<host>\S+)\s+slots=(?P<slots>\S+)$")
MAX_SLOTS = 1024
"""Most ranks one host may run: more is a typo (and ``range`` over it would exhaust memory)."""


def _is_count(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts '²' and Arabic-Indic digits, which no launcher reads."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True, slots=True)
class Host:
    """One hostfile entry."""

    name: str
    """Hostname or IP address, as written."""
    slots: int
    """Number of ranks (GPUs, or CPU ranks on a CPU machine) this host runs."""
    line: int = 0
    """1-based line number in the hostfile (0 when built in code)."""


class HostfileError(UserError):
    """A hostfile has one or more bad lines; ``problems`` holds ``(line, message)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[int, str]]) -> None:
        self.source = source
        self.problems = problems
        first = "; ".join(f"line {n}: {msg}" for n, msg in problems[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        super().__init__(f"{source}: {first}{more}")


def is_valid_hostname(name: str) -> bool:
    """True for an IPv4/IPv6 address or an RFC 1123 DNS name (no shell metacharacters possible)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    if len(name) > 253 or not name:
        return False
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    return all(_LABEL.match(label) for label in labels)


def _parse_line(text: str) -> tuple[str, int] | str:
    """Parse one non-comment line into ``(host, slots)`` or return the problem as a string."""
    match = _LINE.match(text)
    if not match:
        extra = re.match(r"^(\S+\s+slots=\d+)\s+(.+)$", text)
        if extra:  # DeepSpeed's _parse_hostfile matches HOST slots=N at the start and drops the rest unread
            return (f"expected 'HOST slots=N', got {text!r}: DeepSpeed reads {extra.group(1)!r} and ignores "
                    f"{extra.group(2)!r}; delete it (choose a host's GPUs with --include HOST:0,1)")
        if "," in text:
            return f"expected 'HOST slots=N', got {text!r} (CSV is not a DeepSpeed hostfile)"
        parts = text.split()
        if len(parts) == 2 and parts[1].isdigit():
            return f"expected 'HOST slots=N', got {text!r} (write '{parts[0]} slots={parts[1]}')"
        return f"expected 'HOST slots=N', got {text!r}"
    host, slots = match.group("host"), match.group("slots")
    if host.startswith("\ufeff"):  # DeepSpeed reads hostfiles as plain UTF-8: the mark would be in the host's name
        return (f"invalid hostname {host!r}: it starts with a byte-order mark (U+FEFF, as some Windows editors "
                "save); save the file as UTF-8 without BOM")
    if not is_valid_hostname(host):
        return f"invalid hostname {host!r}: use a DNS name (letters, digits, '-', '.') or an IP address"
    if not _is_count(slots):
        return f"slots must be a positive integer, got 'slots={slots}'"
    if len(slots) > 5 or int(slots) > MAX_SLOTS:
        shown = slots[:12] + ("..." if len(slots) > 12 else "")
        return f"host {host!r} has slots={shown}: at most {MAX_SLOTS} ranks per host"
    if int(slots) == 0:
        return f"host {host!r} has slots=0: remove the line or give it at least one slot"
    return host, int(slots)


def parse_hostfile(lines: Iterable[str], source: str = "hostfile") -> list[Host]:
    """Parse hostfile lines into hosts, raising :class:`HostfileError` listing every bad line."""
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    problems: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        parsed = _parse_line(text)
        if isinstance(parsed, str):
            problems.append((number, parsed))
            continue
        host, slots = parsed
        if host in seen:
            problems.append((number, f"duplicate host {host!r} (first on line {seen[host]})"))
            continue
        seen[host] = number
        hosts.append(Host(name=host, slots=slots, line=number))
    if not hosts and not problems:
        problems.append((0, "no hosts: add lines of the form 'HOST slots=N'"))
    if problems:
        raise HostfileError(source, problems)
    return hosts


def read_hostfile(path: str) -> list[Host]:
    """Read and parse a hostfile from disk."""
    return parse_hostfile(read_text(path, "hostfile").splitlines(), source=str(path))


def format_hostfile(hosts: Iterable[Host]) -> str:
    """Render hosts back to DeepSpeed's hostfile text."""
    return "".join(f"{h.name} slots={h.slots}\n" for h in hosts)


def _parse_filter(text: str, flag: str, hosts: dict[str, int]) -> dict[str, list[int]]:
    """Parse DeepSpeed's ``host1:0,1@host2`` resource filter against known hosts.

    Stricter than DeepSpeed's ``parse_node_config_list``, which merges every mention of a host: there
    ``node1:0,1@node1`` selects slots 0 and 1 only (the bare mention, "all slots", adds nothing), a surprise
    that is refused here; so are empty node specs (``a@@b``) and non-ASCII digits.
    """
    selected: dict[str, list[int]] = {}
    for part in text.split("@") if text else ():
        name, colon, slot_text = part.partition(":")
        if not name:
            raise UserError(f"{flag} {text!r}: an empty host between '@'s; write HOST[:SLOT,...]@HOST...")
        if name in selected:
            raise UserError(f"{flag} {text!r} names host {name!r} twice: name each host once, with all its "
                            f"slots (e.g. {name}:0,1)")
        if name not in hosts:
            raise UserError(f"{flag}: host {name!r} is not in the hostfile (known: {', '.join(hosts)})")
        if not colon:
            selected[name] = list(range(hosts[name]))
            continue
        slots: list[int] = []
        for item in slot_text.split(","):
            if not _is_count(item) or int(item) >= hosts[name]:
                raise UserError(f"{flag}: slot {item!r} of {name!r} is not in 0..{hosts[name] - 1}")
            slots.append(int(item))
        selected[name] = sorted(set(slots))
    return selected


def select_slots(hosts: list[Host], include: str = "", exclude: str = "") -> dict[str, list[int]]:
    """Apply DeepSpeed's ``--include``/``--exclude`` filters; return host -> slot indices used.

    Mirrors ``deepspeed.launcher.runner.parse_resource_filter``: the two flags are mutually
    exclusive, a bare host selects (or drops) all its slots, ``host:0,2`` selects slots 0 and 2.
    """
    if include and exclude:
        raise UserError("--include and --exclude are mutually exclusive: keep one")
    pool = {h.name: h.slots for h in hosts}
    if include:  # in hostfile order, as DeepSpeed orders its ranks, whatever the order of the filter
        chosen = _parse_filter(include, "--include", pool)
        return {name: chosen[name] for name in pool if name in chosen}
    result = {name: list(range(n)) for name, n in pool.items()}
    for name, slots in _parse_filter(exclude, "--exclude", pool).items():
        kept = [s for s in result[name] if s not in slots]
        if kept:
            result[name] = kept
        else:
            del result[name]
    if not result:
        raise UserError("--exclude removes every slot: nothing left to launch on")
    return result


def world_size_of(selection: dict[str, list[int]]) -> int:
    """Total ranks of a selection produced by :func:`select_slots`."""
    return sum(len(slots) for slots in selection.values())


def ranks_of(path: str) -> int:
    """The ranks a hostfile launches: every host's slots (read and checked)."""
    return sum(host.slots for host in read_hostfile(path))
