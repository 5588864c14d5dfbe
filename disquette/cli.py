"""The ``disquette`` command line.

    disquette worker myapp.tasks:send_email --queue emails --nodes 127.0.0.1:7711 --concurrency 16
    disquette worker myapp.tasks:app --processes 4   # every queue of a disquette.App
    disquette worker --exec "./resize.sh" --queue images   # a command per job (body on stdin)
    disquette dispatch --queue emails --url http://127.0.0.1:8080/send --concurrency 8
    disquette dead list emails            # dead letters of emails (queue emails:dead)
    disquette dead requeue emails         # put them back to work

``--nodes`` defaults to $DISQUETTE_NODES, then 127.0.0.1:7711; ``--password``
to $DISQUETTE_PASSWORD.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from typing import Any, Callable

from ._version import __version__
from .app import App
from .client import Client
from .dead_letters import dead_queue_name
from .dispatch import Dispatcher, ExponentialBackoff
from .errors import DisqueError
from .shell import ShellHandler
from .supervisor import Supervisor
from .worker import Worker


def load_handler(spec: str) -> Any:
    """``"package.module:function"`` or ``"package.module:app"`` (a
    :class:`~disquette.App`); the current directory is importable."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"disquette: handler must look like module:function, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not (callable(obj) or isinstance(obj, App)):
        raise SystemExit(f"disquette: {spec} is neither callable nor a disquette.App")
    return obj


