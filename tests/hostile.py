"""Generated hostile input for every way a value reaches safelaunch, and one case's verdict.

Shared by test_hostile_input.py (CI) and bench/fuzz_inputs.py (a long exploratory run).
A case is argv + environment + the files they name (--config, --signatures, the GPU
inventory); it runs in-process through `invoke` (below), real up to the point where
the job would start: `run_preflight` is wrapped so that a launch that passed every
check stops there (nothing is spawned), and the torch probe answers from a fixed record
(it is a subprocess importing torch: seconds per case, and not input handling).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

CASE_TIMEOUT_S = 20  # a case that takes this long counts as a hang


@dataclass
class Result:
    """What one in-process run of a command showed: its exit code and its two streams."""

    exit_code: int
    stdout: str
    stderr: str
    exception: Exception | None = None  # raised by the command and caught by `invoke`

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def invoke(
    command: Callable[[Sequence[str]], object],
    args: Sequence[str],
    env: Mapping[str, str | None] | None = None,
    catch_exceptions: bool = True,
) -> Result:
    """Run one of safelaunch.cli's commands in this process, as its console script would:
    `env` over os.environ (None: unset), fresh stdin/stdout/stderr. os.environ, sys.argv
    and the streams are restored afterwards. An exception that is not an Exception (a
    test's own BaseException) passes through."""
    saved_env = dict(os.environ)
    saved = sys.argv, sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    # The encodings and error handlers of a real process's streams in a UTF-8 locale.
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict")
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace")
    code, exception = 0, None
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.argv = ["safelaunch", *args]
        sys.stdin = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        try:
            command(list(args))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        except Exception as exc:
            if not catch_exceptions:
                raise
            code, exception = 1, exc
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
        os.environ.clear()
        os.environ.update(saved_env)
        for stream in (stdout, stderr):
            with contextlib.suppress(ValueError):
                stream.flush()
    shown = [stream.getvalue().decode("utf-8", "replace") for stream in (out, err)]
    return Result(code, shown[0], shown[1], exception)


# Values that broke something once, or are the classic traps.
NASTY = [
    "",
    "--",  # argparse handed `--opt=--` an empty list (issue 28)
    " ",
    "0",
    "-1",
    "1",
    "2",
    "4",
    "65535",
    "65536",
    "-65536",
    "99999999999999999999999",
    "1" * 5000,
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "Infinity",
    "1e400",
    "1e-400",
    "1e308",
    "0x10",
    "1_000",
    "٣",  # ARABIC-INDIC DIGIT THREE: int() accepts it
    "٤",
    "4x",
    "-1e9",
    "1e9",
    "１２",  # fullwidth digits
    "²",
    "3\x00",
    "\x00",
    "a\nb",
    "\udcff\udcfe",  # invalid UTF-8 from argv, as Python hands it over
    "é",
    "x" * 5000,
    "/" * 5000,
    "a/" * 3000,
    "localhost",
    "127.0.0.1",
    "::1",
    "[::1]",
    "bad..host",
    "-host",
    "a" * 64 + ".example",
    ("a" * 60 + ".") * 6,
    "host:port",
    "host:99999",
    ":29500",
    "1:2",
    "1:1",
    "0:0",
    "2:1",
    ":",
    "1:",
    "1:2:3",
    "gpu",
    "cpu",
    "auto",
    "xpu",
    "1000000",
    "100000",
    "SIGTERM,",
    "TERM,INT",
    "SIGKILL",
    "0:1,1:2",
    "9:3",
    "0:9",
    "k=v",
    "=v",
    "k=",
    "True",
    "GPU-",
    "GPU-nope",
    "MIG-",
    "7",
    "0,0",
    "0,7,1",
    "-1,0",
    "gpu-[01-03]",
    "gpu-[",
    "gpu-[1-99999999]",
    "2(x3)",
    "(",
]

TORCHRUN_OPTIONS = [
    "nnodes",
    "nproc-per-node",
    "rdzv-backend",
    "rdzv-endpoint",
    "rdzv-id",
    "rdzv-conf",
    "max-restarts",
    "monitor-interval",
    "start-method",
    "event-log-handler",
    "role",
    "log-dir",
    "redirects",
    "tee",
    "local-ranks-filter",
    "duplicate-stdout-filters",
    "duplicate-stderr-filters",
    "node-rank",
    "master-addr",
    "master-port",
    "local-addr",
    "logs-specs",
    "numa-binding",
    "signals-to-handle",
    "shutdown-timeout",
]
TORCHRUN_FLAGS = ["standalone", "module", "no-python", "run-path", "virtual-local-rank"]
OWN_OPTIONS = [
    "hang-timeout",
    "debug-profile",
    "isolate",
    "isolate-timeout",
    "restart-policy",
    "color",
    "signatures",
    "config",
]
OWN_FLAGS = ["strict", "no-preflight", "isolate-single", "isolate-nccl"]
SLURM_VARS = [
    "SLURM_JOB_ID",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_GPUS_ON_NODE",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_ID",
]
FILE_MARKERS = {"@config": "config.toml", "@signatures": "sigs.toml", "@inventory": "gpus.json"}


@dataclass
class Case:
    """argv (options only), environment, and the files `@config`-style values name."""

    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    command: str = "launch"  # launch | explain | doctor


# Plausible values, so that a case gets past the first check and reaches the later ones.
VALID = {
    "nnodes": ["1", "1:1", "2"],
    "nproc-per-node": ["1", "2", "gpu", "auto", "cpu"],
    "rdzv-backend": ["static", "c10d"],
    "rdzv-endpoint": ["", "localhost:29400", "[::1]:29400"],
    "rdzv-conf": ["", "timeout=900", "join_timeout=5,last_call_timeout=1"],
    "max-restarts": ["0", "1"],
    "monitor-interval": ["0.1", "1"],
    "start-method": ["spawn", "fork"],
    "redirects": ["0", "3", "0:1,1:2"],
    "tee": ["0", "3"],
    "local-ranks-filter": ["", "0", "0,1"],
    "node-rank": ["0", "1"],
    "master-addr": ["localhost", "127.0.0.1"],
    "master-port": ["0", "29500", "0"],
    "signals-to-handle": ["SIGTERM,SIGINT", "TERM"],
    "shutdown-timeout": ["30", "0", "1.5"],
    "hang-timeout": ["300", "0", "1.5"],
    "isolate-timeout": ["600", "1"],
    "debug-profile": ["quiet", "default", "full"],
    "isolate": ["auto", "never", "always"],
    "restart-policy": ["auto", "always", "never"],
    "color": ["never"],
    "signatures": ["@signatures"],
    "config": ["@config"],
}


_VALUES: dict[str, st.SearchStrategy[str]] = {}


def _value(name: str = "") -> st.SearchStrategy[str]:
    if name not in _VALUES:
        _VALUES[name] = _build_value(name)
    return _VALUES[name]


def _build_value(name: str) -> st.SearchStrategy[str]:
    valid = st.sampled_from(VALID.get(name, ["1"]))
    return st.one_of(
        *[valid] * 8,
        st.sampled_from(NASTY),
        st.sampled_from(NASTY),
        st.integers().map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=40),
        st.sampled_from(list(FILE_MARKERS)),
    )


