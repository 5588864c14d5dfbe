"""Every example of README.md and docs/*.md, run as written against real nodes.

What runs depends on the fence's kind (its info string):

- ```console: each ``$ `` line runs in bash under a pseudo-terminal (redis-cli
  and curl print what a person sees); the lines below a command are its output,
  compared line by line. A job id in the shown output matches any job id, and
  stands for that id in the page's later commands; a line ``...`` matches any
  lines. A command shown without output must not print an error reply.
- ```sh: the block runs in ``bash -e`` under a pseudo-terminal; it must exit 0
  and print no error reply.
- ```python: runs in the page's Python session (tests/docs/session.py): the
  page's blocks in order, in one namespace, as a reader running them one after
  the other would; ```python spark blocks get ``spark``, a local SparkSession.
- Any other kind (text, yaml...) is not run, by design: config files and
  commands that need what a test cannot have here (a Docker engine, a
  Kubernetes cluster, systemd, certificates, a server on a network), servers
  that run until Ctrl-C (`make run`, `disquette worker`), and benchmarks that
  run for minutes. A fence without a kind fails the test: say what it is.

The cluster is the one `make run` starts: 3 nodes joined through
``cluster-seeds``, each with its HTTP port at port + 1000. It runs on
7711-7713, the ports the examples show, when those (and their bus and HTTP
ports) are free; otherwise on free ports, with 7711-7713, 8711-8713 and
17711-17713 replaced consistently in every example (and ``DISQUETTE_NODES``
set, since the `disquette` command's default node is 127.0.0.1:7711). The
nodes are emptied (DEBUG FLUSHALL) before each page.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

import pytest

from disquette.testing import can_bind
from tests.harness import REPO_ROOT, NodeFactory, RawConn, free_port, join

pytestmark = pytest.mark.xdist_group("docs")

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUN_KINDS = {"console", "sh", "python"}
WRITTEN_PORTS = (7711, 7712, 7713)
HTTP_OFFSET, BUS_OFFSET = 1000, 10000
JOB_ID = r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}"
ERROR_REPLY = "(error)"
SHELL_TIMEOUT = 30.0
PYTHON_TIMEOUT = 60.0
SPARK_TIMEOUT = 180.0


# ---------------------------------------------------------------------------
# reading the pages
# ---------------------------------------------------------------------------

@dataclass
class Block:
    page: str          # path relative to the repository
    line: int          # line of the opening fence
    kind: str          # the info string's first word
    tags: list[str]    # the info string's other words (e.g. "spark")
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")


def blocks_of(path: Path) -> list[Block]:
    page = str(path.relative_to(REPO_ROOT))
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, info = len(m.group(1)), m.group(2), m.group(3).split()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        assert j < len(lines), f"{page}:{i + 1}: fence never closed"
        out.append(Block(page, i + 1, info[0] if info else "", info[1:], "\n".join(body) + "\n"))
        i = j + 1
    return out


def prose_lines(path: Path) -> list[str]:
    """The page's lines with every fenced block blanked out."""
    lines = path.read_text().splitlines()
    for b in blocks_of(path):
        end = b.line + b.text.count("\n")
        lines[b.line - 1:end + 1] = [""] * (end + 1 - (b.line - 1))
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation
    dropped (but - and _), spaces as -, a repeated one suffixed -1, -2..."""
    seen: dict[str, int] = {}
    for line in prose_lines(path):
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


LINK = re.compile(r"\]\(([^)\s]+)\)")


# ---------------------------------------------------------------------------
# the cluster
# ---------------------------------------------------------------------------

def _ports_free(port: int) -> bool:
    return all(can_bind(p) for p in (port, port + BUS_OFFSET, port + HTTP_OFFSET))


def _pick_ports() -> tuple[int, ...]:
    if all(_ports_free(p) for p in WRITTEN_PORTS):
        return WRITTEN_PORTS
    picked: list[int] = []
    while len(picked) < len(WRITTEN_PORTS):
        p = free_port()
        if can_bind(p + HTTP_OFFSET):
            picked.append(p)
    return tuple(picked)


@dataclass
class Cluster:
    ports: tuple[int, ...]
    factory: NodeFactory

    @property
    def substitutions(self) -> dict[str, str]:
        subs: dict[str, str] = {}
        for written, port in zip(WRITTEN_PORTS, self.ports):
            for offset in (0, HTTP_OFFSET, BUS_OFFSET):
                if written != port:
                    subs[str(written + offset)] = str(port + offset)
        return subs

    def substitute(self, text: str) -> str:
        subs = self.substitutions
        if not subs:
            return text
        pattern = re.compile(r"(?<!\d)(%s)(?!\d)" % "|".join(subs))
        return pattern.sub(lambda m: subs[m.group(1)], text)

    def flush(self) -> None:
        for n in self.factory.nodes:
            with RawConn(n.host, n.port) as r:
                assert r.call("DEBUG", "FLUSHALL") == b"+OK\r\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    factory = NodeFactory(tmp_path_factory.mktemp("docs-nodes"))
    ports = _pick_ports()
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    try:
        nodes = [factory(port=p, http_port=p + HTTP_OFFSET, cluster_seeds=seeds) for p in ports]
        join(nodes)
        yield Cluster(ports, factory)
    finally:
        factory.stop_all()


# ---------------------------------------------------------------------------
# running shell examples
# ---------------------------------------------------------------------------

def run_in_pty(script: str, env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
    """``bash -c script`` with a terminal as stdin/stdout/stderr; the exit
    status and everything printed (line ends as ``\\n``)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 500, 0, 0))  # no wrapping
    proc = subprocess.Popen(["bash", "-c", script], stdin=slave, stdout=slave, stderr=slave,
                            env=env, cwd=cwd, start_new_session=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:   # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise AssertionError(f"still running after {timeout} s: {script!r}\n"
                                     f"{out.decode(errors='replace')}")
        proc.wait(timeout=5)
    finally:
        os.close(master)
    return proc.returncode, out.decode(errors="replace").replace("\r\n", "\n")


