"""py-cpuinfo asked once per CPU (dsbench.worker.cpuanswer), against DeepSpeed's own op builder as the oracle."""

from __future__ import annotations

import json
import os
import platform

import pytest

from dsbench.worker import cpuanswer
from dsbench.worker.cpuanswer import answer_path, ask_the_cpu_once, cpu_key

ANSWER = {"arch": "X86_64", "flags": ["avx2", "fma"], "vendor_id_raw": "GenuineIntel"}
CPUINFO = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n"
           "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nstepping\t: 7\ncpu MHz\t\t: 2200.152\n"
           "flags\t\t: fpu sse avx2 fma avx512f\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n")


@pytest.fixture
def cpuinfo(monkeypatch, tmp_path):
    """py-cpuinfo with a counting stand-in for the CPUID process, and this machine's description of its CPU."""
    module = pytest.importorskip("cpuinfo")
    asked = []
    monkeypatch.setattr(module, "get_cpu_info", lambda: asked.append(1) or dict(ANSWER))
    cpu = tmp_path / "cpuinfo"
    cpu.write_text(CPUINFO)
    monkeypatch.setattr(cpuanswer, "_PROC_CPUINFO", cpu)
    return module, asked, cpu


def test_a_rank_asks_the_cpu_once_however_many_ops_deepspeed_loads(cpuinfo, tmp_path):
    """DeepSpeed's CPU op builders ask py-cpuinfo twice per op they load (cpu_arch, simd_width) and CPU Adam once
    more; each call starts a CPUID process (1.1-1.3 s here). After ask_the_cpu_once the first answer serves them
    all, and DeepSpeed's own builder derives from it the flags it derives when it asks every time (the oracle)."""
    from deepspeed.ops.op_builder.cpu import FusedAdamBuilder

    module, asked, _ = cpuinfo
    builder = FusedAdamBuilder()
    every_time = (builder.cpu_arch(), builder.simd_width())
    assert len(asked) == 2
    asked.clear()
    ask_the_cpu_once(tmp_path)
    ask_the_cpu_once(tmp_path)  # a second call keeps the first cache
    flags = [(builder.cpu_arch(), builder.simd_width()) for _ in range(3)]
    assert flags == [every_time] * 3 == [("-march=native", "-D__AVX256__")] * 3
    assert len(asked) == 1


def test_the_next_rank_on_the_same_cpu_reads_the_answer_instead_of_asking(cpuinfo, tmp_path, monkeypatch):
    module, asked, _ = cpuinfo
    stand_in = module.get_cpu_info
    ask_the_cpu_once(tmp_path)
    assert module.get_cpu_info() == ANSWER and len(asked) == 1
    stored = answer_path(tmp_path, cpu_key(CPUINFO, platform.machine()))
    assert json.loads(stored.read_text()) == ANSWER
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left

    monkeypatch.setattr(module, "get_cpu_info", stand_in)  # a new process: py-cpuinfo's own function again
    ask_the_cpu_once(tmp_path)
    assert module.get_cpu_info() == ANSWER
    assert len(asked) == 1  # read, not asked


def test_another_cpu_or_a_spoilt_answer_is_asked_again(cpuinfo, tmp_path, monkeypatch):
    module, asked, cpu = cpuinfo
    stand_in = module.get_cpu_info
    ask_the_cpu_once(tmp_path)
    module.get_cpu_info()
    stored = answer_path(tmp_path, cpu_key(CPUINFO, platform.machine()))

    cpu.write_text(CPUINFO.replace("avx512f", "amx_tile"))  # the same folder on a CPU with other features
    monkeypatch.setattr(module, "get_cpu_info", stand_in)
    ask_the_cpu_once(tmp_path)
    module.get_cpu_info()
    assert len(asked) == 2 and len(list(tmp_path.glob("dsbench-cpuinfo-*.json"))) == 2

    cpu.write_text(CPUINFO)
    for spoilt in ("{half", '{"arch": "X86_64"}', "[1, 2]"):  # cut short, missing what DeepSpeed reads, not a dict
        stored.write_text(spoilt)
        monkeypatch.setattr(module, "get_cpu_info", stand_in)
        ask_the_cpu_once(tmp_path)
        assert module.get_cpu_info() == ANSWER
    assert len(asked) == 5
    assert json.loads(stored.read_text()) == ANSWER  # written again whole


def test_a_fifo_or_an_unwritable_folder_never_blocks_or_fails_the_rank(cpuinfo, tmp_path, monkeypatch):
    module, asked, _ = cpuinfo
    stand_in = module.get_cpu_info
    os.mkfifo(answer_path(tmp_path, cpu_key(CPUINFO, platform.machine())))
    ask_the_cpu_once(tmp_path)
    assert module.get_cpu_info() == ANSWER and len(asked) == 1  # a FIFO is not read (it would block)

    monkeypatch.setattr(module, "get_cpu_info", stand_in)
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    ask_the_cpu_once(blocked)  # the folder cannot be made: the answer stays in this process
    assert module.get_cpu_info() == ANSWER and module.get_cpu_info() == ANSWER and len(asked) == 2


def test_the_cpu_is_named_by_its_identifying_lines_only():
    """The clock speed changes from read to read; vendor, model and feature flags name the CPU."""
    key = cpu_key(CPUINFO, "x86_64")
    assert key == cpu_key(CPUINFO.replace("2200.152", "1999.998"), "x86_64")
    assert key != cpu_key(CPUINFO.replace("fma ", ""), "x86_64")
    assert key != cpu_key(CPUINFO, "aarch64")
    assert cpu_key("", "x86_64") is None
    assert cpu_key(CPUINFO.split("\n\n")[1], "x86_64") != key  # the second processor alone lacks the flags line
