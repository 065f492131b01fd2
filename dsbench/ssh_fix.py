"""The fix an ssh failure calls for, read from ssh's own message: a unit of its own, pure, for ``dsbench doctor``'s
rows and the launch's pre-flight refusal (runner.py) alike."""

from __future__ import annotations

# ssh's own words for why it could not log in (OpenSSH's client messages), and the fix each calls for
_SSH_FIXES = (
    ("Could not resolve hostname", "make {host} resolvable: /etc/hosts, DNS, or a Host entry in ~/.ssh/config"),
    ("Connection refused", "start sshd on {host} (or give its port in ~/.ssh/config)"),
    ("Connection timed out", "check the network path and firewall to {host}"),
    ("No route to host", "check the network path and firewall to {host}"),
    ("Host key verification failed", "accept {host}'s host key once: ssh-keyscan {host} >> ~/.ssh/known_hosts"),
)


def ssh_fix(host: str, why: str) -> str:
    """The fix for an ssh failure, by ssh's message; a login refused (or anything else): key-only login."""
    fix = next((fix for said, fix in _SSH_FIXES if said.lower() in why.lower()), None)
    return (fix or "key-only login: ssh-copy-id {host} (test: ssh -o BatchMode=yes {host} true)").format(host=host)