def _line_regex(expected: str, bound: dict[str, str]) -> tuple[re.Pattern[str], list[str]]:
    """A regex for one shown output line: job ids already bound must appear
    as they are; a new one matches any job id (a named group)."""
    regex, new = "", []
    for i, part in enumerate(re.split(f"({JOB_ID})", expected)):
        if i % 2 == 0:
            regex += re.escape(part)
        elif part in bound:
            regex += re.escape(bound[part])
        elif part in new:
            regex += f"(?P=g{new.index(part)})"
        else:
            regex += f"(?P<g{len(new)}>{JOB_ID})"
            new.append(part)
    return re.compile(regex), new


def match_output(expected: list[str], actual: list[str],
                 bound: dict[str, str]) -> dict[str, str] | None:
    """The job ids bound by matching ``actual`` against ``expected`` (with
    ``...`` lines matching any lines), or None if it does not match."""
    if not expected:
        return bound if not actual else None
    if expected[0] == "...":
        for skip in range(len(actual) + 1):
            result = match_output(expected[1:], actual[skip:], bound)
            if result is not None:
                return result
        return None
    if not actual:
        return None
    regex, new = _line_regex(expected[0].rstrip(), bound)
    m = regex.fullmatch(actual[0].rstrip())
    if m is None:
        return None
    more = {shown: m.group(f"g{k}") for k, shown in enumerate(new)}
    return match_output(expected[1:], actual[1:], {**bound, **more})


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before any command: {line!r}"
            if steps[-1][1] or not steps[-1][0].endswith("\\"):
                steps[-1][1].append(line)
            else:  # a command continued on the next line
                steps[-1] = (steps[-1][0] + "\n" + line, [])
    return steps


