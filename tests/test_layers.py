"""Classes from the traceback's layers (diagnose/layers.py, layerclass.py).

Every row of the rules table has a real traceback (tests/fixtures/layers/, captured
from torch 2.13 on CPU) that it, and no message signature, decides; look-alikes made
from those logs must not fit it. The generated faults (exception_faults.py) score the
whole pipeline in test_layer_faults.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import launch

from safelaunch.diagnose.layerclass import LAYER_RULES, describe
from safelaunch.diagnose.layers import Layer, Phase, layer_of, read_fault
from safelaunch.diagnose.match import matches
from safelaunch.diagnose.rootcause import RankEvidence, find_root_cause

FIXTURES = Path(__file__).parent / "fixtures" / "layers"


def _root(text: str, seq: int | None = None, beat: bool = False):  # type: ignore[no-untyped-def]
    evidence = RankEvidence(rank=0, text=text, failed=True, code=1, seq=seq, beat=beat)
    root = find_root_cause([evidence])
    assert root is not None
    return root


@pytest.mark.parametrize("rule", [r.id for r in LAYER_RULES])
def test_each_rule_has_a_real_log_that_it_decides(rule: str) -> None:
    text = (FIXTURES / f"{rule}.log").read_text()
    assert not matches(text, None), "a message signature decides this log: not the layers"
    root = _root(text)
    assert root.signature is not None and root.signature.id == f"layer-{rule}"
    assert root.klass == next(r.klass for r in LAYER_RULES if r.id == rule)


def _swap(rule: str, old: str, new: str) -> str:
    text = (FIXTURES / f"{rule}.log").read_text()
    assert old in text
    return text.replace(old, new)


# (rule, the fixture changed so that it must no longer fit that rule)
LOOK_ALIKES = [
    # a checkout of the user's own named torch/ is the user's code, not torch's
    ("data-loading", "/opt/venv/lib/python3.11/site-packages/torch/", "/home/u/torch/"),
    ("model", "/opt/venv/lib/python3.11/site-packages/torch/", "/home/u/proj/torch/"),
    ("autograd", "site-packages/torch/", "src/torch/"),
    ("optimizer", "site-packages/torch/optim/", "site-packages/torch/_vendored/"),
    ("checkpoint", "site-packages/torch/serialization.py", "site-packages/torch/hub.py"),
    ("cuda", "site-packages/torch/cuda/", "site-packages/torchx/cuda/"),
    ("c10d", "site-packages/torch/distributed/", "site-packages/torch/testing/"),
    # a KeyError of a dict of the user's, not os.environ's
    ("env-var", '  File "<frozen os>", line 679, in __getitem__\n', ""),
    # the errno's words in a message that is no OSError
    ("network-errno", "ConnectionRefusedError: [Errno 111]", "ValueError: retry [Errno 111]"),
    ("path", "FileExistsError: [Errno 17]", "AssertionError: saw [Errno 17]"),
    ("running-out", "OSError: [Errno 122]", "KeyError: [Errno 122]"),
    # the user's own module of the same name is not the standard library's
    ("network", "/usr/local/lib/python3.11/socket.py", "/home/u/proj/socket.py"),
    ("subprocess", "/lib/python3.11/subprocess.py", "/proj/subprocess.py"),
    ("files", "/lib/python3.11/shutil.py", "/proj/shutil.py"),
    ("multiprocessing", "/lib/python3.11/multiprocessing/", "/proj/multiprocessing/"),
    # the name of a decode error in another error's message
    ("decode", "json.decoder.JSONDecodeError:", "ValueError: JSONDecodeError upstream:"),
    ("unpickle", "_pickle.UnpicklingError:", "RuntimeError: UnpicklingError:"),
    # the same AttributeError raised in the user's code, not a package's
    ("package-api", "/site-packages/vendorkit/", "/proj/vendorkit/"),
]


@pytest.mark.parametrize(("rule", "old", "new"), LOOK_ALIKES, ids=[r for r, *_ in LOOK_ALIKES])
def test_look_alikes_do_not_fit_the_rule(rule: str, old: str, new: str) -> None:
    root = _root(_swap(rule, old, new))
    assert root.signature is None or root.signature.id != f"layer-{rule}"


def test_in_init_process_group_is_setup_and_after_it_communication() -> None:
    setup = _root((FIXTURES / "c10d-setup.log").read_text())
    assert setup.klass == "environment/launch"
    later = _root((FIXTURES / "c10d.log").read_text())  # torch marked its lines: after init
    assert later.klass == "communication"
    fault = read_fault((FIXTURES / "c10d.log").read_text(), seq=0, beat=True)
    assert fault is not None and fault.phase == Phase.BEFORE_FIRST


@pytest.mark.parametrize(
    ("path", "func", "layer"),
    [
        ("/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", "", "TORCH_DATA"),
        ("/usr/lib/python3/dist-packages/torch/cuda/__init__.py", "_lazy_init", "TORCH_CUDA"),
        ("/v/lib/python3.11/site-packages/torch/_tensor.py", "backward", "TORCH_AUTOGRAD"),
        ("/v/lib/python3.11/site-packages/torch/_tensor.py", "__format__", "TORCH_TENSOR"),
        ("/v/lib/python3.11/site-packages/torch/_ops.py", "__call__", "TORCH"),
        ("/v/lib/python3.11/site-packages/numpy/core/fromnumeric.py", "", "THIRD_PARTY"),
        ("<frozen os>", "__getitem__", "STDLIB_ENV"),
        ("/usr/lib/python3.10/os.py", "__getitem__", "STDLIB_ENV"),
        ("/usr/lib/python3.10/json/decoder.py", "raw_decode", "STDLIB_DECODE"),
        ("/usr/lib/python3.12/http/client.py", "begin", "STDLIB_NET"),
        ("/usr/lib/python3.12/threading.py", "run", "STDLIB"),
        ("/home/u/train.py", "main", "USER"),
        ("/home/u/lib/python_tools/x.py", "main", "USER"),
        ("/w/safelaunch/rank/bootstrap.py", "main", "WRAPPER"),
    ],
)
def test_layer_of_a_frame(path: str, func: str, layer: str) -> None:
    assert layer_of(path, func) == Layer[layer]


def test_an_unknown_says_what_it_saw_and_which_file_to_read() -> None:
    text = (
        "[rank0]:Traceback (most recent call last):\n"
        '[rank0]:  File "/home/u/train.py", line 40, in <module>\n'
        "[rank0]:    step(batch)\n"
        '[rank0]:  File "/home/u/train.py", line 12, in step\n'
        "[rank0]:    raise ValueError(f'bad {x}')\n"
        "[rank0]:ValueError: bad 3\n"
    )
    root = _root(text, seq=7, beat=True)
    assert root.klass == "unknown" and root.signature is None
    assert root.seen == (
        "ValueError raised in your code, after 7 collective(s), read /home/u/train.py:12 first"
    )
    package = (FIXTURES / "package-api.log").read_text().replace("AttributeError", "KeyError")
    fault = read_fault(package)
    assert fault is not None and fault.package == "vendorkit"
    assert describe(fault).startswith("KeyError raised in a third-party package 'vendorkit'")
    assert "core.py:14 first, called from /tmp/capture_layers.py:53" in describe(fault)


def test_consequences_stay_consequences() -> None:
    """A survivor's "Connection closed by peer" raised in torch.distributed is no c10d cause."""
    text = (
        "[rank0]:Traceback (most recent call last):\n"
        '[rank0]:  File "/home/u/train.py", line 9, in <module>\n'
        '[rank0]:  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 3252, in all_reduce\n"
        "[rank0]:RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1\n"
    )
    assert _root(text).signature is None


