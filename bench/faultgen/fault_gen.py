"""A fault generator: one fault of a chosen kind injected into a real training script.

    generate(kind, seed) -> Generated   (the script, its helper module and the truth)

Every random choice (template, world size, steps, culprit rank, step, group, slot,
exception type, words) is drawn from random.Random(f"{kind}:{seed}"), so a kind and a seed
are the whole case: the same pair writes the same files. The fault is one line, written
into a slot of the template (fault_templates.py) and guarded by `RANK == r and step == k`,
so the ground truth is known by construction:

- culprits: the global rank(s) whose code the fault changed (every stage of the ring for a
  p2p cycle, where every stage receives first);
- location: file:line of the injected line (a lingering thread: the line its body waits at,
  which is where the thread is when the script has returned);
- class: what the fault is, in vocab's FailureClass words: a collective or p2p call that
  differs, a p2p cycle and a stop-the-world pause past the group's timeout are
  communication; a blocked read or a sleep in the data path and a clean early end of one
  rank's loop (sys.exit(0), return: one rank's data ran out) are data/sampling; an early
  exit with a code of its own (sys.exit(3)) is unknown: the program ended itself as
  failed and nothing says why (before 2026-12-07 it was data/sampling too, which named
  no reason the case has); an exception is the class of the
  layer it is raised from (model forward, loss, optimizer step and the model's helper:
  model/gradient; a Dataset's __getitem__, in a worker or not, and the data's helper:
  data/sampling); a SIGKILL is resources (what the OOM killer sends); a SIGSEGV, a SIGABRT
  and a lingering thread are unknown (no class fits them, as the zoo's native crashes);
- moment: the injected line calls _moment(), which appends time.time() to the file named by
  FAULTGEN_MOMENT (a lingering thread: when the script returns, as the rank should exit).

Two suites of templates: "classic" (fault_templates.py: ddp, loader, subgroups, pipeline;
the cases KIND:SEED of before 2026-12-07, unchanged) and "wide" (fault_templates_wide.py:
ZeRO-like shards, an async line pipeline, a 2D grid of 6-8 ranks, collectives from a
class in a helper module, DDP with no_sync; case ids SUITE:KIND:SEED). The kinds added
with it, and their classes:
- backward_exception: raised inside an autograd Function's backward or a gradient hook:
  model/gradient, as an exception in the forward;
- hard_exit: os._exit(k) in one rank's loop: the early exit's story without the
  interpreter's teardown (no atexit, no traceback): data/sampling with k = 0, unknown
  with a code of its own, as for sys.exit;
- lock_wait, busy_loop: a rank that never returns from a lock (an Event nobody sets) or
  computes forever (Python bytecode, or one C call that holds the GIL) before its next
  collective: data/sampling in the data path (as a blocked read), unknown in the loop
  itself (no class fits a program's own deadlock or endless loop). A busy rank is
  progress to the hang detector (a long computation looks the same), so its case sets
  the short group timeout: the others' timeout ends the job, as NCCL's would (not in the
  grid, whose subgroups keep torch's 30-minute default: nothing ends such a job within
  the bench's budget, and the case is a miss whatever the launcher);
- worker_killed: SIGKILL of one rank's DataLoader worker inside __getitem__: resources
  (what the OOM killer sends); the line is the worker's, which no rank's traceback shows.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import fault_templates as templates
import fault_templates_wide as wide

COMM, DATA, MODEL, RES, UNKNOWN = (
    "communication",
    "data/sampling",
    "model/gradient",
    "resources",
    "unknown",
)
KINDS = (
    "skip_collective",
    "extra_collective",
    "size_mismatch",
    "dtype_mismatch",
    "sleep_before_collective",
    "blocked_read",
    "exception",
    "signal",
    "early_exit",
    "lingering_thread",
    "p2p_cycle",
    "group_timeout",
)
# kinds added with the wide suite (2026-12-07): sample()'s default stays KINDS, so the
# classic suite's cases for a seed are the ones they were
NEW_KINDS = (
    "backward_exception",
    "hard_exit",
    "lock_wait",
    "busy_loop",
    "worker_killed",
)
ALL_KINDS = KINDS + NEW_KINDS
SUITES = {"classic": tuple(templates.LOOPS), "wide": tuple(wide.LOOPS)}
ERRORS = (
    "ValueError", "RuntimeError", "KeyError", "IndexError", "TypeError", "AssertionError",
    "LookupError", "NotImplementedError", "ArithmeticError",
)  # fmt: skip
WORDS = ("alpha", "shard", "vortex", "quill", "ember", "lattice", "nimbus", "orbit", "pivot")
SIGNALS = {"SIGKILL": RES, "SIGSEGV": UNKNOWN, "SIGABRT": UNKNOWN}
EXITS = ("sys.exit(0)", "return", "sys.exit(3)")
HARD_EXITS = ("os._exit(0)", "os._exit(1)", "os._exit(7)")
CLEAN_EXITS = ("sys.exit(0)", "return", "os._exit(0)")  # its loop ended: data/sampling
LOCKS = (  # one line that never returns: a lock held by nobody who will release it
    "lock = threading.Lock(); lock.acquire(); lock.acquire()",
    "held = threading.Event(); held.wait()",
)
BUSY = (  # one line that computes forever: Python bytecode, or one C call holding the GIL
    "exec('while True: pass')",
    "sum(iter(int, 1))",
)
LAYER_CLASS = {
    "forward": MODEL, "loss": MODEL, "optim": MODEL, "helper-model": MODEL,
    "getitem": DATA, "helper-data": DATA, "data": DATA, "loop": None, "backward": MODEL,
}  # fmt: skip
DATA_LAYERS = ("data", "getitem", "helper-data")
GROUP_TIMEOUT = 120  # seconds: longer than any hang detector the bench sets
SHORT_TIMEOUT = 5  # group_timeout's init_process_group timeout; the pause is PAUSE
PAUSE = 60
SCRIPT, HELPER = "train.py", "helpers.py"
PEERS = {  # who runs a #@p2p send, by its annotation
    "first": lambda world: range(1),
    "rest": lambda world: range(1, world),
    "notfirst": lambda world: range(1, world),
    "notlast": lambda world: range(world - 1),
}
GROUPS = {**templates.GROUPS, **wide.GROUPS}
_ANNOTATION = re.compile(r"\s*#@(\w+)(.*)$")
_CALL = re.compile(r"dist\.\w+\(")


@dataclass(frozen=True, slots=True, kw_only=True)
class Truth:
    """What a correct report of the case says, known by construction."""

    kind: str
    seed: int
    template: str
    world: int
    culprits: tuple[int, ...]  # global ranks
    location: str  # file name:line of the injected fault
    klass: str
    step: int
    group: tuple[int, ...]  # the ranks of the group the fault is in
    detail: str  # what was injected (the statement, for a person replaying it)
    group_timeout: int  # seconds, init_process_group's timeout
    suite: str = "classic"  # SUITES' key: the templates it was drawn from

    @property
    def case_id(self) -> str:
        """KIND:SEED (classic), SUITE:KIND:SEED (another suite): what --replay takes."""
        plain = f"{self.kind}:{self.seed}"
        return plain if self.suite == "classic" else f"{self.suite}:{plain}"


@dataclass(frozen=True, slots=True)
class Generated:
    """The files of one case (name -> text) and its truth."""

    files: dict[str, str]
    truth: Truth

    def write(self, where: Path) -> Path:
        """Write the files under `where`; the training script's path."""
        where.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            (where / name).write_text(text)
        return where / SCRIPT


