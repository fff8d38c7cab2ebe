"""Real torch.distributed on CPU with Gloo, and parity with torchrun 2.13 itself."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import console_lines, launch, marked_env, worker

# Found, not imported: importing torch here would cost each pytest worker ~1.3-2 CPU-s at
# collection, for tests whose ranks import it themselves.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)
EXAMPLE = str(Path(__file__).parents[1] / "scripts" / "train_toy_ddp.py")

# Variables that differ between any two launches, or that only one launcher sets by design
# (documented in docs/compatibility.md).
EXPECTED_VALUE_DIFFERENCES = {
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
}
# set by the tests themselves (conftest)
HARNESS = {
    "PIDS_DIR",
    "SAFELAUNCH_TEST_MARK",
    "SAFELAUNCH_COLOR",
    "SAFELAUNCH_ISOLATE",
    "SAFELAUNCH_CACHE_DIR",
}


@pytest.mark.slow
def test_toy_ddp_trains_on_gloo(tmp_path: Path) -> None:
    run = launch(tmp_path, "--nproc_per_node=2", EXAMPLE, "--steps", "6", timeout=120)
    for rank in (0, 1):
        lines = console_lines(run.stdout, rank)
        assert any(line.startswith("step   5 loss") and "world size 2" in line for line in lines)
    if run.returncode != 0:
        # torch's Gloo teardown race (rare with the example's cleanup, measured ~1 in 80 here):
        # after all the work, a rank aborts at exit; safelaunch must say exactly that
        assert run.returncode == 134, run.stderr
        assert "(shutdown-crash)" in run.stderr and "not a training failure" in run.stderr


@pytest.mark.slow
def test_torchs_own_rank_prefix_is_not_doubled(tmp_path: Path) -> None:
    run = launch(
        tmp_path, "--nproc_per_node=2", EXAMPLE, "--fail-rank", "1", "--fail-step", "2", timeout=120
    )
    # 1, or the rank's own SIGABRT/SIGSEGV when torch's Gloo teardown crashes at exit after
    # the exception (7 runs in 12 under torchrun itself, measured)
    assert run.returncode in (1, 134, 139)
    assert "bootstrap.py" not in run.stdout  # safelaunch's own frames never show
    assert "[rank1]: [rank1]:" not in run.stdout
    assert "[rank1]: RuntimeError: injected failure on rank 1 at step 2" in run.stdout
    # the file keeps torch's own marker, byte for byte
    assert b"[rank1]: RuntimeError: injected failure on rank 1 at step 2" in run.rank_log(1)
    assert "error: RuntimeError: injected failure on rank 1 at step 2" in run.stderr
    assert "train_toy_ddp.py" in run.stderr.split("at:")[1].splitlines()[0]


@pytest.mark.slow
def test_worker_environment_matches_torchrun(tmp_path: Path, torchrun: str) -> None:
    ours = tmp_path / "ours"
    theirs = tmp_path / "theirs"
    for where in (ours, theirs):
        where.mkdir()
    # quiet: torchrun's environment exactly; the default profile's additions are pinned below
    run = launch(
        ours,
        "--nproc_per_node=2",
        "--max-restarts=1",
        "--debug-profile=quiet",
        worker("dump_env.py"),
        "a",
    )
    assert run.returncode == 0, run.stderr
    env, _ = marked_env(theirs)
    subprocess.run(
        [torchrun, "--nproc_per_node=2", "--max-restarts=1", worker("dump_env.py"), "a"],
        cwd=theirs,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    for rank in (0, 1):
        mine = json.loads((ours / "pids" / f"env{rank}.json").read_text())
        real = json.loads((theirs / "pids" / f"env{rank}.json").read_text())
        mine_env, real_env = mine["env"], real["env"]
        added_by_us = set(mine_env) - set(os.environ) - HARNESS
        added_by_torchrun = set(real_env) - set(os.environ) - HARNESS
        ours_only = {name for name in added_by_us if name.startswith("SAFELAUNCH_")}
        assert added_by_us - ours_only - {"PYTHONUNBUFFERED"} == added_by_torchrun
        for name in added_by_torchrun - EXPECTED_VALUE_DIFFERENCES:
            assert mine_env[name] == real_env[name], name
        # what the script sees; sys.orig_argv differs (the bootstrap, documented)
        for key in ("argv", "name", "path0"):
            assert mine[key] == real[key], key
        assert mine["orig_argv"][1] == real["orig_argv"][1] == "-u"
        # same interpreter (spelled python or python3 depending on how each was started)
        assert Path(mine["orig_argv"][0]).resolve() == Path(real["orig_argv"][0]).resolve()


@pytest.mark.slow
def test_record_decorator_writes_into_our_error_file(tmp_path: Path) -> None:
    script = tmp_path / "recorded.py"
    script.write_text(
        "import os\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "\n"
        "def check_batch():\n"
        "    raise ValueError('batch 3 has 0 samples')\n"
        "\n"
        "@record\n"
        "def main():\n"
        "    if os.environ['RANK'] == '1':\n"
        "        check_batch()\n"
        "\n"
        "main()\n"
    )
    run = launch(tmp_path, "--nproc-per-node=2", str(script), timeout=120)
    assert run.returncode == 1
    assert (run.attempt() / "rank1.error.json").exists()
    assert "error: ValueError: batch 3 has 0 samples" in run.stderr
    assert f"at:    {script}:5 in check_batch" in run.stderr


def test_default_profile_adds_only_the_documented_debug_variables(tmp_path: Path) -> None:
    quiet, default = tmp_path / "quiet", tmp_path / "default"
    for where, profile in ((quiet, "quiet"), (default, "default")):
        where.mkdir()
        assert launch(where, f"--debug-profile={profile}", worker("dump_env.py")).returncode == 0
    q = json.loads((quiet / "pids" / "env0.json").read_text())["env"]
    d = json.loads((default / "pids" / "env0.json").read_text())["env"]
    assert set(d) - set(q) == {
        "NCCL_DEBUG",
        "NCCL_DEBUG_FILE",
        "TORCH_FR_BUFFER_SIZE",
        "TORCH_FR_DUMP_TEMP_FILE",
        "TORCH_NCCL_DUMP_ON_TIMEOUT",
    }
