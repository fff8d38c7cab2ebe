"""The fault zoo: failures people hit with torch.distributed, and what a correct report says.

Each case is one small script in scenarios/ (CPU, Gloo, 2 ranks) and the report a
person debugging it would want: the class (one of the five, "unknown" for native
crashes no class fits, None when there is nothing to report), the culprit rank(s),
the line to look at (the script line marked `# FAULT`, None when no line says it),
the exit code, and whether a rerun on another communication backend is worth it.
The sources are issue threads and docs of PyTorch, DeepSpeed, accelerate and Lightning
(named per case), not safelaunch's rules; several cases are ones safelaunch gets wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SCENARIOS = Path(__file__).parent / "scenarios"
ENV, COMM, DATA, MODEL, RES = (
    "environment/launch",
    "communication",
    "data/sampling",
    "model/gradient",
    "resources",
)
UNKNOWN = "unknown"
ANY = (0, 1)  # every rank fails the same way: any of them is a right answer


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One scenario and its correct report."""

    name: str
    source: str  # where people hit it
    klass: str | None
    ranks: tuple[int, ...]  # acceptable culprits (a hang: the set of culprits); () for none
    located: bool  # the report should point at the `# FAULT` line
    exit_code: int
    isolate: bool  # a Gloo/transport rerun is worth running
    kind: str = "failure"  # failure | hang | clean | preflight
    module: str | None = None  # run as `-m module` (cwd: scenarios/)
    env: dict[str, str] = field(default_factory=dict)
    ci: bool = False  # in the fast subset that runs in the test suite
    needs: str | None = None  # a tool the case needs (skipped without it)

    @property
    def script(self) -> Path:
        return SCENARIOS / f"{self.name}.py"

    def fault_line(self) -> str | None:
        """`file.py:N` of the line marked `# FAULT`."""
        if not self.located:
            return None
        path = SCENARIOS / "pkg" / "broken.py" if self.module else self.script
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "# FAULT" in line:
                # a marker "(the line above)" points one line up (a syntax error's line)
                return f"{path.name}:{number - 1 if '(the line above)' in line else number}"
        raise ValueError(f"{path} has no # FAULT marker")