@dataclass(frozen=True, slots=True)
class _Slot:
    file: str
    index: int  # line index in that file
    tag: str  # slot, coll, p2p, cycle
    args: tuple[str, ...]


def _slots(files: dict[str, list[str]]) -> list[_Slot]:
    found = []
    for name, lines in files.items():
        for index, line in enumerate(lines):
            match = _ANNOTATION.search(line)
            if match and match[1] not in ("linger", "end"):
                found.append(_Slot(name, index, match[1], tuple(match[2].split())))
    return found


def _candidates(kind: str, slots: list[_Slot]) -> list[_Slot]:
    """The slots a fault of `kind` may go into."""
    if kind in ("skip_collective",):
        return [s for s in slots if s.tag in ("coll", "p2p")]
    if kind == "extra_collective":
        return [s for s in slots if s.tag == "coll"]
    if kind in ("size_mismatch", "dtype_mismatch"):  # not a call without a tensor
        return [s for s in slots if s.tag == "coll" and s.args[1:2] != ("-",)]
    if kind in ("sleep_before_collective", "blocked_read"):
        return [s for s in slots if s.tag == "slot" and s.args[0] in DATA_LAYERS]
    if kind == "exception":
        return [s for s in slots if s.tag == "slot" and s.args[0] != "loop"]
    if kind == "signal":
        return [s for s in slots if s.tag == "slot" and s.args[0] in ("loop", "forward")]
    if kind in ("early_exit", "lingering_thread", "group_timeout"):
        return [s for s in slots if s.tag == "slot" and s.args[0] == "loop"]
    if kind == "p2p_cycle":
        return [s for s in slots if s.tag == "cycle"]
    if kind == "backward_exception":
        return [s for s in slots if s.tag == "slot" and s.args[0] == "backward"]
    if kind == "hard_exit":
        return [s for s in slots if s.tag == "slot" and s.args[0] == "loop"]
    if kind in ("lock_wait", "busy_loop"):
        return [s for s in slots if s.tag == "slot" and s.args[0] in (*DATA_LAYERS, "loop")]
    if kind == "worker_killed":
        return [s for s in slots if s.tag == "slot" and s.args[0] == "getitem"]
    raise ValueError(f"unknown kind {kind!r}")


