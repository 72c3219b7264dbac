"""Runs a command on a terminal of its own (a pseudo-terminal), the way a
person at a shell would: waits for PROMPT in what it prints, types ANSWER
and Enter, and reads everything until it exits.

    python3 at_a_terminal.py PROMPT ANSWER -- COMMAND ARG...

Prints JSON: {"code": exit code, "output": what the terminal showed}.
Waits at most 60 s for the prompt and for the exit (the test's bound).
"""
import json
import os
import pty
import select
import subprocess
import sys
import time

sep = sys.argv.index("--")
prompt, answer = sys.argv[1], sys.argv[2]
command = sys.argv[sep + 1:]
master, slave = pty.openpty()
child = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
os.close(slave)
seen = b""
answered = False
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    ready, _, _ = select.select([master], [], [], 0.5)
    if ready:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    if not answered and prompt.encode() in seen:
        os.write(master, answer.encode() + b"\n")
        answered = True
    if child.poll() is not None and not ready:
        break
code = child.wait(timeout=max(1, deadline - time.monotonic()))
print(json.dumps({"code": code, "output": seen.decode(errors="replace")}))
