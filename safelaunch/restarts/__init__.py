"""The restart policy: after a failed attempt, is another one worth its cost?

rule.py decides (a pure function over typed facts of the attempts); facts.py reads those
facts off an attempt's outcome, diagnosis and heartbeat records. docs/restarts.md.
"""