HANG = 124
CASES: tuple[Case, ...] = (
    # --- environment / launch -------------------------------------------------
    Case(
        name="env_import_missing",
        source="accelerate/DeepSpeed: ModuleNotFoundError on the nodes, fine on the login host",
        klass=ENV,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
        ci=True,
    ),
    Case(
        name="env_import_one_rank",
        source="pytorch forums: optional logger imported only on some ranks",
        klass=ENV,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="env_syntax_error",
        source="torchrun starts every rank just to fail on a SyntaxError (pytorch#67238-style)",
        klass=ENV,
        ranks=ANY,  # torchrun starts every rank and every one dies of it
        located=True,
        exit_code=1,
        isolate=False,
        kind="preflight",
        ci=True,
    ),
    Case(
        name="env_indentation_error",
        source="an edit on the cluster mixes indentation; IndentationError on every rank",
        klass=ENV,
        ranks=ANY,  # torchrun starts every rank and every one dies of it
        located=True,
        exit_code=1,
        isolate=False,
        kind="preflight",
    ),
    Case(
        name="env_module_syntax_error",
        source="python -m package.train with a syntax error in the module",
        klass=ENV,
        ranks=ANY,  # torchrun starts every rank and every one dies of it
        located=True,
        exit_code=1,
        isolate=False,
        kind="preflight",
        module="pkg.broken",
    ),
    Case(
        name="env_nccl_on_cpu",
        source="pytorch#(many): 'Distributed package doesn't have NCCL built in'",
        klass=ENV,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="env_pg_not_initialized",
        source="'Default process group has not been initialized' (init behind a flag)",
        klass=ENV,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="env_cuda_on_cpu",
        source="'Torch not compiled with CUDA enabled' on a CPU wheel",
        klass=ENV,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="env_missing_file",
        source="relative data path, job started from another directory (Lightning/SLURM)",
        klass=ENV,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="env_world_size_wrong",
        source="hard-coded world_size: 'Timed out after N seconds waiting for clients'",
        klass=ENV,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    # --- communication ----------------------------------------------------------
    Case(
        name="comm_shape_mismatch",
        source="pytorch#(gloo) 'Received data size doesn't match expected size'",
        klass=COMM,
        ranks=(1,),
        located=True,
        exit_code=134,
        isolate=True,
    ),
    Case(
        name="comm_op_order",
        source="collectives issued in a different order per rank (metrics/logging code)",
        klass=COMM,
        ranks=(1,),
        located=True,
        exit_code=HANG,
        isolate=True,
        kind="hang",
    ),
    Case(
        name="comm_send_recv_deadlock",
        source="pipeline schedules: both stages recv first",
        klass=COMM,
        ranks=ANY,
        located=True,
        exit_code=HANG,
        isolate=True,
        kind="hang",
    ),
    Case(
        name="comm_timeout_slow_rank",
        source="short init timeout + slow evaluation on one rank ('Timed out waiting ...ms')",
        klass=COMM,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=True,
    ),
    Case(
        name="comm_new_group_one_rank",
        source="new_group must be called by every rank (pytorch docs warning, forum threads)",
        klass=COMM,
        ranks=(0,),
        located=True,
        exit_code=HANG,
        isolate=True,
        kind="hang",
    ),
    Case(
        name="comm_barrier_rank0_only",
        source="dist.barrier() under `if rank == 0:` around checkpointing",
        klass=COMM,
        ranks=(0,),
        located=True,
        exit_code=HANG,
        isolate=True,
        kind="hang",
    ),
    # --- data / sampling --------------------------------------------------------
    Case(
        name="data_uneven_batches",
        source="uneven shards without DistributedSampler/drop_last (pytorch#(Join) motivation)",
        klass=DATA,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
        ci=True,
    ),
    Case(
        name="data_early_stop_one_rank",
        source="Lightning/accelerate: early stopping decided on one rank's local loss",
        klass=DATA,
        ranks=(0,),
        located=True,
        exit_code=1,
        isolate=False,
        ci=True,
    ),
    Case(
        name="data_break_skip_destroy",
        source="one rank breaks out of the loop and exits without destroy_process_group",
        klass=DATA,
        ranks=(0,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="data_sampler_shuffle",
        source="'sampler option is mutually exclusive with shuffle'",
        klass=DATA,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="data_stop_iteration",
        source="fixed step count with next(iter(loader)), shorter shard on one rank",
        klass=DATA,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
        ci=True,
    ),
    Case(
        name="data_worker_error",
        source="'Caught ValueError in DataLoader worker process 0' (a bad record)",
        klass=DATA,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="data_decode_error",
        source="UnicodeDecodeError reading a text corpus",
        klass=DATA,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="data_worker_killed",
        source="'DataLoader worker (pid(s) ...) exited unexpectedly'",
        klass=DATA,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="data_collate_sizes",
        source="'stack expects each tensor to be equal size' (variable-length samples)",
        klass=DATA,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    # --- model / gradient ---------------------------------------------------------
    Case(
        name="model_ddp_unused",
        source="'Expected to have finished reduction in the prior iteration' (pytorch#43259)",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="model_ddp_different_models",
        source="'DDP expects same model across all ranks'",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="model_shape_mismatch",
        source="'mat1 and mat2 shapes cannot be multiplied'",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
        ci=True,
    ),
    Case(
        name="model_nan_anomaly",
        source="'Function SqrtBackward0 returned nan values in its 0th output'",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="model_state_dict_prefix",
        source="'Error(s) in loading state_dict' with the 'module.' prefix of DDP",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="model_inplace",
        source="'modified by an inplace operation' (pytorch forums, most asked)",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="model_backward_twice",
        source="'Trying to backward through the graph a second time'",
        klass=MODEL,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="model_zero_division",
        source="accuracy over an empty eval shard on the last rank",
        klass=MODEL,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    # --- resources ------------------------------------------------------------------
    Case(
        name="res_memory_error",
        source="MemoryError from a buffer sized from config",
        klass=RES,
        ranks=(0,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="res_cpu_alloc",
        source="'DefaultCPUAllocator: can't allocate memory'",
        klass=RES,
        ranks=(1,),
        located=True,
        exit_code=1,
        isolate=False,
    ),
    Case(
        name="res_disk_full",
        source="checkpoint save on a full disk: OSError [Errno 28] (DeepSpeed/Lightning)",
        klass=RES,
        ranks=(0,),
        located=True,
        exit_code=1,
        isolate=False,
        ci=True,
    ),
    Case(
        name="res_oom_killed",
        source="the kernel's OOM killer: torchrun says 'exitcode: -9'",
        klass=RES,
        ranks=(1,),
        located=False,
        exit_code=137,
        isolate=False,
        ci=True,
    ),
    Case(
        name="res_open_files",
        source="'Too many open files' with a low ulimit -n",
        klass=RES,
        ranks=ANY,
        located=True,
        exit_code=1,
        isolate=False,
    ),
    # --- native crashes -----------------------------------------------------------
    Case(
        name="native_cpp_throw",
        source="'terminate called after throwing an instance of ...' from a C++ extension",
        klass=UNKNOWN,
        ranks=(1,),
        located=True,
        exit_code=134,
        isolate=True,
        needs="g++",
    ),
    Case(
        name="native_segfault",
        source="SIGSEGV in native code (exitcode -11 under torchrun)",
        klass=UNKNOWN,
        ranks=(1,),
        located=True,
        exit_code=139,
        isolate=True,
    ),
    # --- hangs --------------------------------------------------------------------
    Case(
        name="hang_data_stuck",
        source="a stuck read in the input pipeline; NCCL watchdog fires 10 min later",
        klass=DATA,
        ranks=(1,),
        located=True,
        exit_code=HANG,
        isolate=False,
        kind="hang",
    ),
    Case(
        name="hang_lock_one_rank",
        source="a deadlock on one rank (logging/metrics thread) while the others wait",
        klass=UNKNOWN,
        ranks=(0,),
        located=True,
        exit_code=HANG,
        isolate=False,
        kind="hang",
        ci=True,
    ),
    Case(
        name="hang_busy_loop",
        source="an endless Python retry loop on one rank",
        klass=UNKNOWN,
        ranks=(1,),
        located=True,
        exit_code=HANG,
        isolate=False,
        kind="hang",
    ),
    Case(
        name="hang_sigstop",
        source="a rank stopped (SIGSTOP, a forgotten debugger)",
        klass=UNKNOWN,
        ranks=(1,),
        located=True,
        exit_code=HANG,
        isolate=False,
        kind="hang",
    ),
    # --- no fault: must not raise an alarm ------------------------------------------
    Case(
        name="ok_long_compute",
        source="long compute between collectives",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
    ),
    Case(
        name="ok_slow_start",
        source="one rank starts late (slow imports, cold filesystem)",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
    ),
    Case(
        name="ok_heavy_logging",
        source="heavy per-step logging and progress bars",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
    ),
    Case(
        name="ok_uneven_join",
        source="uneven inputs under the Join context manager",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
    ),
    Case(
        name="ok_checkpoint_barrier",
        source="rank 0 writes a checkpoint while the others wait in a barrier",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
    ),
    Case(
        name="ok_uneven_finish",
        source="ranks finish their work at different times, then meet",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
        ci=True,
    ),
    Case(
        name="ok_rank0_only_eval",
        source="rank 0 evaluates alone between epochs",
        klass=None,
        ranks=(),
        located=False,
        exit_code=0,
        isolate=False,
        kind="clean",
    ),
)
