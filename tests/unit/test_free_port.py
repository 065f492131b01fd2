"""The rendezvous port a launch picks: free now, and never one the kernel hands to outgoing connections meanwhile."""

from __future__ import annotations

import socket

import pytest

from dsbench.envinfo import LINUX_EPHEMERAL, LOWEST_PORT, binds, ephemeral_range, free_port


def test_the_port_lies_outside_the_kernel_s_ephemeral_range_and_binds():
    """The oracle is the kernel's own range (/proc/sys/net/ipv4/ip_local_port_range), read here apart from dsbench."""
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as text:
        low, high = (int(field) for field in text.read().split())
    ports = {free_port() for _ in range(40)}
    assert all(LOWEST_PORT <= port <= 65535 and not low <= port <= high for port in ports), sorted(ports)
    assert len(ports) > 1  # at random: two launches started at once seldom meet
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # free: rank 0 can listen on it


def test_a_port_in_use_is_passed_over():
    """A range that leaves one port outside it (the lowest offered, or 65535): while a listener holds that port, the
    kernel's pick is returned; once free, that port."""
    ranges = {LOWEST_PORT: (LOWEST_PORT + 1, 65535), 65535: (LOWEST_PORT, 65534)}
    free = [port for port in ranges if binds(port, "127.0.0.1")]  # the precondition
    if not free:
        pytest.skip(f"ports {LOWEST_PORT} and 65535 are both in use on this machine")
    only, ephemeral = free[0], ranges[free[0]]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", only))
        listener.listen()
        assert free_port(ephemeral=ephemeral, tries=8) != only
    assert free_port(ephemeral=ephemeral) == only


def test_an_unreadable_range_file_gives_linux_s_default(tmp_path):
    assert ephemeral_range(str(tmp_path / "missing")) == LINUX_EPHEMERAL
    (tmp_path / "odd").write_text("many ports\n")
    assert ephemeral_range(str(tmp_path / "odd")) == LINUX_EPHEMERAL
    (tmp_path / "range").write_text("40000\t50000\n")
    assert ephemeral_range(str(tmp_path / "range")) == (40000, 50000)
