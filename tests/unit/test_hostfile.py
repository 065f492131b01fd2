import pytest

from dsbench.errors import UserError
from dsbench.hostfile import (
    Host,
    HostfileError,
    format_hostfile,
    is_valid_hostname,
    parse_hostfile,
    select_slots,
    world_size_of,
)
from tests.conftest import CORPUS, ROOT


def test_parses_hosts_comments_and_blank_lines():
    hosts = parse_hostfile(["# cluster", "", "node1 slots=8", "  node2   slots=4  # second", "10.0.0.3 slots=2"])
    assert [(h.name, h.slots, h.line) for h in hosts] == [("node1", 8, 3), ("node2", 4, 4), ("10.0.0.3", 2, 5)]


def test_round_trips_through_format():
    hosts = parse_hostfile(["a slots=1", "b.example.com slots=2"])
    assert parse_hostfile(format_hostfile(hosts).splitlines()) == [
        Host(name="a", slots=1, line=1), Host(name="b.example.com", slots=2, line=2)]


@pytest.mark.parametrize("line, needle", [
    ("node1 slots=2foo", "slots must be a positive integer"),
    ("node1 slots=0", "slots=0"),
    ("node1 slots=-1", "slots must be a positive integer"),
    ("-oProxyCommand=x slots=1", "invalid hostname"),
    ("a;rm${IFS}-rf slots=1", "invalid hostname"),
    ("$(touch${IFS}x) slots=1", "invalid hostname"),
    ("`id` slots=1", "invalid hostname"),
    ("host|nc slots=1", "invalid hostname"),
    ("node1 4", "write 'node1 slots=4'"),
    ("job-1,10.0.0.1", "CSV"),
    ("node1", "expected 'HOST slots=N'"),
    ("node1 slots=2 extra", "expected 'HOST slots=N'"),
])
def test_rejects_bad_lines_with_line_numbers(line, needle):
    with pytest.raises(HostfileError) as err:
        parse_hostfile(["ok slots=1", line])
    assert err.value.problems[0][0] == 2
    assert needle in err.value.problems[0][1]


def test_duplicates_and_all_problems_reported():
    with pytest.raises(HostfileError) as err:
        parse_hostfile(["a slots=1", "a slots=2", "b slots=x", "c slots=0"])
    assert [n for n, _ in err.value.problems] == [2, 3, 4]
    assert "first on line 1" in err.value.problems[0][1]


def test_empty_hostfile_is_an_error():
    with pytest.raises(HostfileError, match="no hosts"):
        parse_hostfile(["# nothing", ""])


@pytest.mark.parametrize("name, ok", [
    ("localhost", True), ("node-1.cluster.local", True), ("10.1.2.3", True), ("::1", True),
    ("-bad", False), ("bad-", False), ("a..b", False), ("a b", False), ("", False), ("x" * 64, False),
])
def test_hostname_validity(name, ok):
    assert is_valid_hostname(name) is ok


def test_include_exclude_follow_deepspeed_semantics():
    hosts = parse_hostfile(["w0 slots=4", "w1 slots=4"])
    assert select_slots(hosts) == {"w0": [0, 1, 2, 3], "w1": [0, 1, 2, 3]}
    assert select_slots(hosts, include="w0:0,2@w1") == {"w0": [0, 2], "w1": [0, 1, 2, 3]}
    assert select_slots(hosts, exclude="w1") == {"w0": [0, 1, 2, 3]}
    assert world_size_of(select_slots(hosts, exclude="w0:3@w1:0,1")) == 5


@pytest.mark.parametrize("include, exclude, needle", [
    ("w9", "", "not in the hostfile"), ("w0:7", "", "not in 0..3"), ("w0", "w1", "mutually exclusive"),
    ("", "w0@w1", "removes every slot"),
])
def test_filter_errors(include, exclude, needle):
    hosts = parse_hostfile(["w0 slots=4", "w1 slots=4"])
    with pytest.raises(UserError, match=needle):
        select_slots(hosts, include, exclude)


def test_shipped_hostfiles_are_valid():
    for path in (ROOT / "hostfiles").iterdir():
        assert parse_hostfile(path.read_text().splitlines(), str(path))


CORPUS_HOSTFILES = {
    "Alpha-Innovator__OmniCaptioner__hostfile": 8,
    "BAfsharmanesh__Metis__hostfile": None,  # "IP1 4": no slots=
    "CyberSculptor96__MLLM-MSR__hostfile": None,  # a CSV
    "DianaTurmakhan__lora-parallelization-strategies__hostfile": 2,
    "Gezy777__distributed_train__hostfile": 2,
    "microsoft__Megatron-DeepSpeed__examples_deepspeed_deepspeed4science_megatron_long_seq_support_host_file": 4,
}


@pytest.mark.parametrize("name, slots", CORPUS_HOSTFILES.items())
def test_corpus_hostfiles(name, slots):
    lines = (CORPUS / "hostfiles" / name).read_text().splitlines()
    if slots is None:
        with pytest.raises(HostfileError):
            parse_hostfile(lines)
    else:
        assert sum(h.slots for h in parse_hostfile(lines)) == slots


