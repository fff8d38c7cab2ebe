"""Classes from what a failure says: NaN/inf losses, resources a DataLoader worker ran out of.

A NaN/inf loss or gradient stated in an error is model/gradient (and a loss line in any log
is noted, without taking "info", "nanny" or "1e-inf" for one); what a DataLoader worker
raised decides the class when it is a resource's (memory, disk, files, threads), with the
worker said in the next steps; a thread or process that cannot start is resources.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import launch, safelaunch_cmd

from safelaunch.diagnose.match import non_finite_loss
from safelaunch.diagnose.rootcause import RankEvidence, RootCause, find_root_cause

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CLOSED = (FIXTURES / "peer-connection-closed.log").read_text()
LIB = "/venv/lib/python3.11/site-packages"


def _root(text: str) -> RootCause:
    """The root cause of a 2-rank job: rank 1 failed with `text`, rank 0 only followed."""
    ranks = [
        RankEvidence(rank=0, text=CLOSED, failed=True, ended=2.0, code=1),
        RankEvidence(rank=1, text=text, failed=True, ended=1.0, code=1),
    ]
    root = find_root_cause(ranks)
    assert root is not None and root.rank == 1
    return root


def _traceback(error_line: str) -> str:
    return (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/home/me/train.py", line 11, in <module>\n'
        "[rank1]:     step(batch)\n"
        f"[rank1]: {error_line}\n"
    )


# --- W1: a NaN/inf loss ---------------------------------------------------------------

LOSS_LINES = [
    "step 3 loss nan",
    "{'loss': inf, 'lr': 0.1}",
    "AssertionError: loss is NaN at step 2",
    "Loss became inf at iteration 120",
    "loss = tensor(nan, grad_fn=<AddBackward0>)",
    "NaN loss detected, skipping the batch",
    "Epoch 3: train_loss=-inf",
    "val_loss: NaN",
    "loss: -nan",
    "Loss is infinite or NaN, stopping training",
    '{"loss": NaN, "step": 7}',
    "nan values found in the loss",
    "train/loss=nan",
    "losses: [nan, nan]",
    "The loss returned in `training_step` is tensor(nan, device='cuda:0')",
    "Loss is nan, stopping training",
    "loss went to +inf",
    "WARNING: non-finite loss, ending training",
    "| epoch 001 | loss nan | ppl nan",
    "the loss is not finite",
    "LOSS = NAN",
]

NOT_LOSS_LINES = [
    "financial loss report",
    "INFO: loss 0.25",
    "infinite_loop_guard enabled; loss 0.3",
    "nanny process started, loss 0.31",
    "running inference, loss 0.5",
    "loss_scale: 65536",
    "loss: 1e-inf",
    "best_loss: inf",
    "epoch 0 | best val loss inf",
    "min_loss = inf",
    "loss 0.31 (best: inf)",
    "INF loss=0.3",
    "No loss of information",
    "nan_to_num applied before the loss, loss 0.2",
    "floss: nan",
    "Nancy's loss: 0.4",
    "loss 0.25 (finite)",
    "grad_norm: inf",  # a gradient: the error rule's, not this loss note's
    "loss 0.4\nnan",  # one line each: no loss said NaN
]


@pytest.mark.parametrize("line", LOSS_LINES)
def test_a_non_finite_loss_line_is_noted(line: str) -> None:
    assert non_finite_loss(f"step 1 loss 0.9\n[rank1]: {line}\nstep 2\n") == line


@pytest.mark.parametrize("line", NOT_LOSS_LINES)
def test_a_finite_loss_or_other_words_are_not_noted(line: str) -> None:
    assert non_finite_loss(f"{line}\n") is None


def test_source_code_in_a_traceback_is_not_a_logged_loss() -> None:
    text = _traceback("AssertionError: loss is NaN at step 2").replace(
        "step(batch)", 'assert not math.isnan(loss.item()), f"loss is NaN at step {step}"'
    )
    assert non_finite_loss(text) == "AssertionError: loss is NaN at step 2"
    assert non_finite_loss(text.rsplit("[rank1]: AssertionError", 1)[0]) is None


@pytest.mark.parametrize(
    "error_line",
    [
        "AssertionError: loss is NaN at step 2",
        "ValueError: The loss returned in `training_step` is tensor(nan, grad_fn=<DivBackward0>)",
        "RuntimeError: gradient is inf for layer1.weight",
        "RuntimeError: NaN gradients after the backward pass",
        "Exception: grad_norm is nan",
        "RuntimeError: Non-finite loss: -inf",
        "FloatingPointError: Loss became infinite or NaN at iteration=12!",
    ],
)
def test_an_error_that_states_a_non_finite_loss_or_gradient_is_model_gradient(
    error_line: str,
) -> None:
    root = _root(_traceback(error_line))
    assert root.klass == "model/gradient", root
    assert root.error is not None and root.error.line == error_line


@pytest.mark.parametrize(
    "error_line",
    [
        "RuntimeError: inference server unreachable",
        "ValueError: loss_scale 65536 is too large",
        "KeyError: 'info'",
        "ValueError: financial data missing for nanny",
        "RuntimeError: loss 0.4 above the threshold 0.3",
        "ValueError: grad_fn is None for tensor(nan)",
    ],
)
def test_other_errors_are_not_taken_for_a_non_finite_loss(error_line: str) -> None:
    assert _root(_traceback(error_line)).klass == "unknown"


# --- W2: what a DataLoader worker raised ------------------------------------------------


def _worker(kind: str, own_line: str) -> str:
    """torch's re-raise of an error from a DataLoader worker, as a rank's log shows it."""
    qualified = "torch.OutOfMemoryError" if kind == "OutOfMemoryError" else kind
    return (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/home/me/train.py", line 12, in <module>\n'
        "[rank1]:     for batch in loader:\n"
        f'[rank1]:   File "{LIB}/torch/_utils.py", line 794, in reraise\n'
        "[rank1]:     raise exception\n"
        f"[rank1]: {qualified}: Caught {kind} in DataLoader worker process 0.\n"
        "[rank1]: Original Traceback (most recent call last):\n"
        f'[rank1]:   File "{LIB}/torch/utils/data/_utils/worker.py", line 374, in _worker_loop\n'
        "[rank1]:     data = fetcher.fetch(index)\n"
        '[rank1]:   File "/home/me/data.py", line 9, in __getitem__\n'
        "[rank1]:     sample = decode(self.paths[index])\n"
        f"[rank1]: {own_line}\n"
        "[rank1]: \n"
    )


@pytest.mark.parametrize(
    ("kind", "own_line", "expected"),
    [
        ("MemoryError", "MemoryError", "python-memory-error"),
        ("OSError", "OSError: [Errno 28] No space left on device", "disk-full"),
        ("OSError", "OSError: [Errno 12] Cannot allocate memory", "host-out-of-memory"),
        ("OSError", "OSError: [Errno 24] Too many open files: '/d/7'", "too-many-open-files"),
        ("OutOfMemoryError", "torch.OutOfMemoryError: CUDA out of memory.", "cuda-out-of-memory"),
        ("RuntimeError", "RuntimeError: can't start new thread", "thread-limit"),
        (
            "BlockingIOError",
            "BlockingIOError: [Errno 11] Resource temporarily unavailable",
            "thread-limit",
        ),
    ],
)
def test_a_resource_error_in_a_dataloader_worker_is_resources(
    kind: str, own_line: str, expected: str
) -> None:
    root = _root(_worker(kind, own_line))
    assert root.klass == "resources" and root.signature is not None, root
    assert root.signature.id == expected
    assert root.signature.meaning.startswith("in a DataLoader worker: ")
    assert "DataLoader worker" in root.signature.next_steps[-1]
    assert len(root.signature.next_steps) <= 4
    # a bare `MemoryError` also names the statement that raised it (test_file_and_label_faults)
    assert root.error is not None and root.error.line.startswith(own_line)
    assert root.error.location == "/home/me/data.py:9 in __getitem__"


def test_the_type_torch_names_decides_when_the_workers_own_traceback_is_missing() -> None:
    text = _traceback("MemoryError: Caught MemoryError in DataLoader worker process 3.")
    root = _root(text)
    assert root.klass == "resources" and root.signature is not None
    assert root.signature.id == "python-memory-error"


@pytest.mark.parametrize(
    ("kind", "own_line"),
    [
        ("ValueError", "ValueError: record 37: label -1 out of range"),
        ("KeyError", "KeyError: 'label'"),
        ("FileNotFoundError", "FileNotFoundError: [Errno 2] No such file: '/d/7.jpg'"),
        ("UnicodeDecodeError", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff"),
        ("ZeroDivisionError", "ZeroDivisionError: division by zero"),
        ("OSError", "OSError: image file is truncated (3 bytes not processed)"),
    ],
)
def test_a_data_error_in_a_dataloader_worker_stays_data(kind: str, own_line: str) -> None:
    root = _root(_worker(kind, own_line))
    assert root.klass == "data/sampling" and root.signature is not None
    assert root.signature.id == "dataloader-worker-error"


# --- W5: threads, processes and files that cannot be had --------------------------------

LIMITS = [
    (_traceback("RuntimeError: can't start new thread"), "thread-limit"),
    (_traceback("BlockingIOError: [Errno 11] Resource temporarily unavailable"), "thread-limit"),
    (_traceback("OSError: [Errno 11] Resource temporarily unavailable"), "thread-limit"),
    (
        "OpenBLAS blas_thread_init: pthread_create failed for thread 1 of 8: Resource "
        "temporarily unavailable\nOpenBLAS blas_thread_init: RLIMIT_NPROC 4096 current\n",
        "thread-limit",
    ),
    ("libgomp: Thread creation failed: Resource temporarily unavailable\n", "thread-limit"),
    (
        "OMP: Error #34: System unable to allocate necessary resources for OMP thread:\n",
        "thread-limit",
    ),
    (
        "thread '<unnamed>' panicked at 'failed to spawn thread: Os { code: 11, kind: "
        'WouldBlock, message: "Resource temporarily unavailable" }\'\n',
        "thread-limit",
    ),
    ("/bin/sh: fork: retry: Resource temporarily unavailable\n", "thread-limit"),
    (
        "[rank1]: terminate called after throwing an instance of 'std::system_error'\n"
        "[rank1]:   what():  Resource temporarily unavailable\n",
        "thread-limit",
    ),
    (_traceback("OSError: [Errno 12] Cannot allocate memory"), "host-out-of-memory"),
    (_traceback("OSError: [Errno 24] Too many open files: '/d/7'"), "too-many-open-files"),
]


@pytest.mark.parametrize(("text", "expected"), LIMITS)
def test_a_thread_process_or_file_limit_is_resources(text: str, expected: str) -> None:
    root = _root(text)
    assert root.klass == "resources" and root.signature is not None, root
    assert root.signature.id == expected


def test_the_thread_limit_says_which_limits_to_look_at() -> None:
    root = _root(LIMITS[0][0])
    assert root.signature is not None
    steps = " ".join(root.signature.next_steps)
    for needle in ("ulimit -u", "RLIMIT_AS", "OMP_NUM_THREADS", "num_workers"):
        assert needle in steps


@pytest.mark.parametrize(
    "error_line",
    [
        "RuntimeError: can't create new thread at interpreter shutdown",
        "BlockingIOError: [Errno 11] write could not complete without blocking",
        "RuntimeError: [gloo/transport/tcp/pair.cc:534] Read error [10.0.0.2]:4123: "
        "Resource temporarily unavailable",
    ],
)
def test_look_alikes_of_a_thread_limit_are_not_one(error_line: str) -> None:
    root = _root(_traceback(error_line))
    assert root.signature is None or root.signature.id != "thread-limit"


# --- end to end: the live summary and `safelaunch explain` agree ------------------------

NAN_ASSERT = """\
import math, torch, torch.distributed as dist
dist.init_process_group("gloo")
w = torch.ones(4, requires_grad=True)
for step in range(4):
    x = torch.rand(4)
    if dist.get_rank() == 1 and step == 2:
        x[0] = float("nan")
    loss = (w * x).sum()
    assert not math.isnan(loss.item()), f"loss is NaN at step {step}"
    loss.backward()
    dist.all_reduce(w.grad)
