"""`python -m safelaunch`."""

from safelaunch.entry import main

main()