def _generated_filters() -> list[str]:
    """Every filter of one to three node specs over a 3-host hostfile (plus an unknown host), each spec bare or
    with a slot list drawn from in-range, out-of-range and repeated slots: 2,000+ strings."""
    import itertools

    specs = []
    for host in ("node1", "node2", "node3", "nodeX"):
        specs.append(host)
        for slots in ("0", "1", "3", "0,1", "1,0", "0,0", "0,2", "0,1,2,3", "x", ""):
            specs.append(f"{host}:{slots}")
    filters = list(specs)
    filters += ["@".join(pair) for pair in itertools.product(specs, specs)]
    filters += ["@".join(trio) for trio in itertools.product(("node1", "node1:1", "node2:0", "node3:0,2"),
                                                             ("node2", "node3:3", "node2:1"),
                                                             ("node3", "node1:0", "nodeX"))]
    return filters


def test_filters_agree_with_deepspeeds_own_parser():
    """Oracle: DeepSpeed's ``parse_resource_filter``, on every generated --include and --exclude. Where a filter
    names a host twice DeepSpeed merges the mentions (``node1:0@node1`` keeps only slot 0) and dsbench refuses it;
    where DeepSpeed's result is empty (every slot excluded) dsbench refuses it too. Everything else: the same
    hosts, in the same order, with the same slots."""
    from collections import OrderedDict

    from deepspeed.launcher.runner import parse_resource_filter

    hosts = [Host("node1", 2), Host("node2", 2), Host("node3", 4)]
    pool = OrderedDict((h.name, list(range(h.slots))) for h in hosts)
    filters = _generated_filters()
    assert len(filters) > 2000
    agreed = 0
    for text in filters:
        for flag in ("include", "exclude"):
            named = [part.partition(":")[0] for part in text.split("@")]
            try:
                theirs = parse_resource_filter(pool, **{f"{flag}_str": text})
            except ValueError:
                theirs = None
            try:
                ours = select_slots(hosts, **{flag: text})
            except UserError:
                ours = None
            if len(set(named)) < len(named):
                assert ours is None, (flag, text)
            elif not theirs:
                assert ours is None, (flag, text, theirs)
            else:
                assert ours is not None, (flag, text, dict(theirs))
                assert list(ours) == list(theirs), (flag, text)
                same = {h: sorted(s) for h, s in theirs.items()}
                assert {h: sorted(s) for h, s in ours.items()} == same, (flag, text)
                agreed += 1
    assert agreed > 300


@pytest.mark.parametrize("text", ["node1:0,1@node1", "node1@node1:0", "node1:0@node1:1", "node1@@node2", "node1:١"])
def test_filters_deepspeed_would_read_otherwise_are_refused(text):
    hosts = [Host("node1", 2), Host("node2", 2)]
    with pytest.raises(UserError, match="twice|empty host|slot"):
        select_slots(hosts, include=text)


@pytest.mark.parametrize("line, problem", [("n1 slots=99999999999999999999", "at most 1024 ranks per host"),
                                           ("n1 slots=٣", "slots must be a positive integer"),
                                           ("n1 slots=²", "slots must be a positive integer"),
                                           ("n1 slots=" + "9" * 5000, "at most 1024 ranks per host")])
def test_absurd_slot_counts_are_refused(line, problem):
    with pytest.raises(HostfileError, match=problem):
        parse_hostfile([line])


def test_a_byte_order_mark_is_named_as_deepspeed_would_keep_it_in_the_hosts_name(tmp_path):
    """The oracle: DeepSpeed's own fetch_hostfile reads the file as plain UTF-8, so a BOM stays in the first host's
    name (which pdsh/ssh would then try to reach)."""
    from deepspeed.launcher.runner import fetch_hostfile

    path = tmp_path / "hostfile"
    path.write_bytes(b"\xef\xbb\xbfworker-1 slots=8\nworker-2 slots=8\n")
    assert list(fetch_hostfile(str(path))) == ["\ufeffworker-1", "worker-2"]
    with pytest.raises(HostfileError) as err:
        parse_hostfile(path.read_text(encoding="utf-8").splitlines())
    assert err.value.problems[0][0] == 1 and "byte-order mark" in err.value.problems[0][1]


@pytest.mark.parametrize("line, ignored", [("node-1 slots=8 gpus=0,1", "gpus=0,1"),
                                           ("node-1 slots=8 max_slots=8", "max_slots=8")])
def test_words_after_the_slots_are_named_as_what_deepspeed_ignores(line, ignored):
    """DeepSpeed's own parser reads such a line as HOST slots=N and drops the rest (an Open MPI max_slots, a GPU list
    meant for --include); dsbench refuses it naming what would be ignored (until 2026-12-02: "CSV is not a DeepSpeed
    hostfile" for the GPU list)."""
    from deepspeed.launcher.runner import _parse_hostfile

    assert dict(_parse_hostfile([line])) == {"node-1": 8}
    with pytest.raises(HostfileError) as caught:
        parse_hostfile([line])
    assert f"DeepSpeed reads 'node-1 slots=8' and ignores '{ignored}'" in str(caught.value)
