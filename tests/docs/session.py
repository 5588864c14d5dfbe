"""The Python session the docs test runs a page's ```python blocks in.

Started once per test run (``python tests/docs/session.py FD``); it reads one
JSON request per line on stdin and answers each with one JSON line on file
descriptor FD (stdout and stderr are the examples' and Spark's):

- ``{"op": "page", "cwd": DIR}``: a fresh namespace (``__name__`` is
  ``"__main__"``, as in a script) and DIR as the working directory;
- ``{"op": "run", "code": SOURCE, "where": "docs/sdk.md:14", "spark": BOOL}``:
  the block runs in the page's namespace; with ``spark`` the namespace has
  ``spark``, a local SparkSession made on first use (as the ``pyspark`` shell
  gives one), made as the tests of tests/spark make theirs.

The answer is ``{"ok": true, "output": ...}`` or ``{"ok": false, "output": ...,
"error": TRACEBACK}``; what the block printed is in ``output``.
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import sys
import traceback
from typing import Any

from tests.spark.kit import local_spark

_spark: Any = None


def spark_session() -> Any:
    global _spark
    if _spark is None:
        _spark = local_spark("local[2]", "disquette-docs")
    return _spark


def run(code: str, where: str, namespace: dict[str, Any], spark: bool) -> dict[str, Any]:
    # Registered so a traceback shows the example's own lines.
    linecache.cache[where] = (len(code), None, code.splitlines(True), where)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            if spark:
                namespace["spark"] = spark_session()
            exec(compile(code, where, "exec"), namespace)
    except BaseException:  # the example's failure is the answer, whatever it is
        return {"ok": False, "output": out.getvalue()[-4000:], "error": traceback.format_exc()}
    return {"ok": True, "output": out.getvalue()[-4000:]}


def main() -> None:
    answers = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    namespace: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "page":
            namespace = {"__name__": "__main__"}
            os.chdir(request["cwd"])
            answer: dict[str, Any] = {"ok": True}
        else:
            answer = run(request["code"], request["where"], namespace, request.get("spark", False))
        answers.write(json.dumps(answer) + "\n")
    if _spark is not None:
        _spark.stop()


if __name__ == "__main__":
    main()
