"""safelaunch lint: every rule on a script that has the mistake and one that does not.

The fixtures are small excerpts written for these tests, in the shape real training
scripts have (the negative ones are the usual correct idiom, often next to the mistake's
look-alike), so a rule that fires on the right way to do it fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from safelaunch.diagnose.signatures import SIGNATURES
from safelaunch.lint import Severity, lint_source, related
from safelaunch.lint.cache import lint_cached
from safelaunch.lint.rules import RULES
from safelaunch.vocab import CLASSES, DATA

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
"""

# rule id -> (positive: must fire, negative: must not), each a script body under HEAD
FIXTURES: dict[str, tuple[str, str]] = {
    "sampler-with-shuffle": (
        """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=True)
        """,
        """
        sampler = DistributedSampler(dataset) if distributed else None
        loader = DataLoader(dataset, sampler=sampler, shuffle=(sampler is None))
        other = DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=False)
        """,
    ),
    "sampler-without-set-epoch": (
        """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(10):
            for batch in loader:
                step(batch)
        """,
        """
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(10):
            sampler.set_epoch(epoch)
            for batch in loader:
                step(batch)
        helper_sampler = DistributedSampler(dataset)
        train(helper_sampler)  # handed to a helper that may call set_epoch: not judged
        """,
    ),
    "loader-not-sharded": (
        """
        dist.init_process_group("nccl")
        loader = DataLoader(dataset, batch_size=8, shuffle=True)
        """,
        """
        dist.init_process_group("nccl")
        loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
        """,
    ),
    "model-not-wrapped": (
        """
        dist.init_process_group("nccl")
        model = Net().cuda(local_rank)
        for batch in loader:
            model(batch).sum().backward()
        """,
        """
        dist.init_process_group("nccl")
        model = DDP(Net().cuda(local_rank), device_ids=[local_rank])
        for batch in loader:
            model(batch).sum().backward()
        """,
    ),
    "set-device-missing": (
        """
        dist.init_process_group("nccl")
        model = Net().cuda()
        """,
        """
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        model = Net().cuda()
        """,
    ),
    "device-from-global-rank": (
        """
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank)
        """,
        """
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = rank % torch.cuda.device_count()
        model = DDP(Net().to(device), device_ids=[device])
        """,
    ),
    "collective-under-rank-condition": (
        """
        def evaluate(rank):
            if rank == 0:
                dist.all_reduce(metric)
                print(metric)
        """,
        """
        def evaluate(rank, local_rank):
            dist.all_reduce(metric)
            if rank == 0:
                print(metric)
            if local_rank not in (-1, 0):
                dist.barrier()  # the others wait while rank 0 downloads ...
            download()
            if local_rank == 0:
                dist.barrier()  # ... then rank 0 releases them: every rank calls it once
            if local_rank != -1:
                dist.barrier()  # "is this run distributed", not a rank condition
        """,
    ),
    "batchnorm-without-syncbn": (
        """
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        model = DDP(net, device_ids=[local_rank])
        """,
        """
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net)
        model = DDP(net, device_ids=[local_rank])
        """,
    ),
    "load-without-map-location": (
        """
        dist.init_process_group("nccl")
        state = torch.load("checkpoint.pt")
        """,
        """
        dist.init_process_group("nccl")
        state = torch.load("checkpoint.pt", map_location=f"cuda:{local_rank}")
        other = torch.load("checkpoint.pt", "cpu")
        """,
    ),
    "find-unused-parameters": (
        """
        model = DDP(net, device_ids=[local_rank], find_unused_parameters=True)
        """,
        """
        model = DDP(net, device_ids=[local_rank], find_unused_parameters=False)
        """,
    ),
    "cuda-before-init": (
        """
        def main():
            warmup = torch.zeros(1, device="cuda")
            dist.init_process_group("nccl")
        """,
        """
        def main():
            if torch.cuda.is_available():
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            warmup = torch.zeros(1, device="cuda")
            dist.init_process_group("nccl")
        """,
    ),
    "spawn-under-launcher": (
        """
        import torch.multiprocessing as mp
        mp.spawn(worker, args=(world_size,), nprocs=world_size)
        """,
        """
        import torch.multiprocessing as mp
        if "LOCAL_RANK" in os.environ:  # started by a launcher: one process per rank already
            worker(int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))
        else:
            mp.spawn(worker, args=(world_size,), nprocs=world_size)
        """,
    ),
    "no-destroy-process-group": (
        """
        dist.init_process_group("gloo")
        train()
        """,
        """
        dist.init_process_group("gloo")
        train()
        dist.destroy_process_group()
        """,
    ),
}


