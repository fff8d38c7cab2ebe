#!/usr/bin/env python3
"""Post safelaunch's verdict to a Slack (or any JSON) webhook: an --on-verdict command.

    export SLACK_WEBHOOK_URL=https://hooks.slack.com/services/...
    safelaunch --on-verdict "python3 configs/slack_verdict.py" --nproc-per-node 8 train.py

or, in a --config file:  on_verdict = "python3 /path/to/slack_verdict.py"

Standard library only (urllib). It posts once, at the job's end (SAFELAUNCH_EVENT=job),
unless SLACK_EVERY_ATTEMPT=1; with SLACK_FAILURES_ONLY=1 a success is not posted. Its
output lands in the attempt's launcher.log; safelaunch kills it after
--on-verdict-timeout (10 s), so the request has a shorter timeout of its own.
"""

import json
import os
import socket
import sys
import urllib.request

ICONS = {"succeeded": ":white_check_mark:", "failed": ":x:", "hung": ":hourglass:"}


def main() -> int:
    env = os.environ
    if env.get("SAFELAUNCH_EVENT") != "job" and env.get("SLACK_EVERY_ATTEMPT") != "1":
        return 0
    status = env.get("SAFELAUNCH_STATUS", "?")
    if status == "succeeded" and env.get("SLACK_FAILURES_ONLY") == "1":
        return 0
    url = env.get("SLACK_WEBHOOK_URL")
    if not url:
        print("SLACK_WEBHOOK_URL is not set: nothing posted", file=sys.stderr)
        return 2
    text = (
        f"{ICONS.get(status, ':warning:')} {socket.gethostname()} node "
        f"{env.get('SAFELAUNCH_NODE_RANK', '0')}, run {env.get('SAFELAUNCH_RUN_ID', '?')} "
        f"(attempt {env.get('SAFELAUNCH_ATTEMPT', '0')}): {env.get('SAFELAUNCH_VERDICT', '')}\n"
        f"exit code {env.get('SAFELAUNCH_EXIT_CODE', '?')}; report: "
        f"{env.get('SAFELAUNCH_REPORT') or 'none'}"
    )
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        print(f"posted: HTTP {response.status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
