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
  communication; a blocked read or a sleep in the data path and an early exit of one
  rank's loop (one rank's data ran out) are data/sampling; an exception is the class of the
  layer it is raised from (model forward, loss, optimizer step and the model's helper:
  model/gradient; a Dataset's __getitem__, in a worker or not, and the data's helper:
  data/sampling); a SIGKILL is resources (what the OOM killer sends); a SIGSEGV, a SIGABRT
  and a lingering thread are unknown (no class fits them, as the zoo's native crashes);
- moment: the injected line calls _moment(), which appends time.time() to the file named by
  FAULTGEN_MOMENT (a lingering thread: when the script returns, as the rank should exit).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

import fault_templates as templates

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
ERRORS = (
    "ValueError", "RuntimeError", "KeyError", "IndexError", "TypeError", "AssertionError",
    "LookupError", "NotImplementedError", "ArithmeticError",
)  # fmt: skip
WORDS = ("alpha", "shard", "vortex", "quill", "ember", "lattice", "nimbus", "orbit", "pivot")
SIGNALS = {"SIGKILL": RES, "SIGSEGV": UNKNOWN, "SIGABRT": UNKNOWN}
EXITS = ("sys.exit(0)", "return", "sys.exit(3)")
LAYER_CLASS = {
    "forward": MODEL, "loss": MODEL, "optim": MODEL, "helper-model": MODEL,
    "getitem": DATA, "helper-data": DATA, "data": DATA, "loop": None,
}  # fmt: skip
DATA_LAYERS = ("data", "getitem", "helper-data")
GROUP_TIMEOUT = 120  # seconds: longer than any hang detector the bench sets
SHORT_TIMEOUT = 5  # group_timeout's init_process_group timeout; the pause is PAUSE
PAUSE = 60
SCRIPT, HELPER = "train.py", "helpers.py"
_ANNOTATION = re.compile(r"\s*#@(\w+)(.*)$")
_CALL = re.compile(r"dist\.(all_reduce|send)\((?P<tensor>[^,)]+(?:\([^)]*\))?)")


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

    @property
    def case_id(self) -> str:
        return f"{self.kind}:{self.seed}"


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
    if kind in ("extra_collective", "size_mismatch", "dtype_mismatch"):
        return [s for s in slots if s.tag == "coll"]
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
    raise ValueError(f"unknown kind {kind!r}")


def templates_for(kind: str) -> list[str]:
    """The templates a fault of `kind` can be injected into."""
    names = []
    for name in templates.LOOPS:
        text = {SCRIPT: templates.script(name, 0, 3, GROUP_TIMEOUT), HELPER: templates.HELPERS}
        if _candidates(kind, _slots({k: v.splitlines() for k, v in text.items()})):
            names.append(name)
    return names


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _words(rng: random.Random) -> str:
    return " ".join(f"{rng.choice(WORDS)}{rng.randrange(100)}" for _ in range(3))


def generate(kind: str, seed: int) -> Generated:
    """The case `kind:seed`: a script with one fault, and what a correct report says."""
    rng = random.Random(f"{kind}:{seed}")
    template = rng.choice(templates_for(kind))
    world = rng.choice(templates.WORLDS[template])
    steps = rng.randrange(3, 6)
    timeout = SHORT_TIMEOUT if kind == "group_timeout" else GROUP_TIMEOUT
    files = {
        SCRIPT: templates.script(template, seed, steps, timeout).splitlines(),
        HELPER: templates.HELPERS.splitlines(),
    }
    slot = rng.choice(_candidates(kind, _slots(files)))
    ranks = range(world)
    if slot.tag == "p2p":  # a send inside `if RANK == 0:` or its else
        ranks = range(1) if slot.args[0] == "first" else range(1, world)
    rank = rng.choice(ranks)
    step = rng.randrange(steps)
    lines = files[slot.file]
    original = _ANNOTATION.sub("", lines[slot.index])
    pad = _indent(lines[slot.index])
    helper = slot.file == HELPER
    when = " ".join(slot.args[1:]) if slot.tag == "slot" else "step"
    who = "rank" if helper else "RANK"
    guard = f"{who} == {rank} and {when} == {step} and _moment()"
    culprits: tuple[int, ...] = (rank,)
    group = templates.GROUPS[slot.args[0] if slot.tag == "coll" else "world"](rank, world)
    klass = COMM
    replace, insert = original, ""  # the slot's line, and a fault line put before it
    if kind == "skip_collective":
        replace = f"{pad}if not ({guard}): {original.strip()}"
    elif kind == "extra_collective":
        insert = f"{pad}if {guard}: {original.strip()}"
    elif kind in ("size_mismatch", "dtype_mismatch"):
        call = _CALL.search(original)
        assert call is not None, original
        tensor = call["tensor"]
        changed = f"{tensor}.flatten()[1:]" if kind == "size_mismatch" else f"{tensor}.double()"
        start, end = call.span("tensor")
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
    elif kind == "early_exit":
        insert, klass = f"{pad}if {guard}: {rng.choice(EXITS)}", DATA
    elif kind == "group_timeout":
        insert = f"{pad}if {guard}: time.sleep({PAUSE})"
    elif kind == "lingering_thread":
        name = rng.choice(("metrics-uploader", "prefetcher", "watchdog", "checkpoint-writer"))
        insert = f'{pad}if {guard}: threading.Thread(target=_linger, name="{name}").start()'
        klass = UNKNOWN
    elif kind == "p2p_cycle":
        insert = f"{pad}if step == {step} and _moment(): dist.recv(got, prv)"
        culprits, replace = tuple(range(world)), ""
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
        kept = [line for line in file_lines if line.strip() not in ("#@cycle", "#@end", "")
                or not line.strip().startswith("#@")]  # fmt: skip
        for number, line in enumerate(kept, 1):
            if marker in line:
                location = f"{name}:{number}"
            if "#@fault" in line:
                detail = _ANNOTATION.sub("", line).strip()
        texts[name] = "\n".join(_ANNOTATION.sub("", line) for line in kept) + "\n"
    truth = Truth(
        kind=kind, seed=seed, template=template, world=world, culprits=culprits,
        location=location, klass=klass, step=step, group=group, detail=detail,
        group_timeout=timeout,
    )  # fmt: skip
    return Generated(texts, truth)


def sample(count: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, int]]:
    """`count` cases (kind, seed), the kinds in turn, seeds drawn from `seed`."""
    rng = random.Random(seed)
    return [(kinds[i % len(kinds)], rng.randrange(1 << 20)) for i in range(count)]