def _toml_scalar() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers().map(str),
        st.sampled_from(
            ["nan", "inf", "-inf", "+nan", "1e400", "true", "false", "0x7f", "1979-05-27"]
        ),
        st.floats().map(lambda f: repr(f) if f == f and abs(f) != float("inf") else "nan"),
        st.sampled_from(NASTY).map(
            lambda s: '"' + s.encode("unicode_escape").decode().replace('"', '\\"') + '"'
        ),
        st.just('"@signatures"'),
        st.just("[1, 2]"),
        st.just('["a", "b"]'),
        st.just("{ a = 1 }"),
        st.just("[]"),
    )


def _toml_file(keys: list[str]) -> st.SearchStrategy[bytes]:
    line = st.tuples(st.sampled_from(keys), _toml_scalar()).map(lambda kv: f"{kv[0]} = {kv[1]}")
    plausible = st.sampled_from(sorted(VALID)).flatmap(
        lambda key: st.sampled_from(VALID[key]).map(lambda v: f'{key.replace("-", "_")} = "{v}"')
    )
    structured = st.lists(st.one_of(line, plausible, plausible), max_size=5).map(
        lambda ls: "\n".join(ls).encode()
    )
    return st.one_of(
        structured,
        structured,
        structured,
        structured,
        st.binary(max_size=60),
        st.just(b"a = " + b"[" * 5000 + b"]" * 5000),  # deep nesting
        st.just(b"a = " + b"{b = " * 3000 + b"1" + b"}" * 3000),
        st.just(b'a = "\xff\xfe"'),  # invalid UTF-8
        st.just(b"\x00"),
        st.just(b"[table]\nx = 1"),
        st.just(b"[[signature]]\nid = 1"),
    )