dist.destroy_process_group()
"""

# MemoryError raised, not provoked: a real huge allocation depends on the host's overcommit
WORKER_MEMORY = """\
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
class Big(Dataset):
    def __init__(self, rank): self.rank = rank
    def __len__(self): return 32
    def __getitem__(self, i):
        if self.rank == 1 and i == 9:
            raise MemoryError
        return torch.tensor(float(i))
dist.init_process_group("gloo")
for b in DataLoader(Big(dist.get_rank()), batch_size=4, num_workers=1):
    dist.all_reduce(b)
dist.destroy_process_group()
"""


def _explained_class(run_dir: Path) -> str:
    result = subprocess.run(
        safelaunch_cmd("explain", str(run_dir)), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found = re.search(r"^  class: (.+)$", result.stdout, re.M)
    assert found, result.stdout
    return found[1]


@pytest.mark.parametrize(
    ("name", "source", "klass", "also"),
    [
        ("nan_assert.py", NAN_ASSERT, "model/gradient (non-finite-loss)", "loss is NaN at step 2"),
        (
            "worker_memory.py",
            WORKER_MEMORY,
            "resources (python-memory-error): in a DataLoader worker",
            "next:  it happened in a DataLoader worker process",
        ),
    ],
)
def test_a_real_launch_and_explain_give_the_class(
    tmp_path: Path, name: str, source: str, klass: str, also: str
) -> None:
    script = tmp_path / name
    script.write_text(source)
    run = launch(tmp_path, "--nproc-per-node", "2", str(script))
    assert run.returncode == 1, run.stderr[-3000:]
    live = re.search(r"^safelaunch:   class: (.+)$", run.stderr, re.M)
    assert live and live[1].startswith(klass), run.stderr[-3000:]
    assert "FAILED: rank 1" in run.stderr and also in run.stderr
    assert _explained_class(run.run_dir) == live[1]
