"""The heartbeat sender: a daemon thread that says where the rank's main thread is.

Every interval it samples the main thread's stack (sys._current_frames keeps
working while the main thread waits in a collective, which releases the GIL),
reads the collective sequence number when torch.distributed is initialised, and
replaces the rank's record atomically. Between records it samples the stack's phase
(data, compute, collective) more often, for the straggler verdict. When native code
holds the GIL the thread cannot run: the record going stale is itself the signal.

A busy Python loop is always sampled at the same eval-breaker point, so its stack
looks frozen: the main thread's CPU time tells it apart from a wait. Not under
NCCL, whose waits spin in a CUDA synchronisation and burn CPU while hung.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from safelaunch.rank import names
from safelaunch.rank.phases import Phases
from safelaunch.rank.stdlib_standins import Bell, Flag, Lock, get_ident, start_thread, suppress
from safelaunch.rundir import exit_file, heartbeat_file

TYPE_CHECKING = False  # `types` and `typing` cost every rank at start; only mypy needs them
if TYPE_CHECKING:
    from types import FrameType, ModuleType

FRAMES_KEPT = 12  # innermost frames stored in the record
FRAMES_COMPARED = 64  # frames that count for "has the stack changed"
BUSY = 0.2  # main-thread CPU seconds per wall second that count as computing
# Phase samples are taken more often than records are written. The straggler verdict
# compares two ranks' shares of samples: at one sample per 0.2 s beat, a 30% slower data
# loader in an 8 s job gave ~40 samples a rank, and the noise named compute in about one
# run of six. A sample costs ~23 us with a Gloo group (measured), 0.05% of a core here.
SAMPLE_PERIOD = 0.05
# Before the default group exists there is nothing to sample, only beats to write: the
# thread then wakes only to beat, and init_process_group rings it (group_started()). A timed
# wake costs ~90 us of CPU on this machine's VM; waking 20 times a second there cost a rank
# ~0.3 s in the ~40 s that 16 nodes x 2 ranks take to import torch on 2 cores
# (bench/scale.py --what start), and 4 times a second still ~0.15 s.

_active: Beater | None = None
# Set when the rank destroys its default group: (collectives issued, where, innermost first).
# After that it takes part in no collective, and torch no longer says how many it issued.
_left: tuple[int | None, list[tuple[str, int, str]]] | None = None


class Beater:
    """Writes the rank's heartbeat record (rundir/heartbeat_file.py) every `interval` seconds,
    from its own thread."""

    def __init__(self, path: str, interval: float, main_ident: int) -> None:
        self.step: int | None = None
        self.phases = Phases()
        self._path = path
        self._interval = interval
        self._main_ident = main_ident
        self._fingerprint: int | None = None
        self._since = time.time()
        self._cpu_clock = _thread_cpu_clock(main_ident)
        self._last_cpu: tuple[float, float] | None = None  # (wall, main-thread CPU seconds)
        self._stopped = Flag()
        self._bell = Bell()  # ends a wait early: the group exists, or the rank is exiting
        self._writing = Lock()
        self._last_seq: int | None = None
        self._last_frames: list[tuple[str, int, str]] | None = None
        self.cost = 0.0  # CPU seconds this thread has used

    def start(self) -> None:
        start_thread(self.run)  # a daemon: the interpreter does not wait for it at exit

    def run(self) -> None:
        next_beat = time.monotonic() + self._interval
        sampling = False
        while True:
            self._bell.wait(self._pause(sampling, next_beat))  # rung: the group, or halt()
            if self._halted():
                return
            if not sampling and collective_sequence() is not None:
                sampling = True  # the group exists: the phases are the job's now
            if sampling:  # before, sample() would find no group either
                # never let the heartbeat take the rank down, nor a failed sample stop the records
                with suppress(Exception):
                    self.sample()
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self._interval
                with suppress(Exception):
                    self.beat()
            # What sampling costs this process (a few % of a core at the fastest rate,
            # more on a loaded machine): the launcher takes it off the rank's CPU time,
            # else an idle rank would look like it works.
            self.cost = time.thread_time()

    @staticmethod
    def _pause(sampling: bool, next_beat: float) -> float:
        """Until the next phase sample; before the group exists, until the next beat."""
        if sampling:
            return _jittered(SAMPLE_PERIOD)
        return max(0.0, next_beat - time.monotonic())

    def wake(self) -> None:
        """Look now whether the group exists, not at the next beat."""
        self._bell.ring()

    def halt(self) -> None:
        """No more samples nor records from the thread."""
        self._stopped.set()
        self._bell.ring()

    def _halted(self) -> bool:
        return self._stopped.wait(0)

    def sample(self) -> None:
        """Count the main thread's phase (stragglers), once torch's collectives are set up:
        the job's own time, not imports and rendezvous."""
        if collective_sequence() is not None:
            self.phases.add(_frames(sys._current_frames().get(self._main_ident)))

    def stop(self) -> None:
        """No more samples: called at exit, before torch tears its modules down.

        One last record first, from this (the exiting) thread: how far the rank got is
        exact, not up to an interval old; an isolation rerun is time-boxed against it.
        """
        self.halt()
        with suppress(Exception):
            self.beat(final=True)

    def beat(self, final: bool = False) -> None:
        """Sample once and write the record.

        `final`: from the exiting main thread, whose stack is now the exit path: the
        last sampled place is kept, only the step and collective count are refreshed.
        """
        with self._writing:
            self._beat(final)

    def _beat(self, final: bool) -> None:
        if final and self._last_frames is not None:
            frames = self._last_frames
        else:
            frames = _frames(sys._current_frames().get(self._main_ident))
        self._last_frames = frames
        seq = collective_sequence()
        if seq is None:  # after destroy_process_group: keep how far it got
            seq = self._last_seq
        self._last_seq = seq
        fingerprint = hash((tuple(frames[:FRAMES_COMPARED]), self.step, seq))
        now = time.time()
        busy = self._busy(now)
        spins = _spin_waits()
        if fingerprint != self._fingerprint or (busy and not spins):
            self._fingerprint, self._since = fingerprint, now
        heartbeat_file.write(
            self._path,
            since=self._since,  # when the stack, step or collective count last changed
            now=now,
            frames=frames[:FRAMES_KEPT],  # innermost first: [file, line, function]
            depth=len(frames),
            step=self.step,
            seq=seq,
            busy=busy,
            cost=self.cost,  # CPU seconds the heartbeat thread has used so far
            spins=spins,
            optimizer_steps=optimizer_steps(),  # the step when none is reported (status)
            final=final,  # the rank is exiting: no more records, and no rhythm to judge it by
        )

    def _busy(self, now: float) -> bool:
        """Did the main thread compute since the last sample?"""
        if self._cpu_clock is None:
            return False
        try:
            cpu = time.clock_gettime(self._cpu_clock)
        except OSError:
            return False
        last, self._last_cpu = self._last_cpu, (now, cpu)
        return last is not None and cpu - last[1] >= BUSY * max(now - last[0], 1e-6)