_SIGNATURE_RECORDS = [
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = ["(a+)+$"]\nnext_steps = ["s"]',
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = ["("]\nnext_steps = ["s"]',
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = []\nnext_steps = ["s"]',
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = ["a"]\nnext_steps = "s"',
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = ["a"]\nnext_steps = ["s"]\nclass = 3',
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = ["a"]\nnext_steps = ["s"]\nclass = "zzz"',
    b'[[signature]]\nid = "x"\nmeaning = "m"\npatterns = ["'
    + b"a" * 100000
    + b'"]\nnext_steps = []',
    b"signature = 3",
    b"signature = [1, 2]",
    b'signature = ["a"]',
    b"[signature]\nid = 1",
    b"[[signature]]\n[[signature]]",
]


def _json_value(depth: int = 0) -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True),
        st.text(max_size=10),
        st.sampled_from(NASTY),
    )
    return st.recursive(
        leaf,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "gpus",
                        "index",
                        "uuid",
                        "name",
                        "memory_total_mib",
                        "memory_used_mib",
                        "mig",
                        "processes",
                        "pid",
                        "memory_mib",
                        "problem",
                        "driver_version",
                        "cuda_driver_version",
                        "x",
                    ]
                ),
                inner,
                max_size=5,
            )
        ),
        max_leaves=12,
    )


def _gpu() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "index": st.one_of(
                st.integers(0, 8), st.sampled_from([-1, 10**30, "0", "x", None, 1.5])
            ),
            "uuid": st.sampled_from(["GPU-aaaa", "GPU-bbbb", "GPU-aaab", "", "x", None]),
            "name": st.sampled_from(["H100", "A100", None, 3]),
            "memory_total_mib": st.one_of(
                st.integers(-5, 10**6), st.sampled_from([float("nan"), "8", None])
            ),
            "memory_used_mib": st.one_of(
                st.integers(-5, 10**6), st.sampled_from([float("inf"), None])
            ),
        },
        optional={
            "mig": st.sampled_from([[], ["MIG-1"], "MIG-1", [3], None]),
            "processes": st.sampled_from([[], [{"pid": 1, "memory_mib": 5}], [{"x": 1}], [3], "p"]),
        },
    )


def _inventory_file() -> st.SearchStrategy[bytes]:
    import json

    shaped = st.fixed_dictionaries(
        {"gpus": st.one_of(st.lists(_gpu(), max_size=5), _json_value())},
        optional={
            "driver_version": _json_value(),
            "cuda_driver_version": _json_value(),
            "problem": _json_value(),
        },
    ).map(lambda d: json.dumps(d).encode())
    return st.one_of(
        shaped,
        shaped,
        shaped,
        _json_value().map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=40),
        st.just(b"[" * 100000 + b"]" * 100000),
        st.just(
            b'{"gpus": [{"index": 0, "uuid": "GPU-\xff", "name": "x", '
            b'"memory_total_mib": 1, "memory_used_mib": 0}]}'
        ),
    )


_LAUNCH_KEYS = [
    n.replace("-", "_") for n in TORCHRUN_OPTIONS + OWN_OPTIONS + TORCHRUN_FLAGS + OWN_FLAGS
] + ["help", "x"]
_CONFIG_FILE = _toml_file(_LAUNCH_KEYS)
_SIGNATURES_FILE = st.one_of(st.sampled_from(_SIGNATURE_RECORDS), _toml_file(["signature", "x"]))
_INVENTORY_FILE = _inventory_file()
_ENV_NAMES = (
    [f"PET_{n.replace('-', '_').upper()}" for n in TORCHRUN_OPTIONS + TORCHRUN_FLAGS]
    + [f"SAFELAUNCH_{n.replace('-', '_').upper()}" for n in OWN_OPTIONS + OWN_FLAGS]
    + SLURM_VARS
    + ["CUDA_VISIBLE_DEVICES", "SAFELAUNCH_GPU_INVENTORY", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]
)


