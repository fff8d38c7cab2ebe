"""Files a job reads or writes, labels and devices (tests/workers/file_label_cases.py).

Files a job reads or writes are environment/launch (a checkpoint torch.load cannot read,
one weights_only refuses, a save into a directory that does not exist); a label outside
the model's classes is data/sampling; tensors on two devices are model/gradient; Gloo's
size check covers another dtype too. The error line says what the exception leaves out:
the next line of a message that ends in a colon, the statement of an exception with no
message. Faults that were already right stay right (root rank, class, exit code).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import Run, launch, safelaunch_cmd, without_paths, worker

from safelaunch.diagnose.errortext import parse_traceback
from safelaunch.diagnose.match import cause, matches
from safelaunch.diagnose.pytypes import EXCEPTION_TYPES
from safelaunch.vocab import COMMUNICATION, DATA, ENVIRONMENT, MODEL, UNKNOWN

# --- the rules, on measured texts (torch 2.13) and known GPU ones ----------------------

SIGNATURE_CASES = [
    # torch.load of a truncated zip checkpoint, an empty legacy file, a non-checkpoint
    (
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory. This is an internal miniz error.",
        "checkpoint-corrupt",
        ENVIRONMENT,
    ),
    ("EOFError: Ran out of input", "checkpoint-corrupt", ENVIRONMENT),
    ("_pickle.UnpicklingError: invalid load key, 'v'.", "checkpoint-corrupt", ENVIRONMENT),
    (
        '[rank1]:   File "/v/lib/python3.11/site-packages/torch/_weights_only_unpickler.py", '
        "line 327, in load\n[rank1]:     raise EOFError\n[rank1]: EOFError\n",
        "checkpoint-corrupt",
        ENVIRONMENT,
    ),
    (
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, "
        "WeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace",
        "checkpoint-weights-only",
        ENVIRONMENT,
    ),
    ("RuntimeError: Parent directory /ckpt/run3 does not exist.", "save-dir-missing", ENVIRONMENT),
    ("IndexError: Target 10 is out of bounds.", "label-out-of-range", DATA),
    ("IndexError: Target -1 is out of bounds.", "label-out-of-range", DATA),
    (
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d:"
        " block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.",
        "label-out-of-range",
        DATA,
    ),
    (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:0 and cpu!",
        "device-mismatch",
        MODEL,
    ),
    (
        "RuntimeError: Tensor on device meta is not on the expected device cpu!",
        "device-mismatch",
        MODEL,
    ),
    (
        "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) "
        "should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
        "device-mismatch",
        MODEL,
    ),
    (
        "gloo::EnforceNotMet: [enforce fail at pair.cc:456] op.preamble.length <= op.nbytes. "
        "32 vs 16. Received data size doesn't match expected size.",
        "collective-mismatch",
        COMMUNICATION,
    ),
]


@pytest.mark.parametrize(("text", "signature", "klass"), SIGNATURE_CASES)
def test_the_signature_and_class(text: str, signature: str, klass: str) -> None:
    found = cause(matches(text, None))
    assert found is not None
    assert (found.signature.id, found.signature.klass) == (signature, klass)


@pytest.mark.parametrize(
    "text",
    [
        # two dtypes on one device: no device fault
        "RuntimeError: Input type (torch.cuda.HalfTensor) and weight type "
        "(torch.cuda.FloatTensor) should be the same",
        "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.HalfTensor) "
        "should be the same",
        "print('target 10 is fine'); the parent directory exists",
        "loading checkpoint ckpt.pt (weights only) ... done",
    ],
)
def test_look_alikes_are_not_these_signatures(text: str) -> None:
    ids = {m.signature.id for m in matches(text, None)}
    new = {"checkpoint-corrupt", "checkpoint-weights-only", "save-dir-missing"}
    assert not ids & (new | {"label-out-of-range", "device-mismatch"})


ERROR_TYPE_CASES = [
    # the module is there, the name is not: a version, not an installation
    (
        "ImportError: cannot import name 'tensorboard_extras' from 'torch.utils'",
        "python-import-name",
        ENVIRONMENT,
    ),
    (
        "ImportError: cannot import name 'a' from partially initialized module 'm' (most "
        "likely due to a circular import)",
        "python-import-name",
        ENVIRONMENT,
    ),
    (
        "ImportError: libcudart.so.12: cannot open shared object file",
        "python-import-error",
        ENVIRONMENT,
    ),
    ("ModuleNotFoundError: No module named 'apex'", "python-import-error", ENVIRONMENT),
    # a recursion without end: no class of its own, but what to look for
    ("RecursionError: maximum recursion depth exceeded", "python-recursion-error", UNKNOWN),
    (
        "RecursionError: maximum recursion depth exceeded while calling a Python object",
        "python-recursion-error",
        UNKNOWN,
    ),
]


@pytest.mark.parametrize(("line", "signature", "klass"), ERROR_TYPE_CASES)
def test_the_error_type_and_class(line: str, signature: str, klass: str) -> None:
    found = matches(line, None, EXCEPTION_TYPES)
    assert found and (found[0].signature.id, found[0].signature.klass) == (signature, klass)


def test_a_corrupt_file_a_dataloader_worker_read_stays_a_data_fault() -> None:
    text = (
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory\n"
    )
    found = cause(matches(text, None))
    assert found is not None and found.signature.id == "dataloader-worker-error"


def _traceback(*tail: str) -> str:
    return "\n".join(
        [
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/home/me/train.py", line 40, in <module>',
            "[rank1]:     main()",
            '[rank1]:   File "/home/me/train.py", line 31, in main',
            "[rank1]:     assert grads.min() > 0",
            "[rank1]:            ^^^^^^^^^^^^^^^",
            *tail,
        ]
    )


ERROR_LINES = [
    # a message that goes on after its colon: the next line is part of it
    (
        [
            "[rank1]: RuntimeError: Error(s) in loading state_dict for Linear:",
            "[rank1]: \tsize mismatch for weight: copying a param with shape torch.Size([8, 4]) "
            "from checkpoint, the shape in current model is torch.Size([16, 4]).",
        ],
        "RuntimeError: Error(s) in loading state_dict for Linear: size mismatch for weight: "
        "copying a param with shape torch.Size([8, 4]) from checkpoint, the shape in current "
        "model is torch.Size([16, 4]).",
    ),
    # no message: the statement that raised says what failed
    (["[rank1]: AssertionError"], "AssertionError (no message; the line: assert grads.min() > 0)"),
    (
        ["[rank1]: builtins.EOFError"],
        "builtins.EOFError (no message; the line: assert grads.min() > 0)",
    ),
    # a message that says it all, or a colon with nothing after it, stays as it is
    (["[rank1]: ValueError: lr must be > 0"], "ValueError: lr must be > 0"),
    (["[rank1]: ValueError: bad config:", "[rank1]: "], "ValueError: bad config:"),
    (
        ["[rank1]: ValueError: bad config:", "", "During handling of the above exception"],
        "ValueError: bad config:",
    ),
]


@pytest.mark.parametrize(("tail", "expected"), ERROR_LINES)
def test_the_error_line_says_what_the_exception_leaves_out(tail: list[str], expected: str) -> None:
    assert parse_traceback(_traceback(*tail)) == (expected, "/home/me/train.py:31 in main")


def test_a_bare_raise_is_not_repeated() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 9, in step\n'
        "    raise KeyboardInterrupt\n"
        "KeyboardInterrupt\n"
    )
    assert parse_traceback(text) == ("KeyboardInterrupt", "/home/me/train.py:9 in step")


# --- real launches -------------------------------------------------------------------

# case: (root rank, exit code, class line starts with, the error line holds, at file:line)
E2E = {
    "corrupt_ckpt": (1, 1, "environment/launch (checkpoint-corrupt)", "PytorchStreamReader", 56),
    "save_dir": (1, 1, "environment/launch (save-dir-missing)", "does not exist", 140),
    "target_oob": (1, 1, "data/sampling (label-out-of-range)", "Target 10 is out of bounds", 121),
    "meta_device": (1, 1, "model/gradient (device-mismatch)", "device meta", 160),
    "state_dict": (1, 1, "model/gradient (state-dict-mismatch)", "size mismatch for weight", 114),
    "bare_assert": (1, 1, "unknown", "the line: assert grads.min() > 0", 95),
    "worker_keyerror": (1, 1, "data/sampling (dataloader-worker-error)", "KeyError: 21", 42),
    "metrics": (0, 1, "unknown", "not JSON serializable", 83),
    "kbint": (1, 130, "unknown", "KeyboardInterrupt", 102),
    "recursion": (1, 1, "unknown (python-recursion-error)", "maximum recursion depth", 61),
    "cannot_import": (1, 1, "environment/launch (python-import-name)", "cannot import name", 145),
}


def _launch(tmp_path: Path, case: str):  # type: ignore[no-untyped-def]
    return launch(
        tmp_path,
        "--nproc-per-node=2",
        "--isolate=never",
        "--no-lint",
        worker("file_label_cases.py"),
        env={"CASE": case},
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", list(E2E))
def test_a_real_launch_names_the_rank_class_error_and_line(tmp_path: Path, case: str) -> None:
    rank, code, klass, error, line = E2E[case]
    run = _launch(tmp_path, case)
    tail = run.stderr[-4000:]
    assert run.returncode == code, tail
    assert f"FAILED: rank {rank} " in run.stderr, tail
    shown = re.search(r"^safelaunch:   class: (.+)$", run.stderr, re.M)
    assert shown and shown[1].startswith(klass), tail
    said = re.search(r"^safelaunch:   error: (.+)$", run.stderr, re.M)
    assert said and error in said[1], tail
    assert f"file_label_cases.py:{line} in " in run.stderr, tail
    assert f"exit code {code} (rank {rank}'s own code)" in run.stderr, tail
    own = [line for line in run.stderr.splitlines() if line.startswith("safelaunch:")]
    assert not any(re.search(r"(?i)\b(?:hang|hung)\b", line) for line in own), tail
    assert "safelaunch/" not in without_paths(run.stderr, tmp_path), tail  # no own traceback
    if case == "corrupt_ckpt":  # one run is enough for this, and a launch costs seconds
        _explain_and_report_json_agree_with_the_live_summary(run)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "code", "said"),
    [
        # rank 1 left with 0 while rank 0 communicated: the job fails with rank 0's code
        ("exit0", 1, ("FAILED: rank 1 exited with code 0", "rank 0: failed as a consequence")),
        # float32 against int64: Gloo's byte counts differ, as for another shape
        ("dtype", 134, ("class: communication (collective-mismatch)", "same shapes and dtypes")),
    ],
)
def test_the_others(tmp_path: Path, case: str, code: int, said: tuple[str, ...]) -> None:
    run = _launch(tmp_path, case)
    assert run.returncode == code, run.stderr[-3000:]
    for text in said:
        assert text in run.stderr, run.stderr[-3000:]


def _explain_and_report_json_agree_with_the_live_summary(run: Run) -> None:
    live = re.search(r"^safelaunch:   class: (.+)$", run.stderr, re.M)
    assert live, run.stderr[-3000:]
    result = subprocess.run(
        safelaunch_cmd("explain", str(run.run_dir)), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"  class: {live[1]}" in result.stdout
    report = json.loads(next(run.run_dir.glob("attempt_0/report.json")).read_text())
    diagnosis = report["diagnosis"]
    assert (diagnosis["class"], diagnosis["signature"], diagnosis["root_cause_rank"]) == (
        ENVIRONMENT,
        "checkpoint-corrupt",
        1,
    )