def write_exit(
    how: str,
    code: object,
    frames: list[tuple[str, int, str]],
    threads: list[tuple[str, list[tuple[str, int, str]]]] | None = None,
) -> None:
    """Write the exit record (rundir/exit_file.py) beside the heartbeat record: how, where
    and when it left (`threads`: the non-daemon threads that outlive the script).

    A rank that destroyed its default group earlier left the collectives there: the
    record keeps that place and count (`left_at`), whatever ends the process later.
    """
    directory = os.environ.get(names.HEARTBEAT_DIR)
    if not directory:
        return
    seq = collective_sequence()
    left_at = None
    if _left is not None:
        left_at, frames = _left[0], _left[1]
        seq = seq if seq is not None else _left[0]
    with suppress(Exception):  # without it the diagnosis uses the exit status
        exit_file.write(
            _exit_path(directory),
            how=how,
            code=code,
            frames=frames[:FRAMES_KEPT],  # innermost first
            now=time.time(),
            seq=seq,
            left_at=left_at,
            threads=threads,
        )


def lingering_threads() -> list[tuple[str, list[tuple[str, int, str]]]]:
    """The non-daemon threads alive now, other than the main one: python waits for them
    before the process can exit. (name, frames innermost first); microseconds.

    threading is only looked up: without it imported no such thread can exist.
    """
    threading = sys.modules.get("threading")
    if threading is None:
        return []
    found = []
    with suppress(Exception):
        frames = sys._current_frames()
        main = threading.main_thread()
        for thread in threading.enumerate():
            if thread is main or thread.daemon or not thread.is_alive():
                continue
            stack = _frames(frames.get(thread.ident))[:FRAMES_KEPT]
            found.append((str(thread.name), stack))
    return found


