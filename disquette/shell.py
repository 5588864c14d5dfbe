"""Shell jobs: ``disquette worker --exec "CMD" --queue q`` runs a command per job.

The command runs under ``/bin/sh -c`` with the job's body on its standard
input and ``DISQUETTE_JOB_ID``, ``DISQUETTE_QUEUE`` and
``DISQUETTE_ATTEMPT`` in its environment; its output goes where the
worker's goes.  Exit status 0 acks the job; any other fails it (NACK, then
the dead letters, as any handler's failure), the error naming the status
and the end of what the command wrote on its standard error.  A handler
that is cancelled (a lost lease, a forced stop) kills its command.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

STDERR_KEPT = 2000   # characters of a failed command's stderr in its error


class CommandFailed(Exception):
    """The command exited with ``status`` (a signal's number negated)."""

    def __init__(self, command: str, status: int, stderr: str) -> None:
        super().__init__(f"{command!r} exited with status {status}"
                         + (f": {stderr.strip()}" if stderr.strip() else ""))
        self.command, self.status, self.stderr = command, status, stderr


class ShellHandler:
    """The Worker's handler running ``command`` for each job."""

    def __init__(self, command: str) -> None:
        self.command = command

    async def __call__(self, job: Any) -> None:
        env = {**os.environ, "DISQUETTE_JOB_ID": job.id, "DISQUETTE_QUEUE": job.queue,
               "DISQUETTE_ATTEMPT": str(job.attempts)}
        proc = await asyncio.create_subprocess_shell(
            self.command, stdin=asyncio.subprocess.PIPE, stdout=sys.stdout.fileno(),
            stderr=asyncio.subprocess.PIPE, env=env)
        try:
            _, err = await proc.communicate(job.raw)
        except BaseException:  # cancelled: the command must not outlive its job
            if proc.returncode is None:
                proc.kill()
                await asyncio.shield(proc.wait())
            raise
        if proc.returncode:
            text = err.decode("utf-8", "replace")[-STDERR_KEPT:]
            sys.stderr.write(text)
            raise CommandFailed(self.command, proc.returncode, text)

    def __repr__(self) -> str:
        return f"<ShellHandler {self.command!r}>"