def _rules(body: str) -> set[str]:
    result = lint_source(HEAD + textwrap.dedent(body))
    assert result.problem is None
    return {finding.rule for finding in result.findings}


def test_every_rule_has_fixtures_and_there_are_at_least_ten() -> None:
    assert set(FIXTURES) == {rule.id for rule in RULES}
    assert len(RULES) >= 10


@pytest.mark.parametrize("rule", list(FIXTURES))
def test_rule_fires_on_the_mistake(rule: str) -> None:
    assert rule in _rules(FIXTURES[rule][0])


@pytest.mark.parametrize("rule", list(FIXTURES))
def test_rule_is_quiet_on_the_right_way(rule: str) -> None:
    assert rule not in _rules(FIXTURES[rule][1])


TRAIN = """
dist.init_process_group("gloo")
model = Net()
for batch in loader:
    model(batch).sum().backward()
"""
# Look-alikes of averaging the gradients by hand: (name, body after TRAIN, must fire)
GRADIENT_SYNC = [
    ("barrier-under-rank-0", "if rank == 0:\n    dist.barrier()", True),
    ("barrier-everywhere", "dist.barrier()", True),
    ("loss-for-logging", "dist.all_reduce(loss)", True),
    ("loss-item-list", "dist.all_reduce(torch.tensor([loss.item()]))", True),
    (
        "gradient-norm",
        "norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))\n"
        "dist.all_reduce(norm)",
        True,
    ),
    ("grad-norm-item", "dist.all_reduce(torch.tensor(p.grad.sum().item()))", True),
    ("broadcast-params", "for p in model.parameters():\n    dist.broadcast(p.data, 0)", True),
    ("named-grad-but-not", "grad_steps = torch.zeros(1)\ndist.all_reduce(grad_steps)", True),
    ("tutorial", "for p in model.parameters():\n    dist.all_reduce(p.grad.data)", False),
    ("keyword", "for p in model.parameters():\n    dist.all_reduce(tensor=p.grad)", False),
    (
        "flat-buffer",
        "flat = torch.cat([p.grad.view(-1) for p in model.parameters()])\ndist.all_reduce(flat)",
        False,
    ),
    (
        "list-then-loop",
        "grads = [p.grad for p in model.parameters()]\nfor g in grads:\n    dist.all_reduce(g)",
        False,
    ),
    (
        "helper-function",
        "def sync(tensors):\n    for t in tensors:\n        dist.all_reduce(t)\n"
        "sync([p.grad for p in model.parameters() if p.grad is not None])",
        False,
    ),
    (
        "hook",
        "for p in model.parameters():\n    p.register_hook(lambda g: dist.all_reduce(g))",
        False,
    ),
    (
        "reduce-scatter",
        "grads = {n: p.grad for n, p in model.named_parameters()}\n"
        "dist.reduce_scatter_tensor(out, torch.cat(list(grads.values())))",
        False,
    ),
    ("ddp", "model = DDP(model)", False),
    ("fsdp", "from torch.distributed.fsdp import FullyShardedDataParallel", False),
    ("horovod", "import horovod.torch as hvd", False),
    ("deepspeed", "import deepspeed", False),
    ("accelerate", "from accelerate import Accelerator", False),
    ("lightning", "import lightning as L", False),
]


@pytest.mark.parametrize(
    ("body", "fires"), [(b, f) for _, b, f in GRADIENT_SYNC], ids=[n for n, _, _ in GRADIENT_SYNC]
)
def test_only_a_reduction_of_the_gradients_stands_for_ddp(body: str, fires: bool) -> None:
    assert ("model-not-wrapped" in _rules(TRAIN + body + "\n")) is fires