@st.composite
def case_strategy(draw: st.DrawFn) -> Case:
    """One hostile invocation."""
    command = draw(st.sampled_from(["launch"] * 8 + ["explain", "doctor"]))
    argv: list[str] = []
    if command == "launch":
        names = TORCHRUN_OPTIONS + OWN_OPTIONS
        flags = TORCHRUN_FLAGS + OWN_FLAGS
    elif command == "explain":
        names, flags = ["signatures"], []
    else:
        names, flags = ["nproc-per-node", "master-addr"], ["json"]
    if command != "doctor" and draw(st.booleans()):
        argv.append("--signatures=@signatures")
    if command == "launch" and draw(st.booleans()):
        argv.append("--config=@config")
    for _ in range(draw(st.integers(0, 4))):
        if flags and draw(st.booleans()) and draw(st.booleans()):
            argv.append("--" + draw(st.sampled_from(flags)))
            continue
        name = draw(st.sampled_from(names))
        spelled = draw(st.sampled_from([name, name.replace("-", "_")]))
        argv.append(f"--{spelled}={draw(_value(name))}")
    env: dict[str, str] = {}
    if command == "launch":
        for _ in range(draw(st.integers(0, 4))):
            env_name = draw(st.sampled_from(_ENV_NAMES))
            option = env_name.split("_", 1)[1].lower().replace("_", "-")
            # A NUL cannot be in a real environment (execve takes C strings).
            env[env_name] = draw(_value(option)).replace("\x00", "")
        if draw(st.booleans()):
            env["SAFELAUNCH_GPU_INVENTORY"] = "@inventory"
        if draw(st.booleans()):
            env["SLURM_JOB_ID"] = draw(st.sampled_from(["123", "x", "٣", "99999999999999999999"]))
    files = {
        "config.toml": draw(_CONFIG_FILE),
        "sigs.toml": draw(_SIGNATURES_FILE),
        "gpus.json": draw(_INVENTORY_FILE),
    }
    if command == "explain" and draw(st.booleans()):  # a run directory, its report anything
        files[RUN_LOG] = b"Traceback (most recent call last):\nValueError: x\n"
        files["run/attempt_0/report.json"] = draw(report_bytes())
    return Case(argv=argv, env=env, files=files, command=command)


RUN_LOG = "run/attempt_0/rank0.log"


NUMBER_FIELDS = (
    "max_restarts",
    "monitor_interval",
    "node_rank",
    "master_port",
    "shutdown_timeout",
    "hang_timeout",
    "isolate_timeout",
)


class WouldStart(BaseException):
    """Where the job would start: every check passed (a BaseException: nothing catches it)."""


@contextlib.contextmanager
def _stopped_before_start() -> Iterator[None]:
    import safelaunch.launch as launch
    import safelaunch.preflight as preflight
    from safelaunch.preflight.probe import TorchFacts

    real = launch.run_preflight

    def checked_only(config: Any) -> Any:
        report = real(config)
        report.master_port.release()
        for name in NUMBER_FIELDS:  # what was accepted is bounded
            value = getattr(config, name)
            if value is not None and not (math.isfinite(value) and abs(value) <= 1e7):
                raise AssertionError(f"accepted {name}={value}")
        raise WouldStart

    saved = launch.run_preflight, preflight.probe_torch
    launch.run_preflight = checked_only
    preflight.probe_torch = lambda: TorchFacts(torch="2.13.0", gloo=True)
    try:
        yield
    finally:
        launch.run_preflight, preflight.probe_torch = saved


def _materialise(value: str, where: Path) -> str:
    for marker, name in FILE_MARKERS.items():
        value = value.replace(marker, str(where / name))
    return value


class _Hang(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


def run_case(case: Case, scratch: str | None = None) -> str | None:
    """None when safelaunch handled the case; else a one-line description of the defect."""
    from safelaunch.cli import doctor_command, explain_command, launch_command

    where = Path(tempfile.mkdtemp(dir=scratch))
    for name, data in case.files.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_bytes(data)
    argv = [_materialise(a, where) for a in case.argv]
    env: dict[str, str | None] = {
        k: None
        for k in os.environ
        if k.startswith(("PET_", "SAFELAUNCH_", "SLURM_", "TORCH_ELASTIC"))
        or k == "CUDA_VISIBLE_DEVICES"
    }
    env.update({k: _materialise(v, where) for k, v in case.env.items()})
    env["SAFELAUNCH_COLOR"] = env.get("SAFELAUNCH_COLOR") or "never"
    if case.command == "launch":
        # The script exists: a case that passes every check reaches the wrapped preflight's end.
        (where / "train.py").write_bytes(b"")
        target, args = (
            launch_command,
            ["--log-dir", str(where / "logs"), *argv, str(where / "train.py")],
        )
    elif case.command == "explain":
        read = where / ("run" if RUN_LOG in case.files else "gpus.json")
        target, args = explain_command, [*argv, str(read)]
    else:
        target, args = doctor_command, argv
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        with _stopped_before_start():
            result = invoke(target, args, env=env, catch_exceptions=True)
    except _Hang:
        return "hang"
    except WouldStart:
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return _verdict(result, where)


def _verdict(result: Any, where: Path) -> str | None:
    exc = result.exception
    if isinstance(exc, _Hang):
        return "hang"
    if isinstance(exc, WouldStart):
        return None
    output = result.output
    if "Traceback" in output:
        tail = [line for line in output.splitlines() if line.strip()]
        frames = [line for line in tail if line.strip().startswith("File ")]
        where_ = frames[-1].strip()[:160] if frames else "?"
        return f"traceback: {tail[-2][:120] if len(tail) > 1 else ''} at {where_}"
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return (
            f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno} ({str(exc)[:80]})"
        )
    said = [line for line in output.splitlines() if line.startswith("safelaunch: error:")]
    # A usage error's one `usage: safelaunch ...` line (argparse's) comes with its error line.
    shown = [line for line in output.splitlines() if line.strip()]
    if said and len(said) != len([line for line in shown if not line.startswith("usage: ")]):
        return f"more than one line: {output.strip()[:160]!r}"
    if result.exit_code not in (0, 2, 78):
        return f"exit {result.exit_code}: {output.strip()[-160:]}"
    if (where / "logs").exists():
        return "log directory created by a launch that did not start"
    return None


