"""Every node's stacks at a hang, grouped: both tools' formats read alike, the odd node first and named."""

from __future__ import annotations

from ti_slurm.job.supervisor.stacks import grouped_stacks, stack_of
from ti_slurm.job.watch import STACKS_MARK

FAULTHANDLER = f"""step 9 loss 0.1111
ti-slurm: node n1: hung: no step for 61 s after step 10; {STACKS_MARK}
Fatal Python error: Aborted

Thread 0x00007f3a1c9ff6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/usr/lib/python3.11/threading.py", line 629 in wait

Current thread 0x00007f3a2b5e0740 (most recent call first):
  File "/work/train.py", line 57 in allreduce
  File "/work/train.py", line 83 in main
  File "/work/train.py", line 87 in <module>

Extension modules: numpy.core._multiarray_umath (total: 1)
"""

# py-spy dump of the same process, its threads in the other order, other ids
PY_SPY = f"""ti-slurm: node n0: asked for its stacks (another node hung); {STACKS_MARK}
Process 4242: python3 /work/train.py
Python v3.11.2 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    allreduce (train.py:57)
    main (train.py:83)
    <module> (train.py:87)
Thread 4250 (idle): "Thread-1"
    wait (threading.py:327)
    wait (threading.py:629)
"""


def test_faulthandler_and_py_spy_dumps_of_the_same_place_are_one_stack() -> None:
    fault, spy = stack_of(FAULTHANDLER), stack_of(PY_SPY)
    assert fault == spy
    assert ("train.py:57 in allreduce", "train.py:83 in main", "train.py:87 in <module>") in (fault or ())


def test_a_log_without_a_dump_has_no_stack_and_only_the_last_dump_counts() -> None:
    assert stack_of("step 1\nstep 2\n") is None
    older = PY_SPY.replace("train.py:57", "train.py:12")
    assert stack_of(older + "step 11\n" + PY_SPY) == stack_of(PY_SPY)


def test_the_odd_node_comes_first_named_and_the_rest_share_one_group() -> None:
    same, odd = stack_of(PY_SPY), stack_of(PY_SPY.replace("allreduce (train.py:57)", "load (data.py:3)"))
    lines = grouped_stacks({"n0": same, "n1": odd, "n2": same, "n3": same, "n4": None}, first="n1")
    assert lines[0] == "the Python stacks of 5 node(s) at the hang, grouped (2 different):"
    groups = [line for line in lines if " node(s): " in line]
    assert groups == ["  1 node(s): n1 (stopped stepping first)", "  3 node(s): n0, n2, n3"]
    assert lines[2:4] == ["    thread 1:", "      data.py:3 in load"]
    assert lines[-1] == "  no stack printed: n4"
