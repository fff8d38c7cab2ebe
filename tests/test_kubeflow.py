"""Kubeflow's PyTorchJob contract: the PET_* variables its operator sets, read as torchrun
2.13 reads them (its own parser is the oracle), and two loopback "pods" that get only the
environment a PyTorchJob gives them train a real 2-node Gloo job to exit 0."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from conftest import _popen, assert_no_orphans, marked_env, worker
from hypothesis import given, settings
from hypothesis import strategies as st
from leaks import MARK_VAR

from safelaunch.cli.sources import parse_launch

JOB = worker("multinode.py")
# Valid values per torchrun option, as an operator or a manifest writes them.
VALUES = {
    "nnodes": ["1", "2", "2:4", "1:8"],
    "nproc_per_node": ["1", "2", "8", "cpu"],
    "rdzv_backend": ["static", "c10d"],
    "rdzv_endpoint": ["job-worker-0:29400", "10.0.0.1:23456"],
    "rdzv_id": ["pytorchjob-1", "abc"],
    "rdzv_conf": ["join_timeout=900", "timeout=60,read_timeout=30"],
    "max_restarts": ["0", "3"],
    "monitor_interval": ["0.5", "5"],
    "node_rank": ["0", "1", "3"],
    "master_addr": ["job-master-0", "10.1.2.3"],
    "master_port": ["23456", "29500"],
    "role": ["trainer"],
    "standalone": ["0", "1"],
    "logs_specs": ["plugin"],  # torchrun reads no PET_ variable for these two
    "numa_binding": ["node"],
}


@st.composite
def _settings(draw: st.DrawFn) -> tuple[dict[str, str], list[str], set[str]]:
    """Some options as PET_ variables, some (maybe the same) as flags."""
    names = sorted(VALUES)
    in_env = draw(st.sets(st.sampled_from(names), max_size=6))
    on_line = draw(st.sets(st.sampled_from(names), max_size=3))
    env = {f"PET_{n.upper()}": draw(st.sampled_from(VALUES[n])) for n in in_env}
    args = []
    for name in sorted(on_line):
        value = draw(st.sampled_from(VALUES[name]))
        flag = "--" + name.replace("_", "-")
        if name == "standalone":
            args += [flag] if value == "1" else []
        else:
            args.append(f"{flag}={value}")
    return env, args, in_env | on_line


@settings(max_examples=60, deadline=None)
@given(_settings())
def test_pet_variables_and_flags_resolve_as_torchruns_own_parser(
    case: tuple[dict[str, str], list[str], set[str]],
) -> None:
    from torch.distributed.run import get_args_parser

    env, args, named = case
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
        theirs = vars(get_args_parser().parse_args([*args, "train.py"]))  # reads PET_ now
    ours, explicit = parse_launch([*args, "train.py"], env)
    for name in named:
        assert str(ours[name]) == str(theirs[name]), (name, env, args)
        assert name in explicit or ours[name] in (False, None)  # given: SLURM's yield to it


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _static(port: int) -> Callable[[int], dict[str, str]]:
    """A Master/Worker PyTorchJob: the operator's MASTER_*/WORLD_SIZE/RANK (node-level,
    what it has always set) and the PET_ variables of torchrun's contract (Kubeflow
    Trainer's torch runtime and the operator with spec.nprocPerNode)."""

    def pod(node: int) -> dict[str, str]:
        return {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": "2",
            "RANK": str(node),
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "1",
            "PET_NODE_RANK": str(node),
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": str(port),
        }

    return pod


