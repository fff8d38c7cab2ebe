"""System checks: pure rules on tables, the real interfaces of this host, and the CLI."""

from __future__ import annotations

import resource
import socket
from pathlib import Path

import pytest
from conftest import cli, worker

from safelaunch import exitcodes
from safelaunch.preflight.system import (
    ERROR,
    OK,
    WARNING,
    address_finding,
    interface_findings,
    limits_finding,
    memlock_finding,
    nested_finding,
    shm_finding,
)

INTERFACES = ["lo", "eth0", "eth1", "ib0"]


@pytest.mark.parametrize(
    ("size", "level"),
    [(None, WARNING), (64 << 20, WARNING), ((1 << 30) - 1, WARNING), (8 << 30, OK)],
)
def test_shm(size: int | None, level: str) -> None:
    assert shm_finding(size).level == level


def test_open_files_and_locked_memory_limits() -> None:
    assert limits_finding(1024).level == WARNING
    assert limits_finding(1 << 20).level == OK
    assert memlock_finding(8 << 20, gpus=8).level == WARNING  # RDMA would fail to pin
    assert memlock_finding(8 << 20, gpus=0).level == OK  # no GPUs: nothing to pin
    assert memlock_finding(resource.RLIM_INFINITY, gpus=8).level == OK


@pytest.mark.parametrize(
    ("environ", "levels"),
    [
        ({"NCCL_SOCKET_IFNAME": "eth"}, [OK]),  # a prefix
        ({"NCCL_SOCKET_IFNAME": "=eth"}, [ERROR]),  # exact: no interface is called "eth"
        ({"NCCL_SOCKET_IFNAME": "=eth1"}, [OK]),
        ({"NCCL_SOCKET_IFNAME": "bond"}, [ERROR]),
        ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, []),  # exclusions are not checked
        ({"GLOO_SOCKET_IFNAME": "eth0,ib0"}, [OK]),
        ({"GLOO_SOCKET_IFNAME": "eth0,eth9"}, [ERROR]),  # gloo opens each name
        ({"GLOO_SOCKET_IFNAME": "eth"}, [ERROR]),  # gloo takes no prefixes
    ],
)
def test_socket_interface_names(environ: dict[str, str], levels: list[str]) -> None:
    assert [f.level for f in interface_findings(environ, INTERFACES)] == levels


def test_real_interfaces_and_addresses_of_this_host() -> None:
    real = [name for _, name in socket.if_nameindex()]
    assert "lo" in real
    assert interface_findings({"GLOO_SOCKET_IFNAME": "lo"}, real)[0].level == OK
    assert interface_findings({"NCCL_SOCKET_IFNAME": "nosuchif"}, real)[0].level == ERROR
    assert address_finding("localhost").level == OK
    assert address_finding("no-such-host.invalid").level == ERROR


def test_nested_launch() -> None:
    assert nested_finding({}) is None
    finding = nested_finding({"RANK": "3", "LOCAL_RANK": "1", "MASTER_PORT": "1"})
    assert finding is not None and "RANK, LOCAL_RANK, MASTER_PORT" in finding.message
    assert nested_finding({"TORCHELASTIC_RUN_ID": "x"}) is not None  # inside torchrun
    # a scheduler's per-node variables (Kubeflow's PyTorchJob pod): no launch inside a launch
    pod = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"}
    assert nested_finding(pod) is None


def _launch(tmp_path: Path, *args: str, env: dict[str, str]):
    return cli(tmp_path, *args, worker("dump_env.py"), env=env)


def test_an_error_stops_before_anything_starts(tmp_path: Path) -> None:
    result = _launch(tmp_path, env={"GLOO_SOCKET_IFNAME": "nosuchif0"})
    assert result.returncode == exitcodes.PREFLIGHT
    assert result.stderr.count("\n") == 1 and "matches no interface" in result.stderr
    assert not list((tmp_path / "pids").iterdir())


def test_unresolvable_master_addr_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    result = _launch(tmp_path, "--master-addr=no-such-host.invalid", env={})
    assert result.returncode == exitcodes.PREFLIGHT
    assert result.stderr.count("\n") == 1 and "does not resolve" in result.stderr
    assert not list((tmp_path / "pids").iterdir())


def test_warnings_are_said_once_and_strict_makes_them_fatal(tmp_path: Path) -> None:
    result = _launch(tmp_path, env={"LOCAL_RANK": "5"})
    assert result.returncode == 0
    assert result.stderr.count("safelaunch: warning: LOCAL_RANK already set") == 1
    strict = _launch(tmp_path, "--strict", env={"LOCAL_RANK": "5"})
    assert strict.returncode == exitcodes.PREFLIGHT
    assert "--strict made it fatal" in strict.stderr


def test_no_preflight_skips_the_checks(tmp_path: Path) -> None:
    result = _launch(tmp_path, "--no-preflight", env={"GLOO_SOCKET_IFNAME": "nosuchif0"})
    assert result.returncode == 0, result.stderr