@cache  # pure: the templates' text is fixed
def templates_for(kind: str, suite: str = "classic") -> tuple[str, ...]:
    """The templates of `suite` a fault of `kind` can be injected into (a DataLoader
    worker is killed only where the loop has one)."""
    names = []
    for name in SUITES[suite]:
        text = _files(name, 0, 3, GROUP_TIMEOUT)
        if kind == "worker_killed" and not _workers(name):
            continue
        if _candidates(kind, _slots(text)):
            names.append(name)
    return tuple(names)


def _workers(template: str) -> int:
    counts = {**templates.WORKER_COUNTS, **wide.WORKER_COUNTS}
    return counts[template]


def _files(template: str, seed: int, steps: int, timeout: int) -> dict[str, list[str]]:
    """The template's files, slots annotated: the script, helpers.py, any module of its own."""
    modules = wide.MODULES.get(template, {})
    return {
        SCRIPT: templates.script(template, seed, steps, timeout).splitlines(),
        HELPER: templates.HELPERS.splitlines(),
        **{name: text.splitlines() for name, text in modules.items()},
    }


def _argument(line: str, index: int) -> tuple[int, int]:
    """The span of the `index`-th argument of the line's first dist.<op>(...) call."""
    call = _CALL.search(line)
    assert call is not None, line
    depth, start, found = 0, call.end(), 0
    for at in range(call.end(), len(line)):
        char = line[at]
        if char in "([{":
            depth += 1
        elif char in ")]}" and depth:
            depth -= 1
        elif depth == 0 and char in ",)":
            if found == index:
                return start + len(line[start:at]) - len(line[start:at].lstrip()), at
            found, start = found + 1, at + 1
    raise AssertionError(line)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _words(rng: random.Random) -> str:
    return " ".join(f"{rng.choice(WORDS)}{rng.randrange(100)}" for _ in range(3))