def without_blank_tail(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


# ---------------------------------------------------------------------------
# the Python session
# ---------------------------------------------------------------------------

class Session:
    """tests/docs/session.py as a subprocess; its own prints and Spark's logs
    go to ``log``."""

    def __init__(self, env: dict[str, str], log: IO[bytes]):
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("session.py")), str(write_fd)],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
            pass_fds=(write_fd,), start_new_session=True, text=True)
        os.close(write_fd)
        self.answers = os.fdopen(read_fd)

    def request(self, timeout: float, **request: object) -> dict[str, object]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.answers], [], [], timeout)
        if not ready:
            self.close()
            raise AssertionError(f"{request.get('where')}: no answer within {timeout} s")
        line = self.answers.readline()
        assert line, f"the Python session died (exit {self.proc.poll()})"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.answers.close()


@pytest.fixture(scope="module")
def env(cluster: Cluster) -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), e.get("PATH", "")])
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), e.get("PYTHONPATH", "")) if p)
    e["TERM"] = "dumb"
    if cluster.substitutions:
        e["DISQUETTE_NODES"] = f"127.0.0.1:{cluster.ports[0]}"
    return e


@pytest.fixture(scope="module")
def session(env: dict[str, str], tmp_path_factory) -> Iterator[Session]:
    log_path = tmp_path_factory.mktemp("docs-session") / "session.log"
    with open(log_path, "wb") as log:
        s = Session(env, log)
        try:
            yield s
        finally:
            s.close()


# ---------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(REPO_ROOT)) for p in PAGES])
def test_every_fence_has_a_kind(path: Path) -> None:
    unnamed = [b.where for b in blocks_of(path) if not b.kind]
    assert not unnamed, f"fences without a kind (console, sh, python, text...): {unnamed}"


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(REPO_ROOT)) for p in PAGES])
def test_links_resolve(path: Path) -> None:
    """Every link to a file of the repository names one that exists, and every
    #anchor a heading of its page."""
    broken = []
    for target in LINK.findall("\n".join(prose_lines(path))):
        if re.match(r"[a-z]+:", target):
            continue   # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert not broken, f"{path.relative_to(REPO_ROOT)}: broken links {broken}"


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(REPO_ROOT)) for p in PAGES])
def test_examples_run(path: Path, cluster: Cluster, env: dict[str, str], session: Session,
                      tmp_path: Path) -> None:
    blocks = [b for b in blocks_of(path) if b.kind in RUN_KINDS]
    if not blocks:
        pytest.skip("no runnable example on this page")
    cluster.flush()
    assert session.request(PYTHON_TIMEOUT, op="page", cwd=str(tmp_path))["ok"]
    bound: dict[str, str] = {}   # job ids shown in the page -> the ones the nodes gave

    def substitute(text: str) -> str:
        text = cluster.substitute(text)
        for shown, real in bound.items():
            text = text.replace(shown, real)
        return text

    for b in blocks:
        if b.kind == "python":
            spark = "spark" in b.tags
            answer = session.request(SPARK_TIMEOUT if spark else PYTHON_TIMEOUT, op="run",
                                     code=substitute(b.text), where=b.where, spark=spark)
            assert answer["ok"], f"{b.where}:\n{answer['error']}\noutput:\n{answer['output']}"
        elif b.kind == "sh":
            rc, out = run_in_pty("set -e\n" + substitute(b.text), env, tmp_path, SHELL_TIMEOUT)
            assert rc == 0 and ERROR_REPLY not in out, f"{b.where}: exit {rc}\n{out}"
        else:
            for command, shown in console_steps(b.text):
                rc, out = run_in_pty(substitute(command), env, tmp_path, SHELL_TIMEOUT)
                shown = without_blank_tail(shown)
                actual = without_blank_tail(out.splitlines())
                if not shown:
                    assert ERROR_REPLY not in out, f"{b.where}: $ {command}\n{out}"
                    continue
                result = match_output([cluster.substitute(s) for s in shown], actual, bound)
                assert result is not None, (
                    f"{b.where}: $ {command}\nshown:\n" + "\n".join(shown)
                    + "\nprinted:\n" + "\n".join(actual))
                bound = result