def _split(values: list[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _client(args: argparse.Namespace) -> Client:
    return Client(_split(args.nodes), password=args.password, serializer=args.serializer,
                  protocol=args.protocol)


def _dead_queue(args: argparse.Namespace) -> str:
    if args.dead_letter_queue:
        return args.dead_letter_queue
    return args.queue if args.queue.endswith(":dead") else dead_queue_name(args.queue)


def _worker(args: argparse.Namespace) -> Worker:
    """The Worker the command line describes: a handler's, an App's, or --exec's."""
    if args.exec is not None and args.handler is not None:
        raise SystemExit("disquette: give a handler or --exec, not both")
    target = ShellHandler(args.exec) if args.exec is not None else (
        load_handler(args.handler) if args.handler is not None else None)
    if target is None:
        raise SystemExit("disquette: worker needs a handler (module:function or module:app) "
                         "or --exec CMD")
    options: dict[str, Any] = dict(
        concurrency=args.concurrency, max_attempts=args.max_attempts or None,
        max_failures=args.max_failures or None,
        max_lost_deliveries=args.max_lost_deliveries or None, prefetch=args.prefetch,
        dead_letter_queue=args.dead_letter_queue, retry_backoff=args.retry_backoff,
        grace_period=args.grace_period, poll_ms=args.poll_ms,
        metrics=False if args.no_metrics else None)
    if isinstance(target, App):
        # The app's own client (its nodes), unless --nodes or $DISQUETTE_NODES says.
        explicit = args.nodes_given or "DISQUETTE_NODES" in os.environ
        queues = _split(args.queue) if args.queue else None
        return target.worker(queues, client=_client(args) if explicit else None, **options)
    if not args.queue:
        raise SystemExit("disquette: --queue is needed (but for a disquette.App)")
    return Worker(_client(args), _split(args.queue), target, **options)


def cmd_worker(args: argparse.Namespace) -> int:
    if args.processes > 1:
        return Supervisor(args.argv, args.processes).run()
    worker = _worker(args)
    if args.metrics_port:
        import prometheus_client   # optional (the `metrics` extra): only with --metrics-port

        prometheus_client.start_http_server(args.metrics_port)
    worker.run()
    print(handed_back_report(worker), flush=True)
    if worker.forced or worker.handed_back["unfinished"]:
        # Handler threads may still run (their jobs were handed back): do
        # not wait for them.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(130 if worker.forced else 0)
    return 0


def handed_back_report(worker: Worker) -> str:
    """What a stopped worker gave back, for the person who stopped it: the
    counts, then the ids (``not started`` went back with ENQUEUE, no failure
    counted; ``unfinished`` ran past the grace period and were NACKed)."""
    back = worker.handed_back
    lines = [f"handed back {len(back['not_started'])} jobs not started (ENQUEUE), "
             f"{len(back['unfinished'])} unfinished (NACK)"]
    for kind, ids in (("not started", back["not_started"]),
                      ("unfinished", back["unfinished"])):
        lines += [f"{kind}: {job_id}" for job_id in ids]
    return "\n".join(lines)


def cmd_dispatch(args: argparse.Namespace) -> int:
    headers = {}
    for h in args.header or ():
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise SystemExit(f"disquette: --header must look like 'Name: value', not {h!r}")
        headers[name.strip()] = value.strip()
    dispatcher = Dispatcher(
        _client(args), args.queue, args.url, concurrency=args.concurrency,
        timeout=args.timeout, max_attempts=args.max_attempts, headers=headers,
        backoff=ExponentialBackoff(args.backoff_base, cap=args.backoff_max),
        dead_letter_queue=args.dead_letter_queue, grace_period=args.grace_period,
        poll_ms=args.poll_ms)
    dispatcher.run()
    if dispatcher.worker.forced:
        logging.shutdown()
        sys.stdout.flush()
        os._exit(130)
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    client = _client(args)
    dlq = _dead_queue(args)
    if args.action == "list":
        for d in client.dead_letters(dlq, limit=args.limit):
            print(json.dumps(d.as_dict(), ensure_ascii=False))
    else:
        n = client.requeue_dead(dlq, queue=args.to, limit=args.limit)
        print(f"requeued {n} jobs from {dlq}")
    client.close()
    return 0


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--nodes", action="append",
                        default=None, help="host:port[,host:port] (repeatable)")
    common.add_argument("--password", default=os.environ.get("DISQUETTE_PASSWORD"))
    common.add_argument("--serializer", default="json", choices=["json", "msgpack"])
    common.add_argument("--protocol", type=int, default=2, choices=[2, 3])
    common.add_argument("--log-level", default="INFO")

    p = argparse.ArgumentParser(prog="disquette", description="Disquette SDK command line")
    p.add_argument("--version", action="version", version=f"disquette {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", parents=[common], help="run a handler on a queue's jobs")
    w.add_argument("handler", nargs="?", default=None,
                   help="module:function called with each Job, or module:app (a "
                        "disquette.App: every queue of its tasks)")
    w.add_argument("--exec", default=None, metavar="CMD",
                   help="run CMD (/bin/sh -c) per job, its body on stdin; exit status 0 "
                        "acks it, any other fails it")
    w.add_argument("--queue", "-q", action="append", default=None,
                   help="queue to consume (repeatable or comma-separated; for an App: "
                        "only these of its queues)")
    w.add_argument("--processes", type=int, default=1,
                   help="run N worker processes under one supervisor (default 1)")
    w.add_argument("--no-metrics", action="store_true",
                   help="count no Prometheus metrics (they cost a few %% of the rate)")
    w.add_argument("--concurrency", "-c", type=int, default=16)
    w.add_argument("--max-attempts", type=int, default=5,
                   help="deliveries in all before the dead-letter queue (0: retry for ever)")
    w.add_argument("--max-failures", type=int, default=0,
                   help="handler failures (nacks) before the dead-letter queue (0: no limit)")
    w.add_argument("--max-lost-deliveries", type=int, default=0,
                   help="lost deliveries (crashed or timed-out workers) before the "
                        "dead-letter queue (0: no limit)")
    w.add_argument("--prefetch", type=int, default=0,
                   help="jobs taken beyond the free slots, waiting for one")
    w.add_argument("--dead-letter-queue", default=None, help="default: <queue>:dead")
    w.add_argument("--retry-backoff", action="store_true",
                   help="on failure let RETRY re-queue the job instead of NACK")
    w.add_argument("--grace-period", type=float, default=30.0)
    w.add_argument("--poll-ms", type=int, default=1000)
    w.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on this port")
    w.set_defaults(func=cmd_worker)

    h = sub.add_parser("dispatch", parents=[common],
                       help="POST each job of a queue to a URL (webhook worker)")
    h.add_argument("--queue", "-q", required=True, help="queue to dispatch")
    h.add_argument("--url", required=True, help="endpoint each job is POSTed to")
    h.add_argument("--concurrency", "-c", type=int, default=8,
                   help="requests in flight at most (default 8)")
    h.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    h.add_argument("--max-attempts", type=int, default=5,
                   help="attempts before the dead-letter queue (0: retry for ever)")
    h.add_argument("--backoff-base", type=float, default=1.0,
                   help="seconds before the 2nd attempt, doubling each time")
    h.add_argument("--backoff-max", type=float, default=300.0, help="longest backoff")
    h.add_argument("--header", action="append", help="'Name: value' sent with every request")
    h.add_argument("--dead-letter-queue", default=None, help="default: <queue>:dead")
    h.add_argument("--grace-period", type=float, default=30.0)
    h.add_argument("--poll-ms", type=int, default=1000)
    h.set_defaults(func=cmd_dispatch)

    d = sub.add_parser("dead", parents=[common], help="list or requeue dead letters")
    d.add_argument("action", choices=["list", "requeue"])
    d.add_argument("queue", help="the work queue (its dead letters are in QUEUE:dead) "
                                 "or a queue ending in :dead")
    d.add_argument("--dead-letter-queue", default=None)
    d.add_argument("--to", default=None, help="requeue into this queue instead")
    d.add_argument("--limit", type=int, default=None)
    d.set_defaults(func=cmd_dead)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.nodes_given = bool(args.nodes)
    if not args.nodes:
        args.nodes = [os.environ.get("DISQUETTE_NODES", "127.0.0.1:7711")]
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except DisqueError as e:
        print(f"disquette: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