def _exit_path(directory: str) -> str:
    return os.path.join(directory, exit_file.name(os.environ.get("RANK", "0")))


def left_collectives(frame: FrameType | None) -> None:
    """The rank destroys its default group (called just before): note how far it got, and
    where, in its exit record at once: a rank still alive when its peers fail for it
    (it went on with local work) is stopped before it can write one at exit."""
    global _left
    _left = (collective_sequence(), _frames(frame))
    write_exit("destroy_process_group", None, [])


def rejoined() -> None:
    """A new default group after a destroy: the rank takes part again; the record is void."""
    global _left
    directory = os.environ.get(names.HEARTBEAT_DIR)
    if _left is None or not directory:
        return
    _left = None
    exit_file.remove(_exit_path(directory))


def _thread_cpu_clock(ident: int) -> int | None:
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError):
        return None


def _spin_waits() -> bool:
    """True under NCCL: a hung rank spins in a CUDA sync, so its CPU time proves nothing."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist is not None and dist.is_initialized() and "nccl" in str(dist.get_backend())
    except Exception:
        return False


def _frames(frame: FrameType | None) -> list[tuple[str, int, str]]:
    frames: list[tuple[str, int, str]] = []
    while frame is not None and len(frames) < FRAMES_COMPARED:
        code = frame.f_code
        frames.append((code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return frames


def collective_sequence() -> int | None:
    """How many collectives the default group has issued; None before init_process_group.

    torch is only looked up, never imported: a script that does not use it pays nothing.
    torch's own count holds the group's p2p ops too (Gloo, measured): those the call
    ledger wrote are taken out, or the stages of a pipeline, which send and receive in
    different numbers, would look behind one another.
    """
    dist = sys.modules.get("torch.distributed")
    torch = sys.modules.get("torch")
    if dist is None or torch is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        group = dist.group.WORLD
        for device in ("cpu", "cuda"):
            try:
                backend = group._get_backend(torch.device(device))
                count = int(backend._get_sequence_number_for_group())
            except Exception:
                continue
            ledger = sys.modules.get("safelaunch.rank.call_ledger")
            return count - (ledger.p2p_ops_of_default_group() if ledger is not None else 0)
    except Exception:
        return None
    return None


_optimizer_steps: int | None = None  # None until torch.optim is loaded


def _count_step(*_: object) -> None:
    global _optimizer_steps
    _optimizer_steps = (_optimizer_steps or 0) + 1


def count_optimizer_steps(module: ModuleType) -> None:
    """Count torch.optim steps (any optimizer) with torch's own global post-step hook.

    Called as torch.optim.optimizer loads (rank/dist_hooks.py's import hook), in the importing
    thread: registering from the heartbeat thread could change the hook table while an
    optimizer iterates it ("mutated during iteration" in the user's step). The count is
    the step `safelaunch status` shows when the script reports none.
    """
    global _optimizer_steps
    try:
        module.register_optimizer_step_post_hook(_count_step)
    except Exception:  # not torch's hook after all: no inferred step
        return
    _optimizer_steps = 0


def optimizer_steps() -> int | None:
    """torch.optim steps taken so far; None when they are not counted."""
    return _optimizer_steps


def start(rank: str, directory: str, interval: float) -> Beater:
    """Start the sender for this process's main thread."""
    global _active
    beater = Beater(os.path.join(directory, heartbeat_file.name(rank)), interval, get_ident())
    beater.beat()  # a record exists before the user's code starts
    beater.start()
    # A daemon thread calling into torch.distributed during interpreter shutdown could
    # touch a process group being destroyed: stop sampling first.
    atexit.register(beater.stop)
    _active = beater
    return beater


def group_started() -> None:
    """init_process_group returned (rank/dist_hooks.py): the phases are sampled from now on."""
    if _active is not None:
        _active.wake()


def report_step(step: int | None) -> None:
    """Explicit progress from the user's code; ignored when no sender runs."""
    if _active is not None:
        _active.step = step


def _jittered(period: float) -> float:
    """The period, jittered by up to a quarter either way.

    A training loop's step often lasts a multiple of the period: samples taken at a fixed
    pace then land in the same phase of every step (aliasing), and the phase counts
    behind the straggler verdict named data loading for a rank slow in compute.
    The clock's microseconds serve as the random draw: `random` costs every rank
    an import at start.
    """
    draw = time.perf_counter_ns() // 1000 % 1000 / 1000
    return period * (0.75 + 0.5 * draw)
