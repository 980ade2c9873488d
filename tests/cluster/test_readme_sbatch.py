"""docs/sbatch.md's hand-written sbatch example runs on the cluster exactly as printed."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import ROOT, sbatch_and_wait
from tests.docs import doc_block
from tests.testcluster import this_cluster

pytestmark = pytest.mark.usefixtures("cluster")


def test_example_file_is_the_readme_block() -> None:
    assert (ROOT / "examples" / "ddp" / "by-hand.sbatch").read_text() == doc_block("by-hand-sbatch")


def test_readme_sbatch_example_trains_on_two_nodes(tmp_path) -> None:
    script = tmp_path / "by-hand.sbatch"
    script.write_text(doc_block("by-hand-sbatch"))
    job_id = sbatch_and_wait(script, cwd=ROOT)
    out = ROOT / f"ddp-by-hand-{job_id}.out"
    try:
        text = out.read_text()
        ranks = dict(re.findall(r"rank (\d)/4 on (node\d\d)", text))
        assert sorted(ranks) == ["0", "1", "2", "3"], text
        assert len(set(ranks.values())) == 2
        assert text.count("in_sync=True") == 4
    finally:
        out.unlink(missing_ok=True)


def test_eval_env_in_a_hand_written_step(tmp_path) -> None:
    script = tmp_path / "env.sbatch"
    out = tmp_path / "out.txt"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:2\n"
        f"#SBATCH --output={out}\n"
        'srun bash -c \'eval "$(ti-slurm env --mode mpi)"; '
        'echo "$INDEX $NODE_IP_SLOT_LIST $(wc -l < $OMPI_MCA_orte_default_hostfile) $(command -v ssh)"\'\n'
    )
    sbatch_and_wait(script)
    lines = sorted(out.read_text().splitlines())
    assert [line.split()[0] for line in lines] == ["0", "1"]
    assert all(
        re.fullmatch(rf"[01] {(addr := this_cluster().node_addr_rx)}:2,{addr}:2 2 /\S+/bin/ssh", line) for line in lines
    ), lines


def test_exec_in_a_hand_written_heterogeneous_job(tmp_path) -> None:
    out = tmp_path / "out.txt"
    script = tmp_path / "het.sbatch"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --output={out}\n#SBATCH --nodes=1\n#SBATCH hetjob\n#SBATCH --nodes=2\n"
        "srun --het-group=0 ti-slurm exec --mode ps-worker -- bash -c 'echo \"$INDEX $TF_CONFIG\"' &\n"
        "srun --het-group=1 ti-slurm exec --mode ps-worker -- bash -c 'echo \"$INDEX $TF_CONFIG\"'\nwait\n"
    )
    sbatch_and_wait(script)
    text = out.read_text()
    tasks = sorted(line.split(" ", 1) for line in text.splitlines())
    assert [index for index, _ in tasks] == ["0", "1", "2"], text  # the component is found from Slurm's variables
    configs = [json.loads(cfg) for _, cfg in tasks]
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == [("ps", 0), ("worker", 0), ("worker", 1)]
    assert len(configs[0]["cluster"]["worker"]) == 2


def test_modelarts_variables_in_a_hand_written_job(tmp_path) -> None:
    """`ti-slurm env --platform modelarts` and `exec --platform modelarts`, as a hand-written sbatch uses them."""
    out = tmp_path / "out.txt"
    script = tmp_path / "ma.sbatch"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:2\n#SBATCH --output={out}\n"
        'srun bash -c \'eval "$(ti-slurm env --mode ddp --platform modelarts)"; '
        'echo "env $VC_TASK_INDEX $MA_NUM_HOSTS $MA_NUM_GPUS ${VC_WORKER_HOSTS%%,*} $MASTER_ADDR"\'\n'
        "srun ti-slurm exec --mode ddp --platform modelarts -- "
        "bash -c 'echo \"exec $VC_TASK_INDEX $MA_TASK_NAME $MA_CURRENT_IP $(hostname -I)\"'\n"
    )
    sbatch_and_wait(script)
    lines = sorted(out.read_text().splitlines())
    envs = [line.split() for line in lines if line.startswith("env ")]
    assert [fields[1:4] for fields in envs] == [["0", "2", "2"], ["1", "2", "2"]], lines
    assert all(fields[4] == fields[5] for fields in envs)  # ModelArts' master line names MASTER_ADDR's node
    execs = [line.split() for line in lines if line.startswith("exec ")]
    assert [fields[1:3] for fields in execs] == [["0", "worker"], ["1", "worker"]], lines
    assert all(fields[3] in fields[4:] for fields in execs)  # MA_CURRENT_IP is the node's own address