def test_rules_speak_the_diagnosis_vocabulary() -> None:
    known = {signature.id for signature in SIGNATURES}
    for rule in RULES:
        assert rule.klass in CLASSES and set(rule.signatures) <= known, rule.id
        assert rule.why and rule.fix and rule.title


def test_a_failure_points_back_at_the_finding_of_its_class() -> None:
    findings = lint_source(HEAD + textwrap.dedent(FIXTURES["sampler-with-shuffle"][0])).findings
    [match] = related(findings, "data/sampling", "sampler-and-shuffle")
    assert match.rule == "sampler-with-shuffle"
    assert related(findings, "resources", "cuda-out-of-memory") == []


def test_a_script_that_does_not_parse_is_reported_not_raised() -> None:
    result = lint_source("def broken(:\n")
    assert result.findings == () and result.problem == "not parsed: SyntaxError (line 1)"


def test_cache_by_content(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent(FIXTURES["sampler-with-shuffle"][0]))
    environ = {"SAFELAUNCH_CACHE_DIR": str(tmp_path / "cache")}
    first = lint_cached(script, environ)
    [entry] = (tmp_path / "cache").iterdir()
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    started = time.perf_counter()
    again = lint_cached(script, environ)
    cached_s = time.perf_counter() - started
    assert again == first and [f.rule for f in again.findings] == ["sampler-with-shuffle"]
    # the cache's words are read back as the vocabularies' members
    assert again.findings[0].severity is Severity.ERROR and again.findings[0].klass is DATA
    print(f"cached lint: {cached_s * 1000:.2f} ms")  # bench/vs_torchrun.py measures the launch
    script.write_text(HEAD)  # new content, new entry
    assert lint_cached(script, environ).findings == ()
    assert len(list((tmp_path / "cache").iterdir())) == 2
    assert entry.exists()


def test_cli_text_json_and_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(HEAD + textwrap.dedent(FIXTURES["device-from-global-rank"][0]))
    good = tmp_path / "good.py"
    good.write_text(HEAD + textwrap.dedent(FIXTURES["device-from-global-rank"][1]))
    run = [sys.executable, "-m", "safelaunch", "lint"]
    found = subprocess.run([*run, str(bad)], capture_output=True, text=True, timeout=60)
    assert found.returncode == 1
    assert f"{bad}:9: error device-from-global-rank: a GPU chosen by the global RANK" in (
        found.stdout
    )
    assert "  fix: use int(os.environ['LOCAL_RANK'])" in found.stdout
    clean = subprocess.run([*run, "--json", str(good)], capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0 and json.loads(clean.stdout)["findings"] == []
    missing = subprocess.run([*run, str(tmp_path / "no.py")], capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "No such file" in missing.stderr


QUICK = """\
import sys

sys.exit(0)  # lint reads the mistake below; the ranks never get there
from torch.utils.data import DataLoader, DistributedSampler

sampler = DistributedSampler(dataset)
DataLoader(dataset, sampler=sampler, shuffle=True)
"""


def test_launch_warns_in_the_banner_strict_stops_no_lint_hides(tmp_path: Path) -> None:
    from conftest import cli

    script = tmp_path / "train.py"
    script.write_text(QUICK)
    warned = cli(tmp_path, "--nproc-per-node=1", "--no-preflight", str(script))
    assert warned.returncode == 0  # never fatal by default
    banner = f"safelaunch: warning: lint: {script}:7: error sampler-with-shuffle: DataLoader"
    assert banner in warned.stderr
    assert f"safelaunch: warning: lint: details: safelaunch lint {script}; --no-lint" in (
        warned.stderr
    )
    strict = cli(tmp_path, "--nproc-per-node=1", "--no-preflight", "--strict", str(script))
    assert strict.returncode == 78 and "(a lint error; --strict made it fatal" in strict.stderr
    assert len(list((tmp_path / "logs").glob("2*/attempt_0"))) == 1  # strict started none
    quiet = cli(tmp_path, "--nproc-per-node=1", "--strict", "--no-lint", str(script))
    assert quiet.returncode == 0 and "lint" not in quiet.stderr
