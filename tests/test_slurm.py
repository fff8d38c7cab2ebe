"""The shipped sbatch scripts on a real SLURM cluster (scripts/ci/slurm-cluster.sh).

One controller and two slurmd "nodes" (n1, n2) on loopback with fake GPUs (GRES), so
SLURM_GPUS_ON_NODE, SLURM_JOB_NODELIST and SLURM's own signals are real. Every job of the
group is submitted at once when the group starts and runs side by side; each test then
waits for its own job. The scripts are changed only where their comments say: the
script and its arguments on the last line, the rest through sbatch's command line.

Where no cluster can start (not root, no apt), every test here is SKIPPED with the reason
(`.ci/run` prints it again at the end, loudly).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import assert_no_orphans, marked_env, safelaunch_cmd, worker

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "scripts" / "ci" / "slurm-cluster.sh"
TRAIN = "scripts/train_toy_ddp.py"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
# cheap ranks: 1 CPU each on the declared 8-CPU nodes (they share the real cores)
SMALL = ["--gpus-per-node=2", "--cpus-per-task=1"]


@pytest.fixture(scope="session")
def cluster() -> Iterator[None]:
    """A running cluster for the whole group: reused if up, else started and stopped."""
    if subprocess.run([str(CLUSTER), "status"], capture_output=True).returncode == 0:
        yield
        return
    started = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True)
    if started.returncode == 3:
        pytest.skip(f"no SLURM cluster here: {started.stderr.strip().splitlines()[-1]}")
    assert started.returncode == 0, started.stderr
    try:
        yield
    finally:
        subprocess.run([str(CLUSTER), "stop"], capture_output=True)


@dataclass
class Job:
    """One submitted job: its id, where its files go, and its test mark."""

    name: str
    id: str
    where: Path
    mark: str
    submitted: float = field(default_factory=time.monotonic)

    @property
    def out(self) -> Path:
        return self.where / f"slurm-{self.id}.out"

    def text(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def restarts(self) -> int:
        """How often SLURM requeued the job (`Restarts=` of scontrol show job)."""
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", self.id], capture_output=True, text=True
        ).stdout
        found = re.search(r"Restarts=(\d+)", shown)
        return int(found[1]) if found else -1

    def state(self) -> tuple[str, str]:
        """(JobState, ExitCode) as `scontrol show job` records them."""
        shown = subprocess.run(
            ["scontrol", "show", "job", "-o", self.id], capture_output=True, text=True
        ).stdout
        state = re.search(r"JobState=(\S+)", shown)
        code = re.search(r"ExitCode=(\S+)", shown)
        return (state[1] if state else "?", code[1] if code else "?")

    def wait(self, timeout: float = 240) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        while (found := self.state())[0] not in FINAL:
            assert time.monotonic() < deadline, f"{self.name}: still {found}\n{self.text()}"
            time.sleep(0.5)
        return found

    def wait_ready(self, ranks: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while len(list((self.where / "pids").glob("ready-*"))) < ranks:
            assert time.monotonic() < deadline, f"{self.name}: not ready\n{self.text()}"
            assert self.state()[0] in ("PENDING", "RUNNING"), (self.state(), self.text())
            time.sleep(0.2)

    def reports(self) -> list[dict]:  # type: ignore[type-arg]
        """report.json of every node (one run directory per node)."""
        found = sorted((self.where / "logs").glob("2*/attempt_0/report.json"))
        return [json.loads(p.read_text()) for p in found]


def _script(tmp: Path, name: str, last_line: str, saved_as: str) -> Path:
    """The shipped script, with its last line's script and arguments replaced."""
    text = (REPO / "scripts" / "slurm" / f"{name}.sbatch").read_text().rstrip("\n")
    head, last = text.rsplit("\n", 1)
    assert TRAIN in last, last  # the line its comment says to change
    path = tmp / f"{saved_as}.sbatch"
    path.write_text(head + "\n" + last.replace(TRAIN, last_line) + "\n")
    return path


