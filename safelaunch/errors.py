"""The exception types through which errors reach the user, one per stage."""

from __future__ import annotations

from safelaunch import exitcodes


class SafelaunchError(Exception):
    """An error the user can fix; the CLI renders it as one line and exits."""

    exit_code = exitcodes.INTERNAL

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def render(self) -> str:
        """One line: what is wrong, then how to fix it. Control characters from user input
        (a line break, an escape sequence for the terminal) are shown escaped (\\n, \\x1b)."""
        text = f"{self.message}; {self.fix}" if self.fix else self.message
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ConfigError(SafelaunchError):
    """A flag or value that cannot be launched as given."""

    exit_code = exitcodes.USAGE


class PreflightError(SafelaunchError):
    """The environment cannot run the job; found before any rank started."""

    exit_code = exitcodes.PREFLIGHT


class RendezvousError(SafelaunchError):
    """Multi-node: the nodes could not come together, or disagree on what they run."""

    exit_code = exitcodes.NODE_LOST

    def __init__(self, message: str, fix: str | None = None, *, preflight: bool = False) -> None:
        super().__init__(message, fix)
        if preflight:  # found by comparing the nodes' facts: an environment problem
            self.exit_code = exitcodes.PREFLIGHT


class StatusError(SafelaunchError):
    """`safelaunch status`: no run, or no readable live state, where it was pointed."""

    exit_code = exitcodes.USAGE
