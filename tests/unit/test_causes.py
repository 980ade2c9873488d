"""A failure's cause from its logs: the signatures against real messages (PyTorch, NCCL, CUDA, Slurm, the kernel,
MindSpore/HCCL), the root among several failed nodes, and the restart decision that follows the cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from ti_slurm.core.causes import CAUSES, Evidence, classify, compiled, restart_allowed, restart_word, root_of

# messages as those programs print them (copied from their sources' format strings and real logs)
REAL = {
    "gpu_oom": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of"
        " 79.15 GiB of which 3.19 GiB is free.",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 1; 15.78 GiB total capacity)",
        "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB (NPU 3; 32.00 GiB total capacity)",
    ],
    "host_oom": [
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM"
        " Killed.",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0 cgroup.",
        "[12345.678901] Out of memory: Killed process 4321 (python) total-vm:123456kB, anon-rss:98765kB",
        "[12345.678] Memory cgroup out of memory: Killed process 4321 (python)",
    ],
    "gpu_fault": [
        "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "[ 99.1] NVRM: Xid (PCI:0000:86:00): 48, pid=4455, An uncorrectable double bit error (DBE) has been detected",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization: GPU is lost",
    ],
    "nccl": [
        "[rank1]:[E1206 10:11:12.123456 4242 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran"
        " for 600010 milliseconds before timing out.",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275,"
        " unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "ncclInternalError: Internal check failed.",
        "EI0006: Getting socket times out. Reason: 1. The remote does not initiate a connect request. (HCCL)",
        "RuntimeError: HCCL function error: HcclAllReduce, error code is 9",
    ],
    "nan": [
        "step 1200: loss nan",
        "ValueError: Loss is nan, stopping training",
        "RuntimeError: Function 'MseLossBackward0' returned nan values in its 0th output. detected NaN in loss",
    ],
    "filesystem": [
        "OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_1200.pt'",
        "OSError: [Errno 116] Stale file handle",
        "OSError: [Errno 5] Input/output error",
    ],
    "user_error": [
        "Traceback (most recent call last):",
        "ModuleNotFoundError: No module named 'transformers'",
        "python: can't open file '/home/alice/trian.py': [Errno 2] No such file or directory",
        "bash: line 1: trian.py: command not found",
        "KeyError: 'labels'",
    ],
}


@pytest.mark.parametrize(("cause", "line"), [(c, line) for c, lines in REAL.items() for line in lines])
def test_each_real_message_names_its_cause(cause: str, line: str) -> None:
    found = classify(["epoch 3 step 1190 loss 0.25", line, "done"], compiled(), first=41)
    assert found is not None and (found.cause, found.number, found.line) == (cause, 42, line.strip()[:300])


def test_the_specific_cause_wins_over_the_traceback_around_it_and_nothing_known_is_none() -> None:
    traceback = [
        "Traceback (most recent call last):",
        '  File "train.py", line 40, in <module>',
        "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.",
    ]
    found = classify(traceback, compiled())
    assert found is not None and (found.cause, found.number) == ("gpu_oom", 4)
    assert classify(["epoch 1 loss 0.5", "exiting with 3"], compiled()) is None
    assert classify(["Killed"], compiled()) is None  # a bare "Killed" is no proof of an OOM kill
    assert set(REAL) <= set(CAUSES)


def test_a_sites_own_signature_is_tried_first() -> None:
    site = compiled([("gpu_fault", r"healthcheck: GPU \d+ failed")])
    found = classify(["healthcheck: GPU 3 failed", "Traceback (most recent call last):"], site)
    assert found is not None and found.cause == "gpu_fault"


def test_the_root_is_the_first_failure_that_is_no_collective_cascade() -> None:
    nccl_first = Evidence("nccl", "Watchdog caught collective operation timeout", 9, node="node01")
    oom_later = Evidence("gpu_oom", "CUDA out of memory", 57, node="node02")
    root, after = root_of([(100.0, nccl_first), (101.0, oom_later)])
    assert root is oom_later and after == [nccl_first]
    only_nccl = Evidence("nccl", "NCCL error", 3, node="node03")
    assert root_of([(5.0, only_nccl)]) == (only_nccl, [])
    assert root_of([]) == (None, [])
    # one rank exits 3 saying nothing; the other raises as its peer is gone, even a moment before: unknown, not
    # the other's collective error
    gone = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]"
    peer_gone = classify([gone], compiled())
    assert peer_gone is not None and peer_gone.cause == "nccl"
    assert root_of([(10.0, peer_gone), (10.2, None)]) == (None, [peer_gone])
    # a rank's own bug is the root when it failed first
    typo = Evidence("user_error", "NameError: name 'lsos' is not defined", 12, node="node02")
    assert root_of([(9.0, typo), (10.0, peer_gone)]) == (typo, [peer_gone])
    # ... but a GPU fault on a later rank is no consequence of a rank that said nothing
    xid = Evidence("gpu_fault", "NVRM: Xid 79", 7, node="node04")
    assert root_of([(10.0, None), (12.0, xid)]) == (xid, [])


def test_the_decision_follows_the_cause() -> None:
    on = ("failure",)
    assert restart_allowed("gpu_fault", on, []) == (True, "")
    assert restart_allowed("user_error", on, [])[0]  # once
    allowed, why = restart_allowed("user_error", on, ["user_error"])
    assert not allowed and why.startswith("user_error twice in a row")  # the same bug again: stop
    assert restart_allowed("user_error", on, ["gpu_fault"])[0]  # not twice in a row
    assert restart_allowed("user_error", ("failure", "user_error"), ["user_error"]) == (True, "")  # cap lifted
    assert not restart_allowed("nan", ("timeout",), [])[0]
    assert restart_allowed("launch", ("node_fail",), [])[0] and restart_word("launch") == "node_fail"
    assert restart_word("gpu_oom") == "failure" and restart_word("hang") == "hang"
    assert restart_allowed("", on, []) == (False, "")


def test_the_progress_watchdog_learns_the_step_interval_and_calls_a_stall(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Steps every 2 s, then none: not hung at 59 s (the floor is 60 s), hung past it, naming the last step."""
    import os

    from ti_slurm.job.watch import ProgressWatch

    path = tmp_path / "progress"
    watch = ProgressWatch(str(path))
    assert watch.look(0.0) == ""  # nothing written yet
    for k in range(1, 6):
        path.write_text(f"{k}\n")
        os.utime(path, (1000.0 + k, 1000.0 + k))  # the file's time tells a new write
        assert watch.look(2.0 * k) == ""
    assert watch.look(10.0 + 59.0) == ""
    said = watch.look(10.0 + 61.0)
    assert said.startswith("hung: no step for 61 s after step 5 (its steps came every 2.0 s") and said.endswith("60 s)")
    slow = ProgressWatch(str(tmp_path / "slow"))  # steps every 40 s: 3x its interval is the limit
    for k in range(1, 5):
        (tmp_path / "slow").write_text(f"{k}\n")
        os.utime(tmp_path / "slow", (2000.0 + k, 2000.0 + k))
        slow.look(40.0 * k)
    assert slow.look(160.0 + 119.0) == "" and slow.look(160.0 + 121.0).startswith("hung: no step for 121 s")


