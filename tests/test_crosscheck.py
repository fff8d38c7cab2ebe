"""Preflight's cross-check: what the script uses against what the machine offers.

The uses are read from lint's parse (lint/uses.py) and cached with its findings; the
check (preflight/crosscheck.py) is pure over them and the machine's facts.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from conftest import launch
from test_plan import _plan

from safelaunch.lint import LintResult, ScriptUses, from_json, lint_source, to_json
from safelaunch.lint.cache import lint_cached
from safelaunch.preflight.crosscheck import TORCHRUN_NAMES, cross_check, rank_names
from safelaunch.preflight.probe import TorchFacts

HEAD = "import os\nimport torch\nimport torch.distributed as dist\nfrom pathlib import Path\n"


def _uses(body: str) -> ScriptUses:
    return lint_source(HEAD + body).uses


@pytest.mark.parametrize(
    ("body", "field", "expected"),
    [
        ("m = torch.nn.Linear(2, 2).cuda()\n", "cuda", (5,)),
        ("torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n", "cuda", (5,)),
        ("x = torch.ones(2, device='cuda:1')\n", "cuda", (5,)),
        ("x = torch.ones(2).to('cuda')\n", "cuda", (5,)),
        # guarded, or fine without a GPU: not a use
        ("if torch.cuda.is_available():\n    m = m.cuda()\n", "cuda", ()),
        ("d = 'cuda' if torch.cuda.is_available() else 'cpu'\nx = x.to(d)\n", "cuda", ()),
        ("n = torch.cuda.device_count()\ntorch.cuda.manual_seed_all(0)\n", "cuda", ()),
        ("x = x.to('cpu')\n", "cuda", ()),
        ("dist.init_process_group('nccl')\n", "nccl", (5,)),
        ("dist.init_process_group(backend='cpu:gloo,cuda:nccl')\n", "nccl", (5,)),
        ("dist.init_process_group(backend='gloo')\n", "nccl", ()),
        (
            "b = 'nccl' if torch.cuda.is_available() else 'gloo'\ndist.init_process_group(b)\n",
            "nccl",
            (),
        ),
        ("root = os.environ['DATA_ROOT']\n", "env", (("DATA_ROOT", 5),)),
        ("from os import environ\nroot = environ['DATA_ROOT']\n", "env", (("DATA_ROOT", 6),)),
        ("root = os.environ.get('DATA_ROOT')\nr = os.getenv('X')\n", "env", ()),
        ("if 'DATA_ROOT' in os.environ:\n    root = os.environ['DATA_ROOT']\n", "env", ()),
        ("try:\n    r = os.environ['DATA_ROOT']\nexcept KeyError:\n    r = '.'\n", "env", ()),
        ("os.environ['OUT'] = '1'\n", "env", ()),  # a write
        ("f = open('data/train.csv')\n", "paths", (("data/train.csv", 5),)),
        ("f = open('x.bin', 'rb')\n", "paths", (("x.bin", 5),)),
        ("t = Path('/data/cfg.yaml').read_text()\n", "paths", (("/data/cfg.yaml", 5),)),
        ("s = torch.load('ckpt/last.pt')\n", "paths", (("ckpt/last.pt", 5),)),
        ("f = open('out.txt', 'w')\n", "paths", ()),  # written: need not exist
        ("f = open(f'{d}/x.csv')\nf = open('shard_*.bin')\n", "paths", ()),
        ("if os.path.exists('x.csv'):\n    f = open('x.csv')\n", "paths", ()),
    ],
)
def test_what_the_script_uses(body: str, field: str, expected: tuple[object, ...]) -> None:
    assert getattr(_uses(body), field) == expected


def _check(uses: ScriptUses, gpus: int = 0, torch: TorchFacts | None = None, **env: str):
    return [
        f.message
        for f in cross_check(
            uses,
            script="train.py",
            gpus=gpus,
            torch=torch,
            rank_env=rank_names(env),
            cwd=Path(__file__).parent,
        )
    ]


CPU_BUILD = TorchFacts(torch="2.13.0+cpu", cuda=None, gloo=True)
CUDA_BUILD = TorchFacts(torch="2.13.0", cuda="12.8", nccl_available=True, nccl="2.27.3", gloo=True)


def test_cuda_and_nccl_against_the_gpus_and_the_build() -> None:
    uses = ScriptUses(cuda=(7, 9), nccl=(3,))
    assert _check(uses) == [
        "train.py:7 uses CUDA but no GPU is visible here",
        "train.py:3 asks for the NCCL backend but no GPU is visible here",
    ]
    assert _check(uses, gpus=2, torch=CPU_BUILD) == [
        "train.py:7 uses CUDA but torch here is a CPU build (2.13.0+cpu)",
        "train.py:3 asks for the NCCL backend but torch here has no NCCL",
    ]
    assert _check(uses, gpus=2, torch=CUDA_BUILD) == []
    assert _check(ScriptUses(), gpus=0) == []


def test_variables_against_the_ranks_environment() -> None:
    uses = ScriptUses(env=(("DATA_ROOT", 4), ("LOCAL_RANK", 5), ("DATA_ROOT", 9), ("HOME", 6)))
    assert _check(uses, HOME="/root") == [
        "train.py:4 reads os.environ['DATA_ROOT'], which the ranks will not have"
    ]
    assert _check(uses, HOME="/root", DATA_ROOT="/d") == []


def test_literal_paths_against_the_working_directory(tmp_path: Path) -> None:
    here = Path(__file__).name  # relative to cwd=tests/
    uses = ScriptUses(paths=((here, 3), ("no/such.csv", 4), (str(tmp_path), 5), ("/no/x", 6)))
    assert _check(uses) == [
        f"train.py:4 reads 'no/such.csv', which does not exist here (relative to the working "
        f"directory {Path(__file__).parent})",
        "train.py:6 reads '/no/x', which does not exist here",
    ]


def test_the_names_the_launcher_adds_are_those_a_plan_gives() -> None:
    plan = _plan(environ={"PATH": "/bin"})
    for spec in plan.workers:
        added = {n for n in spec.env if n != "PATH" and not n.startswith("SAFELAUNCH_")}
        assert added <= TORCHRUN_NAMES, added - TORCHRUN_NAMES


def test_the_uses_are_cached_with_the_findings(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(HEAD + "root = os.environ['DATA_ROOT']\nm = m.cuda()\n")
    environ = {"SAFELAUNCH_CACHE_DIR": str(tmp_path / "cache")}
    cold = lint_cached(script, environ)
    assert cold.uses == ScriptUses(cuda=(6,), env=(("DATA_ROOT", 5),))
    assert lint_cached(script, environ) == cold
    assert from_json(to_json(cold)) == cold and from_json(to_json(LintResult())) == LintResult()
    # what a launch adds: the check over the cached uses, well under a millisecond
    times = []
    for _ in range(200):
        started = time.perf_counter()
        _check(cold.uses)
        times.append(time.perf_counter() - started)
    assert statistics.median(times) < 0.001


def test_a_real_launch_warns_before_it_starts_and_strict_stops(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os\nprint('started')\nroot = os.environ['SHARD_ROOT_H25']\n")
    run = launch(tmp_path, "--nproc-per-node=1", str(script), timeout=60)
    warning = "train.py:3 reads os.environ['SHARD_ROOT_H25'], which the ranks will not have"
    assert warning in run.stderr and run.returncode == 1
    assert "started" in run.stdout  # a warning: the rank still ran
    strict = launch(tmp_path, "--strict", "--nproc-per-node=1", str(script), timeout=60)
    assert strict.returncode == 78 and warning in strict.stderr
    assert "started" not in strict.stdout + strict.stderr
