"""Hostlists against Slurm's own semantics (and scontrol itself where installed)."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import scontrol_hostnames
from ti_slurm.core.errors import HostlistError
from ti_slurm.core.hostlist import compress, expand

CASES = {
    "node1": ["node1"],
    "n[1-3]": ["n1", "n2", "n3"],
    "n[009-011]": ["n009", "n010", "n011"],
    "node[1-010]": [f"node{i}" for i in range(1, 11)],
    "linux[1,2]": ["linux1", "linux2"],
    "nodeA,nodeB[001,003],nodeC": ["nodeA", "nodeB001", "nodeB003", "nodeC"],
    "rack[0-1]_blade[0-2]": [f"rack{r}_blade{b}" for r in range(2) for b in range(3)],
    "x[00-02]y[8-10]": [f"x{a:02d}y{b}" for a in range(3) for b in (8, 9, 10)],
    "n1,n1,n0": ["n1", "n1", "n0"],
    "n[3,1-2]": ["n3", "n1", "n2"],
    "gpu-a100-[01-02].rack3": ["gpu-a100-01.rack3", "gpu-a100-02.rack3"],
    # three or more groups: the last fastest, then the first, the second, ... (scontrol's order)
    "a[0-1]b[0-1]c[0-1]": ["a0b0c0", "a0b0c1", "a1b0c0", "a1b0c1", "a0b1c0", "a0b1c1", "a1b1c0", "a1b1c1"],
    "a[0-2]b[0-1]c[0-1]d[0-1]": [
        f"a{a}b{b}c{c}d{d}" for c in range(2) for b in range(2) for a in range(3) for d in range(2)
    ],
    "r[1-2]x[1-2]y[7-8]-ib,login": [f"r{r}x{x}y{y}-ib" for x in (1, 2) for r in (1, 2) for y in (7, 8)] + ["login"],
    "[1-3]": ["1", "2", "3"],
    # all-digit names: brackets alone, several groups (scontrol: 14 15 24 25)
    "[1-2][4-5]": ["14", "15", "24", "25"],
    "[01-02][4-5]": ["014", "015", "024", "025"],
    "[1-2][3-4][5-6]": ["135", "136", "235", "236", "145", "146", "245", "246"],
    "[1-2]a[3-4]": ["1a3", "1a4", "2a3", "2a4"],
    "x,[1-2]y[3]": ["x", "1y3", "2y3"],
}


@pytest.mark.parametrize("text,names", CASES.items())
def test_expand_matches_slurm_semantics(text: str, names: list[str]) -> None:
    assert expand(text) == names


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol not installed (apt-get install slurm-client)")
@pytest.mark.parametrize("text", [t for t in CASES if "]." not in t and "]-" not in t])
def test_expand_equals_scontrol(text: str) -> None:
    assert expand(text) == scontrol_hostnames(text)


BAD = [
    "",
    "node[3-1]",
    "node[]",
    "node1,,node2",
    " node1",
    "n[1-2",
    "n1]",
    "n[a-b]",
    "n[1-2],",
    "n[0-999999999]",
    "n[1-3-5]",
    "n[-1]",
    "n[1-]",
    "[1-2]x",
    "n[" + "1" * 5000 + "]",
    "n[1-" + "9" * 19 + "]",
    "a b",
    "n[[1]]",
    "n;rm -rf /",
]


@pytest.mark.parametrize("text", BAD)
def test_malformed_hostlists_raise_naming_the_part(text: str) -> None:
    with pytest.raises(HostlistError) as err:
        expand(text)
    assert "bad hostlist" in str(err.value)


def test_error_names_the_bad_range() -> None:
    with pytest.raises(HostlistError, match=r"\[3-1\]"):
        expand("ok[1-2],node[3-1]")


@pytest.mark.parametrize(
    "names,text",
    [
        (["n1", "n2", "n3"], "n[1-3]"),
        (["n09", "n10", "n11"], "n[09-11]"),
        (["n3", "n1", "n2", "n2"], "n[3,1-2,2]"),
        (["n09", "n10", "n1"], "n[09-10,1]"),
        (["a", "b1", "b2", "c"], "a,b[1-2],c"),
        (["n9", "n10"], "n[9-10]"),
        (["n7"], "n7"),
        (["1", "2", "3"], "[1-3]"),
        (["n" + "1" * 5000], "n" + "1" * 5000),
    ],
)
def test_compress_keeps_order_like_scontrol_show_hostlist(names: list[str], text: str) -> None:
    assert compress(names) == text
    assert expand(text) == names


name = st.builds(
    lambda prefix, num, width: f"{prefix}{str(num).zfill(width)}",
    st.sampled_from(["n", "node", "gpu-", "rack1-b"]),
    st.integers(0, 2000),
    st.integers(1, 5),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(name | st.sampled_from(["login", "x-y", "a.b", "7", "08"]), min_size=1, max_size=60))
def test_compress_expand_round_trip(names: list[str]) -> None:
    assert expand(compress(names)) == names


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol not installed")
@settings(max_examples=40, deadline=None)
@given(st.lists(name, min_size=1, max_size=30))
def test_compressed_form_expands_the_same_in_scontrol(names: list[str]) -> None:
    assert scontrol_hostnames(compress(names)) == names


def test_size_guard_matches_slurm_range_limit() -> None:
    assert len(expand("n[0-65535]")) == 65536
    with pytest.raises(HostlistError, match="65536"):
        expand("n[0-65536]")