# --- explain's readers: run directories whose records are anything -------------------

# A report.json as a failed 2-rank run writes it (the fields explain's readers use).
REPORT = {
    "status": "failed",
    "exit_code": 1,
    "stopped_by_node": None,
    "ranks": [
        {"rank": 0, "state": "failed", "exit_code": 1, "signal": None, "ended_after_s": 1.5},
        {"rank": 1, "state": "stopped", "exit_code": None, "signal": "SIGTERM"},
    ],
    "diagnosis": {
        "class": "data/sampling",
        "root_cause_rank": 0,
        "signature": "x",
        "summary": "s",
        "next_steps": ["n"],
        "leaves": {"0": {"how": "sys.exit", "code": 1, "seq": 3, "frames": [["t.py", 3, "f"]]}},
        "collectives": {"0": 3, "1": 4},
    },
    "hang": {
        "stuck_for_s": 6.0,
        "culprits": [1],
        "groups": [{"ranks": [0], "activity": "all_reduce", "location": "t.py:9 in <module>"}],
        "reason": "r",
    },
}


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key/index path into `value`, itself included."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _places(item, (*path, index))


_REPORT_PLACES = list(_places(REPORT))[1:]


@st.composite
def report_document(draw: st.DrawFn) -> Any:
    """REPORT with one to three of its parts replaced by any JSON value (a number where a
    list was, a string for a rank, ...), or any JSON value at all."""
    import copy

    if draw(st.integers(0, 4)) == 0:
        return draw(_json_value())
    document = copy.deepcopy(REPORT)
    for _ in range(draw(st.integers(1, 3))):
        *parents, last = draw(st.sampled_from(_REPORT_PLACES))
        node: Any = document
        for key in parents:
            fits = isinstance(node, dict) and key in node
            fits = fits or (isinstance(node, list) and isinstance(key, int) and key < len(node))
            if not fits:
                break
            node = node[key]
        else:
            keyed = isinstance(node, dict) and isinstance(last, str)
            if keyed or (isinstance(node, list) and isinstance(last, int) and last < len(node)):
                node[last] = draw(_json_value())
    return document


def report_bytes() -> st.SearchStrategy[bytes]:
    """report.json's bytes: a mutated report, deep nesting, NaN, truncation, any bytes."""
    import json

    document = report_document().map(lambda d: json.dumps(d).encode())
    deep = st.integers(17, 20000).map(lambda n: b'{"ranks": ' + b"[" * n + b"]" * n + b"}")
    return st.one_of(
        document,
        document,
        document,
        deep,
        document.map(lambda b: b[: len(b) // 2]),  # cut short
        st.just(b'{"ranks": [{"rank": 0, "ended_after_s": NaN}]}'),
        st.binary(max_size=80),
    )


def explain_path() -> st.SearchStrategy[str]:
    """A PATH for explain: the run directory (`@run`), or a path that is not one."""
    return st.one_of(
        *[st.just("@run")] * 6,
        st.just("@run/attempt_0/rank0.log"),
        st.just("@run/attempt_0/report.json"),
        st.sampled_from(["x" * 5000, "y" * 256, "a/" * 3000, "/dev/null", "", "\x00", "é/☃"]),
        st.text(max_size=30).map(lambda t: "@run/" + t),
    )
