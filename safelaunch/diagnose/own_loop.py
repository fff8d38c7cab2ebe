"""Does a rank's call keep to its own loop? Its ledger before the call predicts the call.

A training loop repeats itself: what a rank called before, in the same context, is what
it calls now. The prediction is the longest context (the calls just before this one,
every kind and group: collectives, sends, receives, with their group, peer, tag,
dtype[shape] and file:line) that occurred earlier in the rank's ledger, and what followed
it there. Only where that is one call, the prediction stands:

- the calls that followed the longest earlier context differ: the loop branches there
  (data-dependent work, a step that logs): no prediction;
- the ledger ends in a run of one repeated call (an all_reduce per parameter, one per
  microbatch, one per step) and no earlier context longer than the run says what came
  after such a run: whether the run goes on or ends is not known (the last broadcast of
  the parameters at start looks like every other one): going on keeps to the loop,
  leaving the run is no departure;
- no context occurred before (the first step, a rank's first move somewhere): none.

A rank keeps to its loop where it does what followed the longest context; it departs
only where it does otherwise and the time before (the next longest context) was followed
by the same call: once is not a loop (a warm-up step, a branch taken the first time).

A departure is then what the rank did that its own loop does not (a call skipped, one
more, another size), whatever the other ranks did; keeping to it is the counterpart that
lets the comparison of two ranks, or a wait-for graph, name the other one. The rank's
whole ledger counts, not only one group's collectives: a pipeline stage's sends and
receives say where in its loop a collective falls. Pure: ledgers in, answers out.
"""

from __future__ import annotations

from collections.abc import Sequence

from safelaunch.diagnose.unseen_calls import is_unseen
from safelaunch.rundir.calls_file import Call, CallLedger

Token = tuple[str, ...]
START: Token = ("start",)
HISTORY = 2000  # calls looked back at: a loop's period is far shorter
CONTEXT = 64  # calls of context that make a match long enough to stand


def token(call: Call) -> Token:
    """One call as the loop repeats it: everything but its numbers."""
    peer = "" if call.peer is None else str(call.peer)
    return (call.kind, call.group, call.op, call.what, peer, str(call.tag), call.where)


def history(ledger: CallLedger, before: Call | None = None) -> list[Token]:
    """The rank's calls before `before` (all of them: None), the start first where the
    ledger has its first call."""
    calls = [c for c in ledger.calls if before is None or c.n < before.n]
    start = [START] if not ledger.truncated else []
    return start + [token(c) for c in calls[-HISTORY:]]


def predict(seen: Sequence[Token]) -> Token | None:
    """The call the loop makes after `seen`, or None where it cannot say (docstring)."""
    found = _prediction(seen)
    return None if found is None else found[0]


def _prediction(seen: Sequence[Token]) -> tuple[Token, bool] | None:
    """The call that followed the longest earlier context, and whether the next longest
    one (another time the loop was there) was followed by the same call (`confirmed`)."""
    n = len(seen)
    if n < 2:
        return None
    run = 1
    while run < n and seen[n - 1 - run] == seen[-1]:
        run += 1
    matches = []  # (context length, end): an earlier occurrence ending at `end`
    for end in range(n - 1):
        length = 0
        while length < CONTEXT and length <= end and seen[end - length] == seen[-1 - length]:
            length += 1
        if length:
            matches.append((length, end))
    if not matches:
        return None
    matches.sort(reverse=True)  # the longest first, the latest among equals
    best, end = matches[0]
    tied = [seen[e + 1] for length, e in matches if length == best]
    if len(set(tied)) > 1:  # the loop went on differently from the same context
        return None
    followed = seen[end + 1]
    if run >= 2 and best <= run and best < CONTEXT:
        # where such a run ends was never seen: going on with it keeps to the loop (one
        # all_reduce a step), but leaving it is no departure (the last parameter's)
        return followed, False
    confirmed = len(matches) > 1 and seen[matches[1][1] + 1] == followed
    return followed, confirmed


def keeps(ledger: CallLedger, call: Call) -> bool | None:
    """Whether `call` is what the rank's loop makes there; None where it cannot say.

    Keeping is doing what the loop did the last time it was there (for a collective from
    C++, which all look alike, the time before must agree too). Departing needs the
    time before to agree: a loop's first steps differ from the rest (DDP rebuilds its
    buckets in the second; a pipeline warms up), and a call made for the first time is
    what a loop that logs every other step looks like (an extra call and the other
    rank's skipped one look alike there).
    """
    found = _prediction(history(ledger, call))
    if found is None:
        return None
    predicted, confirmed = found
    mine = token(call)
    if mine == predicted:  # a collective from C++ says little unless the loop is known
        return True if confirmed or not is_unseen(call) else None
    return False if confirmed else None


def expected(ledger: CallLedger, call: Call | None = None) -> Token | None:
    """The call the rank's loop makes next after its calls before `call` (None: after
    all of them): where a rank that made no further call should have been."""
    return predict(history(ledger, call))
