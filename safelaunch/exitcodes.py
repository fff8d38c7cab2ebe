"""The one table of safelaunch's own exit codes (see docs/exit-codes.md).

A worker failure makes safelaunch exit with the root-cause rank's own code
(128 + N when it died of signal N); the values below are what safelaunch
itself decides. Every subcommand's code is one of these names.
"""

import signal

SUCCESS = 0
SYNTAX = 1  # the entry script does not compile: nothing started; python itself exits 1
LINT_FINDINGS = 1  # `safelaunch lint`: an error or warning found (hints alone: 0), as linters do
USAGE = 2  # bad flag or value: nothing was started (argparse, and torchrun with it, use 2)
NODE_LOST = 69  # multi-node: a node never joined, or vanished during the job (EX_UNAVAILABLE)
INTERNAL = 70  # a bug in safelaunch (sysexits EX_SOFTWARE); please report it
REQUEUE = 75  # restart policy auto: a transient failure used every restart (EX_TEMPFAIL)
PREFLIGHT = 78  # an environment check failed before any rank started (EX_CONFIG)
NO_REQUEUE = 93  # restart policy auto: the failure repeats; restarts ended (ft_launcher's 93)
HANG = 124  # a hang was detected and the job torn down (timeout(1)'s convention)
SIGNAL_BASE = 128  # interrupted by signal N, or a rank killed by signal N: 128 + N


def for_signal(signum: int) -> int:
    """Exit code a shell reports for death by `signum`."""
    return SIGNAL_BASE + signum


def signal_name(signum: int) -> str:
    """SIGTERM, SIGSEGV, ... or `signal N` for numbers without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


INTERRUPTED = for_signal(signal.SIGINT)  # Ctrl-C: 130
