"""`python -m safelaunch`."""

from safelaunch.cli import main

main()