MISSING_ENV = """
import os
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    root = os.environ["SHARD_ROOT_H25"]
dist.barrier()
"""


def test_a_real_launch_classes_a_missing_variable_from_its_layer(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(MISSING_ENV)
    run = launch(tmp_path, "--nproc-per-node=2", str(script), timeout=120)
    assert run.returncode == 1, run.stderr
    assert "FAILED: rank 1 " in run.stderr
    assert "class: environment/launch (layer-env-var)" in run.stderr
    assert "train.py:7 in <module>" in run.stderr


PLAIN = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
for step in range(3):
    dist.all_reduce(torch.ones(2))
if dist.get_rank() == 0:
    raise LookupError("no route for step")
dist.barrier()
"""


def test_a_real_launch_says_what_an_unknown_saw(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PLAIN)
    run = launch(tmp_path, "--nproc-per-node=2", str(script), timeout=120)
    assert run.returncode == 1, run.stderr
    assert "class: unknown: no rule decides; seen: LookupError raised in your code" in run.stderr
    assert "after 3 collective(s)" in run.stderr and "train.py:7 first" in run.stderr


def test_every_rule_is_in_the_documented_table() -> None:
    docs = (Path(__file__).parents[1] / "docs" / "signatures.md").read_text()
    table = docs.split("## Classes from the traceback's layers", 1)[1]
    for rule in LAYER_RULES:
        assert f"| `layer-{rule.id}` | {rule.stage} |" in table, rule.id