def test_no_progress_in_three_attempts_stops_the_job() -> None:
    from ti_slurm.core.causes import no_progress

    assert no_progress(["1200", "1200", "1150", "1200"]) == "no progress in 3 attempts (last step 1200)"
    assert no_progress(["1200", "1300", "1200", "1200"]) == ""  # the second attempt got further
    assert no_progress(["1200", "", "", ""]) == "no progress in 3 attempts (last step 1200)"  # no step at all since
    assert no_progress(["", "", "", ""]) == ""  # a job that reports no steps is never stopped so
    assert no_progress(["100", "100", "100"]) == ""  # three attempts in all: not three after a best one


def test_a_launchers_report_of_its_childs_exit_is_no_evidence() -> None:
    """torchrun prints a traceback of its own when a child exits non-zero: the child's words are the evidence
    (here none: unknown), never the launcher's."""
    child_exits = [
        "rank 1: exiting 3 on purpose at step 25",
        "E1206 20:27:48.772000 29195 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed"
        " (exitcode: 3) local_rank: 0 (pid: 29202) of binary: /usr/bin/python",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    assert classify(child_exits, compiled()) is None
    own = ["Traceback (most recent call last):", "NameError: name 'lsos' is not defined", *child_exits[1:]]
    found = classify(own, compiled())
    assert found is not None and (found.cause, found.number) == ("user_error", 2)


def test_a_traceback_of_rays_own_daemon_on_a_worker_is_no_user_bug(tmp_path: Path) -> None:
    """A Ray worker node runs Ray's daemons, not the start command: its traceback (a raylet that did not come up
    on a loaded machine) is the runtime's, so `unknown` (retried under `failure`), never `user_error` (which stops
    restarts); the same traceback on the head, which runs the command, is the user's."""
    from tests.factories import job_plan
    from ti_slurm.core.events import NodeExit
    from ti_slurm.core.paths import JobPaths
    from ti_slurm.job.supervisor.blame import failure_evidence

    plan = job_plan("ray", ("head", 1), ("worker1", 1))
    paths = JobPaths(str(tmp_path))
    (tmp_path / "logs").mkdir()
    said = "Traceback (most recent call last):\n  File \"node.py\", line 440\nException: The current node timed out\n"
    for component in ("head", "worker1"):
        with open(paths.node_log(component, 0), "w") as fh:
            fh.write(said)
        record = NodeExit(component, 0, f"{component}-host", 1, 1.0, 2.0)
        root, _ = failure_evidence(plan, paths, {(component, 0): record})
        assert root is not None and root.line == "Exception: The current node timed out"
        assert root.cause == ("user_error" if component == "head" else "unknown"), component