def _submit(
    base: Path, name: str, script: Path, sbatch: list[str], env: dict[str, str] | None = None
) -> Job:
    where = base / name
    where.mkdir()
    run_env, mark = marked_env(where, {"PET_LOG_DIR": str(where / "logs"), **(env or {})})
    where_to = [f"--chdir={REPO}", f"--output={where}/slurm-%j.out"]
    submitted = subprocess.run(
        ["sbatch", "--parsable", *where_to, *sbatch, str(script)],
        env=run_env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Job(name=name, id=submitted.stdout.strip().split(";")[0], where=where, mark=mark)


@pytest.fixture(scope="module")
def jobs(cluster: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    """Every job of the group, submitted together: they run side by side."""
    base = tmp_path_factory.mktemp("slurm")
    rank = worker("signal_rank.py")
    one = _script(base, "one_node", TRAIN + " --steps 5", "train_one")
    two = _script(base, "multi_node", TRAIN + " --steps 5", "train_two")
    failing = TRAIN + " --steps 5 --fail-rank 3 --fail-step 1"
    fail_two = _script(base, "multi_node", failing, "fail_two")
    signals_one = _script(base, "one_node", rank, "signals_one")
    signals_two = _script(base, "multi_node", rank, "signals_two")
    # The documented requeue line (docs/restarts.md): exit 75 asks SLURM for a requeue.
    cases, requeue = worker("restart_cases.py"), base / "requeue.sbatch"
    requeue.write_text(
        "#!/bin/bash\nsource .venv/bin/activate\necho run $SLURM_RESTART_COUNT\n"
        f"srun safelaunch --max-restarts 1 --isolate never {cases} || "
        '{ code=$?; [ "$code" -eq 75 ] && scontrol requeue "$SLURM_JOB_ID"; exit "$code"; }\n'
    )
    steps = base / "steps.sbatch"
    steps.write_text(
        "#!/bin/bash\nset -euo pipefail\nsource .venv/bin/activate\n"
        f"srun --nodes=1 --ntasks=1 --relative=1 safelaunch {rank}\n"
    )
    submitted = [
        # the longest first: a hard time limit (SLURM's shortest is one minute)
        ("time_limit", signals_one, [*SMALL, "--time=1", "--signal=USR1@50"], {"SAVE_S": "2"}),
        ("scancel_one", signals_one, SMALL, {}),
        # no checkpoint time: the ranks die of SLURM's SIGTERM before safelaunch acts on its own
        ("scancel_two", signals_two, SMALL, {"SAVE_S": "0"}),
        ("signal_term", signals_one, [*SMALL, "--time=1", "--signal=TERM@60"], {}),
        ("fail_one", signals_one, SMALL, {"FAIL_RANK": "1"}),
        ("train_one", one, SMALL, {}),
        ("train_two", two, SMALL, {}),
        ("fail_two", fail_two, SMALL, {}),
        ("step", steps, [*SMALL, "--nodes=2", "--ntasks-per-node=1"], {"RUN_S": "1"}),
        ("transient", requeue, [*SMALL, "--requeue", "--open-mode=append"], {"CASE": "kill"}),
        ("deterministic", requeue, [*SMALL, "--requeue", "--open-mode=append"], {"CASE": "import"}),
    ]
    found = {name: _submit(base, name, s, opts, env) for name, s, opts, env in submitted}
    try:
        yield found
    finally:
        for job in found.values():
            with contextlib.suppress(Exception):
                subprocess.run(["scancel", job.id], capture_output=True, timeout=10)


def _assert_gone(job: Job) -> None:
    """No process of the job is left, on any node (the "nodes" share this host)."""
    assert_no_orphans(job.mark, within=5.0)


def test_scancel_one_node_stops_ranks_reports_and_leaves_nothing(jobs: dict[str, Job]) -> None:
    job = jobs["scancel_one"]
    job.wait_ready(2)
    subprocess.run(["scancel", job.id], check=True)
    assert job.wait() == ("CANCELLED", "0:15"), job.text()
    text = job.text()
    assert text.count("saved") == 2, text  # each rank finished its checkpoint
    assert "killing now" not in text
    reports = job.reports()
    assert [r["status"] for r in reports] == ["interrupted"], text
    assert {rank["state"] for rank in reports[0]["ranks"]} == {"stopped"}, text
    _assert_gone(job)


def test_scancel_two_nodes_stops_every_node(jobs: dict[str, Job]) -> None:
    job = jobs["scancel_two"]
    job.wait_ready(4)
    subprocess.run(["scancel", job.id], check=True)
    assert job.wait() == ("CANCELLED", "0:15"), job.text()
    text = job.text()
    assert text.count("saved") == 4 and "killing now" not in text, text
    assert "rank 3 on n2 got SIGTERM" in text  # SLURMD_NODENAME: the node, not the host
    reports = job.reports()
    assert [r["status"] for r in reports] == ["interrupted", "interrupted"], text
    assert {rank["state"] for r in reports for rank in r["ranks"]} == {"stopped"}, text
    _assert_gone(job)


def test_signal_term_before_the_limit_stops_the_job_with_143(jobs: dict[str, Job]) -> None:
    """--signal=TERM@60 with --time=1: SLURM sends it at once (it may be up to 60 s early)."""
    job = jobs["signal_term"]
    assert job.wait() == ("FAILED", "143:0"), job.text()
    text = job.text()
    assert text.count("saved") == 2 and "exit code 143" in text, text
    assert [r["status"] for r in job.reports()] == ["interrupted"]
    _assert_gone(job)


def test_a_rank_that_raises_fails_the_job_with_its_code(jobs: dict[str, Job]) -> None:
    job = jobs["fail_one"]
    assert job.wait() == ("FAILED", "1:0"), job.text()
    text = job.text()
    assert "FAILED: rank 1 exited with code 1" in text
    assert "RuntimeError: rank 1 broke on purpose" in text
    _assert_gone(job)


def test_one_node_trains_with_slurms_gpu_count(jobs: dict[str, Job]) -> None:
    job = jobs["train_one"]
    assert job.wait() == ("COMPLETED", "0:0"), job.text()
    text = job.text()
    assert "nproc_per_node=2 (SLURM_GPUS_ON_NODE)" in text
    assert "all 2 ranks succeeded" in text and "[rank1]: step   4" in text
    _assert_gone(job)


def test_two_nodes_train(jobs: dict[str, Job]) -> None:
    job = jobs["train_two"]
    assert job.wait() == ("COMPLETED", "0:0"), job.text()
    text = job.text()
    assert "master_addr=n1 (first host of SLURM_STEP_NODELIST)" in text
    assert "node 1 of 2 (n2)" in text and "[node1/rank3]: step   4" in text
    _assert_gone(job)


def test_a_failed_two_node_job_is_explained_from_its_out_file(jobs: dict[str, Job]) -> None:
    job = jobs["fail_two"]
    assert job.wait() == ("FAILED", "1:0"), job.text()
    text = job.text()
    assert "FAILED on node 1 (n2)" in text, text
    explained = subprocess.run(
        safelaunch_cmd("explain", str(job.out)), capture_output=True, text=True, timeout=60
    )
    assert "root cause: rank 3 on node 1 (n2)" in explained.stdout, explained
    assert "injected failure on rank 3 at step 1" in explained.stdout
    _assert_gone(job)


def test_a_step_on_part_of_the_allocation_uses_the_steps_nodes(jobs: dict[str, Job]) -> None:
    job = jobs["step"]
    assert job.wait() == ("COMPLETED", "0:0"), job.text()
    text = job.text()
    assert "nnodes=1 (SLURM_STEP_NUM_NODES)" in text
    assert "rank 1 on n2 done" in text and "all 2 ranks succeeded" in text
    _assert_gone(job)


def test_hard_time_limit_and_usr1_reach_the_ranks_once(jobs: dict[str, Job]) -> None:
    """--signal=USR1@50 then the one-minute limit: SLURM's two SIGTERMs are one request."""
    job = jobs["time_limit"]
    assert job.wait() == ("TIMEOUT", "0:15"), job.text()
    text = job.text()
    assert "SLURM sent it to every process of the step" in text
    for rank in (0, 1):
        assert text.count(f"rank {rank} on n1 got SIGUSR1") == 1, text  # once, not twice
    assert text.count("saved") == 2 and "killing now" not in text, text
    assert [r["status"] for r in job.reports()] == ["interrupted"]
    _assert_gone(job)


def test_requeue_follows_the_restart_verdict(jobs: dict[str, Job]) -> None:
    """--requeue and the documented line: a transient failure that used its restarts (75)
    is requeued and then succeeds; a deterministic one (93) ends FAILED, not requeued."""
    transient, deterministic = jobs["transient"], jobs["deterministic"]
    assert transient.wait() == ("COMPLETED", "0:0"), transient.text()
    assert transient.restarts() == 1, transient.text()
    text = transient.text()
    assert "exit code 75 (requeue may help; the root cause's own code: 137)" in text, text
    assert "run 1" in text  # the requeued run: SLURM_RESTART_COUNT=1
    assert deterministic.wait() == ("FAILED", "93:0"), deterministic.text()
    assert deterministic.restarts() == 0
    assert "restarts stopped (1 of 1 left): deterministic failure" in deterministic.text()
    _assert_gone(transient)
    _assert_gone(deterministic)