def _elastic(port: int) -> Callable[[int], dict[str, str]]:
    """elasticPolicy: {minReplicas: 2, maxReplicas: 2, rdzvBackend: c10d, rdzvPort,
    maxRestarts: 1, nProcPerNode: 1, rdzvConf: [...]}, as the operator turns it into
    variables (no node rank: the c10d rendezvous assigns it)."""

    def pod(node: int) -> dict[str, str]:
        return {
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
            "PET_RDZV_BACKEND": "c10d",
            "PET_NNODES": "2:2",
            "PET_MAX_RESTARTS": "1",
            "PET_NPROC_PER_NODE": "1",
            "PET_RDZV_ID": "pytorchjob-elastic",
            "PET_RDZV_CONF": "join_timeout=60,keep_alive_interval=1,keep_alive_max_attempt=3",
        }

    return pod


# the elastic contract is a second pair of pods (~10-40 s): opt-in, as the suite's other
# long cases (SAFELAUNCH_LONG_TESTS=1); the static one runs in CI
LONG = pytest.mark.skipif(
    not os.environ.get("SAFELAUNCH_LONG_TESTS"), reason="opt-in (SAFELAUNCH_LONG_TESTS=1)"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "contract",
    [_static, pytest.param(_elastic, marks=LONG)],
    ids=["master-worker", "elastic"],
)
def test_two_pods_with_only_a_pytorchjobs_environment_train_to_exit_0(
    tmp_path: Path, contract: Callable[[int], Callable[[int], dict[str, str]]]
) -> None:
    pod_env = contract(_free_port())
    started = []
    for node in (0, 1):
        where = tmp_path / f"pod{node}"
        (where / "home").mkdir(parents=True)
        _, mark = marked_env(where)  # the sweep's mark: the one variable a pod would not have
        env = {
            # what the container runtime and Kubernetes give every pod
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(where / "home"),
            "HOSTNAME": f"pytorchjob-worker-{node}",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "PYTHONUNBUFFERED": "0",  # the operator's
            # the manifest's own env: what the job's worker reads, and an --on-verdict alert
            "PIDS_DIR": str(where / "pids"),
            "SAFELAUNCH_ON_VERDICT": 'echo "$SAFELAUNCH_NODE_RANK $SAFELAUNCH_STATUS '
            '$SAFELAUNCH_EXIT_CODE" > "$PIDS_DIR/verdict"',
            **pod_env(node),
            MARK_VAR: mark,
        }
        started.append((_popen(["safelaunch", JOB], where, env, text=True), mark))
    told = set()
    for node, (proc, mark) in enumerate(started):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert f"trained RANK={node} LOCAL_RANK=0 GROUP_RANK={node} WORLD_SIZE=2 world=2" in out
        # the operator's RANK/WORLD_SIZE/MASTER_* are the pod's, not a launcher's: no warning
        assert "already set in safelaunch's environment" not in err, err
        assert_no_orphans(mark, within=3.0)
        told.add((tmp_path / f"pod{node}" / "pids" / "verdict").read_text())
    # each node's alert: the job's verdict, with the node the rendezvous gave it
    assert told == {"0 succeeded 0\n", "1 succeeded 0\n"}


def test_the_manifests_command_is_a_launch_safelaunch_accepts() -> None:
    import re

    from safelaunch.cli.options import OPTIONS
    from safelaunch.config import build_config

    root = Path(__file__).parents[1]
    manifest = (root / "configs" / "pytorchjob.yaml").read_text()
    block = manifest.split("command:\n", 1)[1].split("env:\n", 1)[0]
    command = [re.sub(r"\s+#.*$", "", line.strip()[2:]) for line in block.splitlines()]
    assert command[0] == "safelaunch"
    raw, explicit = parse_launch(command[1:], {})
    config = build_config(raw, {}, explicit)
    assert config.training_script == "train.py" and config.metrics_port == 9400
    # every PET_ variable the page names is one an option reads
    documented = set(
        re.findall(r"`(PET_[A-Z_]*[A-Z])`", (root / "docs" / "kubernetes.md").read_text())
    )
    read = {name for spec in OPTIONS.values() for name in spec.env}
    assert documented - read == {"PET_N_PROC_PER_NODE"}  # the old spelling nobody reads