def generate(kind: str, seed: int, suite: str = "classic") -> Generated:
    """The case `kind:seed` of `suite`: a script with one fault, and what a correct report
    says. The classic suite's cases are those written before the wide suite existed."""
    rng = random.Random(f"{kind}:{seed}" if suite == "classic" else f"{suite}:{kind}:{seed}")
    template = rng.choice(templates_for(kind, suite))
    world = rng.choice({**templates.WORLDS, **wide.WORLDS}[template])
    steps = rng.randrange(3, 6)
    # a busy rank is progress to the hang detector (it may be a long computation): the
    # others' group timeout is what ends such a job, as NCCL's 10 minutes would
    timeout = SHORT_TIMEOUT if kind in ("group_timeout", "busy_loop") else GROUP_TIMEOUT
    files = _files(template, seed, steps, timeout)
    slot = rng.choice(_candidates(kind, _slots(files)))
    ranks = range(world)
    if slot.tag == "p2p":  # a send only some ranks run (inside `if RANK == 0:`, ...)
        ranks = PEERS[slot.args[0]](world)
    rank = rng.choice(ranks)
    step = rng.randrange(steps)
    lines = files[slot.file]
    original = _ANNOTATION.sub("", lines[slot.index])
    pad = _indent(lines[slot.index])
    helper = slot.file != SCRIPT
    when = " ".join(slot.args[1:]) if slot.tag == "slot" else "step"
    who = "rank" if helper else "RANK"
    guard = f"{who} == {rank} and {when} == {step} and _moment()"
    culprits: tuple[int, ...] = (rank,)
    group = GROUPS[slot.args[0] if slot.tag == "coll" else "world"](rank, world)
    klass = COMM
    replace, insert = original, ""  # the slot's line, and a fault line put before it
    if kind == "skip_collective":
        replace = f"{pad}if not ({guard}): {original.strip()}"
    elif kind == "extra_collective":
        insert = f"{pad}if {guard}: {original.strip()}"
    elif kind in ("size_mismatch", "dtype_mismatch"):
        start, end = _argument(original, int(slot.args[1]) if len(slot.args) > 1 else 0)
        tensor = original[start:end]
        changed = f"{tensor}.flatten()[1:]" if kind == "size_mismatch" else f"{tensor}.double()"
        replace = f"{original[:start]}({changed} if {guard} else {tensor}){original[end:]}"
    elif kind in ("sleep_before_collective", "blocked_read"):
        block = (
            "time.sleep(3600)" if kind == "sleep_before_collective" else "os.read(os.pipe()[0], 1)"
        )
        insert, klass = f"{pad}if {guard}: {block}", DATA
    elif kind == "exception":
        error = rng.choice(ERRORS)
        insert = f'{pad}if {guard}: raise {error}("{_words(rng)}")'
        klass = LAYER_CLASS[slot.args[0]] or MODEL
    elif kind == "signal":
        name = rng.choice(sorted(SIGNALS))
        insert, klass = f"{pad}if {guard}: os.kill(os.getpid(), signal.{name})", SIGNALS[name]
    elif kind in ("early_exit", "hard_exit"):
        how = rng.choice(EXITS if kind == "early_exit" else HARD_EXITS)
        insert, klass = f"{pad}if {guard}: {how}", DATA if how in CLEAN_EXITS else UNKNOWN
    elif kind == "group_timeout":
        insert = f"{pad}if {guard}: time.sleep({PAUSE})"
    elif kind == "lingering_thread":
        name = rng.choice(("metrics-uploader", "prefetcher", "watchdog", "checkpoint-writer"))
        insert = f'{pad}if {guard}: threading.Thread(target=_linger, name="{name}").start()'
        klass = UNKNOWN
    elif kind == "p2p_cycle":
        first = " ".join(slot.args) or "dist.recv(got, prv)"  # what each stage receives
        insert = f"{pad}if step == {step} and _moment(): {first}"
        culprits, replace = tuple(range(world)), ""
    elif kind == "backward_exception":
        error = rng.choice(ERRORS)
        insert, klass = f'{pad}if {guard}: raise {error}("{_words(rng)}")', MODEL
    elif kind in ("lock_wait", "busy_loop"):
        block = rng.choice(LOCKS if kind == "lock_wait" else BUSY)
        insert = f"{pad}if {guard}: {block}"
        klass = DATA if slot.args[0] in DATA_LAYERS else UNKNOWN
    elif kind == "worker_killed":
        insert, klass = f"{pad}if {guard}: os.kill(os.getpid(), signal.SIGKILL)", RES
    lines[slot.index] = replace
    if insert:
        lines.insert(slot.index, insert + "  #@fault")
    else:
        lines[slot.index] = replace + "  #@fault"
    script_lines = files[SCRIPT]
    for index, line in enumerate(script_lines):
        if line.strip() == "#@linger":
            body = ["def _linger():", "    while True:", "        time.sleep(0.2)  #@thread", ""]
            script_lines[index : index + 1] = body if kind == "lingering_thread" else []
            break
    if kind == "lingering_thread":
        script_lines[-1] = f"if RANK == {rank}: _moment()"
    marker = "#@thread" if kind == "lingering_thread" else "#@fault"
    location, detail = "", ""
    texts = {}
    for name, file_lines in files.items():
        kept = [line for line in file_lines if not line.strip().startswith("#@")]
        for number, line in enumerate(kept, 1):
            if marker in line:
                location = f"{name}:{number}"
            if "#@fault" in line:
                detail = _ANNOTATION.sub("", line).strip()
        texts[name] = "\n".join(_ANNOTATION.sub("", line) for line in kept) + "\n"
    truth = Truth(
        kind=kind, seed=seed, template=template, world=world, culprits=culprits,
        location=location, klass=klass, step=step, group=group, detail=detail,
        group_timeout=timeout, suite=suite,
    )  # fmt: skip
    return Generated(texts, truth)


def sample(count: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, int]]:
    """`count` cases (kind, seed), the kinds in turn, seeds drawn from `seed`."""
    rng = random.Random(seed)
    return [(kinds[i % len(kinds)], rng.randrange(1 << 20)) for i in range(count)]


def case_of(case_id: str) -> tuple[str, str, int]:
    """(suite, kind, seed) of a Truth.case_id: KIND:SEED or SUITE:KIND:SEED."""
    parts = case_id.split(":")
    suite = parts[0] if len(parts) == 3 else "classic"
    return suite, parts[-2], int(parts[-1])
