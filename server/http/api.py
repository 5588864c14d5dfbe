"""The REST API: each endpoint turns a request into the RESP command it stands
for, runs it through a ``Session`` (server/http/session.py: the same path as
a RESP client), and the reply into JSON (server/http/replies.py). Nothing is
decided here beyond that mapping; /openapi.json (server/http/openapi.py)
describes every route.

    POST   /queues/{queue}/jobs          ADDJOB (a JSON array: one ADDJOB per item)
    GET    /queues/{queue}/jobs          GETJOB ... WITHCOUNTERS FROM queue (long poll)
    GET    /queues/{queue}/peek          QPEEK
    GET    /queues                       QSCAN (+ QSTAT of each queue)
    GET    /queues/{queue}               QSTAT
    POST   /queues/{queue}/pause         PAUSE
    GET    /jobs/{id}                    SHOW
    DELETE /jobs/{id}                    DELJOB
    POST   /jobs/{id}/ack|fastack|nack|working   ACKJOB | FASTACK | NACK | WORKING
    GET    /cluster                      HELLO + CLUSTER NODES + CLUSTER INFO
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from protocol.resp import Error
from server.http.replies import (
    HttpError, bad_request, check, cluster_document, from_resp_error, jobs_list, qstat_document,
    show_document, take_body, text,
)
from server.http.session import ConnectionGone, Session

log = logging.getLogger("server.http")

JSON = "application/json"
OCTETS = "application/octet-stream"
# Read as JSON (curl -d sends x-www-form-urlencoded unless told otherwise).
JSON_TYPES = (JSON, "text/plain", "application/x-www-form-urlencoded")
# ADDJOB's options, as JSON fields / query parameters -> the RESP option name.
ADDJOB_OPTIONS = {"replicate": b"REPLICATE", "delay": b"DELAY", "retry": b"RETRY",
                  "ttl": b"TTL", "maxlen": b"MAXLEN"}
# (ext) HOLD and IDEMPOTENCY key, docs/clients.md
FLAG_OPTIONS = {"async": b"ASYNC", "hold": b"HOLD"}
ITEM_FIELDS = {"body", "body_base64", "timeout_ms", "idempotency_key", *FLAG_OPTIONS,
               *ADDJOB_OPTIONS}
# The ms-timeout of ADDJOB when a request gives none (0 would let a request
# wait for ever for its copies).
DEFAULT_ADD_TIMEOUT_MS = b"5000"
# A batch runs this many ADDJOBs per event-loop turn, so RESP clients are
# served between slices of a big batch.
BATCH_SLICE = 500
PAUSE_STATES = ("in", "out", "all", "none")
JOB_ACTIONS = {"ack": b"ACKJOB", "fastack": b"FASTACK", "nack": b"NACK"}
# A job id has "/" among its base64 characters: the route takes a well-formed
# id as it is (or %2F-encoded), anything else as one segment (then BADID).
JOB_ID = r"{id:D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}|[^/]+}"
TRUE = ("1", "true", "yes")
FALSE = ("0", "false", "no", "")


def dumps(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


def json_response(doc, status: int = 200, headers=None) -> web.Response:
    return web.Response(body=dumps(doc), status=status, content_type=JSON,
                        headers=headers)


def error_response(e: HttpError) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="disquette"'} if e.status == 401 else None
    return json_response(e.document(), e.status, headers)


def flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name)
    if value is None:
        return False
    v = value.lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise bad_request(f"{name} must be true or false")


def wants_octets(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return OCTETS in accept and JSON not in accept


def _peer(request: web.Request) -> str:
    t = request.transport
    addr = t.get_extra_info("peername") if t is not None else None
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else "http"


class Api:
    """The endpoints, over one node and its output driver."""

    def __init__(self, node, driver) -> None:
        self.node = node
        self.driver = driver

    def routes(self) -> list:
        e = self.endpoint
        return [
            web.post("/queues/{queue}/jobs", e(self.add_jobs)),
            web.get("/queues/{queue}/jobs", e(self.get_jobs), allow_head=False),
            web.get("/queues/{queue}/peek", e(self.peek), allow_head=False),
            web.post("/queues/{queue}/pause", e(self.pause)),
            web.get("/queues/{queue}", e(self.qstat), allow_head=False),
            web.get("/queues", e(self.queues), allow_head=False),
            web.get(f"/jobs/{JOB_ID}", e(self.show), allow_head=False),
            web.delete(f"/jobs/{JOB_ID}", e(self.deljob)),
            web.post(f"/jobs/{JOB_ID}/{{action:ack|fastack|nack|working}}", e(self.job_action)),
            web.get("/cluster", e(self.cluster), allow_head=False),
        ]

    # ----------------------------------------------------------------- plumbing
    def session(self, request: web.Request) -> Session:
        return Session(self.node, self.driver, asyncio.get_running_loop(), _peer(request), "")

    async def open_session(self, request: web.Request) -> Session:
        """A session for this request, authenticated from ``Authorization:
        Bearer <password>`` when the node has a requirepass (else the
        commands answer NOAUTH: 401)."""
        node = self.node
        if len(node.clients) >= node.config.maxclients:
            node.stats["rejected_connections"] += 1
            raise HttpError(503, "ERR", "ERR max number of clients reached")
        session = self.session(request)
        auth = request.headers.get("Authorization")
        if auth is not None and node.config.requirepass:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token:
                session.close()
                raise HttpError(401, "NOAUTH", "NOAUTH Authorization: Bearer <password> expected")
            err = await session.authenticate(token.strip())
            if err is not None:
                session.close()
                raise HttpError(401, "WRONGPASS", err)
        return session

    def endpoint(self, fn):
        """Wrap an endpoint: its session, its errors as JSON documents."""
        async def handler(request: web.Request) -> web.StreamResponse:
            try:
                session = await self.open_session(request)
            except HttpError as e:
                return error_response(e)
            try:
                return await fn(request, session)
            except HttpError as e:
                return error_response(e)
            except ConnectionGone as e:
                return error_response(HttpError(503, "CLOSED", str(e)))
            finally:
                session.close()
        handler.__name__ = fn.__name__
        return handler

    async def read_body(self, request: web.Request) -> bytes:
        """The request body, refused (413) past proto-max-bulk-len."""
        limit = self.node.config.proto_max_bulk_len
        length = request.content_length
        if length is not None and length > limit:
            raise HttpError(413, "TOOLARGE",
                            f"request body larger than proto-max-bulk-len ({limit} bytes)")
        if length is not None:      # the usual case: read at once (the app's own cap is off)
            return await request.read()
        chunks, size = [], 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise HttpError(413, "TOOLARGE",
                                f"request body larger than proto-max-bulk-len ({limit} bytes)")
            chunks.append(chunk)
        return b"".join(chunks)

    async def read_json(self, request: web.Request):
        data = await self.read_body(request)
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:
            raise bad_request(f"invalid JSON body: {e}") from None

    # ------------------------------------------------------------------- ADDJOB
    def add_options(self, source, where: str, base: dict | None = None) -> dict:
        """ADDJOB options from the query string (strings, checked by ADDJOB
        itself, as a RESP client's) or a JSON item (typed)."""
        opts = dict(base or {})
        from_query = base is None
        for name in ("timeout_ms", *ADDJOB_OPTIONS):
            if name not in source:
                continue
            value = source[name]
            if from_query:
                opts[name] = value.encode()
            elif value.__class__ is int:
                opts[name] = b"%d" % value
            else:
                raise bad_request(f"{where}: {name} must be an integer")
        for name in FLAG_OPTIONS:
            if name not in source:
                continue
            value = source[name]
            if from_query:
                v = value.lower()
                if v not in TRUE and v not in FALSE:
                    raise bad_request(f"{name} must be true or false")
                opts[name] = v in TRUE
            elif isinstance(value, bool):
                opts[name] = value
            else:
                raise bad_request(f"{where}: {name} must be true or false")
        if "idempotency_key" in source:
            value = source["idempotency_key"]
            if not isinstance(value, str):
                raise bad_request(f"{where}: idempotency_key must be a string")
            opts["idempotency_key"] = value.encode("utf-8", "surrogatepass")
        return opts

    @staticmethod
    def addjob_argv(queue: bytes, body: bytes, opts: dict) -> list:
        argv = [b"ADDJOB", queue, body, opts.get("timeout_ms", DEFAULT_ADD_TIMEOUT_MS)]
        for name, option in ADDJOB_OPTIONS.items():
            value = opts.get(name)
            if value is not None:
                argv += (option, value)
        for name, flag in FLAG_OPTIONS.items():
            if opts.get(name):
                argv.append(flag)
        key = opts.get("idempotency_key")
        if key is not None:
            argv += (b"IDEMPOTENCY", key)
        return argv

    def item_argv(self, queue: bytes, item, defaults: dict, where: str) -> list:
        if isinstance(item, str):
            return self.addjob_argv(queue, item.encode("utf-8", "surrogatepass"), defaults)
        if not isinstance(item, dict):
            raise bad_request(f"{where}: a job is an object or a string")
        unknown = set(item) - ITEM_FIELDS
        if unknown:
            raise bad_request(f"{where}: unknown field {sorted(unknown)[0]!r}")
        return self.addjob_argv(queue, take_body(item, where),
                                self.add_options(item, where, defaults))

    async def add_jobs(self, request: web.Request, session: Session) -> web.Response:
        queue = request.match_info["queue"].encode()
        defaults = self.add_options(request.query, "query")
        ctype = request.content_type if "Content-Type" in request.headers else JSON
        if ctype == OCTETS:         # one job, the body as it is
            argv = self.addjob_argv(queue, await self.read_body(request), defaults)
            return json_response({"id": check(await session.call(*argv))}, 201)
        if ctype not in JSON_TYPES:
            raise HttpError(415, "UNSUPPORTED", f"unsupported content type {ctype}: "
                            f"send {JSON} or {OCTETS}")
        doc = await self.read_json(request)
        if isinstance(doc, list):
            if "idempotency_key" in defaults:
                raise bad_request("idempotency_key in the query string names one job: "
                                  "give each job of a batch its own")
            # Items that are just {"body": "<text>"} (the usual batch) take the
            # request's options as they are: one argv built, copied per item.
            plain = self.addjob_argv(queue, b"", defaults)
            argvs = []
            for i, item in enumerate(doc):
                if item.__class__ is dict and len(item) == 1 \
                        and item.get("body").__class__ is str:
                    argv = plain.copy()
                    argv[2] = item["body"].encode("utf-8", "surrogatepass")
                    argvs.append(argv)
                else:
                    argvs.append(self.item_argv(queue, item, defaults, f"job {i}"))
            return await self.add_batch(session, argvs)
        if doc is None:
            raise bad_request("a job (a JSON object) or a JSON array of jobs is required")
        argv = self.item_argv(queue, doc, defaults, "job")
        return json_response({"id": check(await session.call(*argv))}, 201)

    async def add_batch(self, session: Session, argvs: list) -> web.Response:
        """One ADDJOB per item, all in flight at once (each waits for its own
        copies). Items are independent, as the commands of a RESP pipeline:
        ``ids`` has an id or null per item, ``errors`` the failed ones; 201
        if all were added, else 207."""
        results = []                # replies, or futures of replies still to come
        run = session.run
        for start in range(0, len(argvs), BATCH_SLICE):
            for argv in argvs[start:start + BATCH_SLICE]:
                results.append(run(argv))
            session.flush()
            if start + BATCH_SLICE < len(argvs):
                await asyncio.sleep(0)      # let other clients in
        ids, errors = [], []
        for i, reply in enumerate(results):
            if isinstance(reply, asyncio.Future):
                try:
                    reply = reply.result() if reply.done() else await reply
                except ConnectionGone as e:
                    reply = Error(f"ERR {e}")
            if reply.__class__ is Error:
                e = from_resp_error(reply)
                ids.append(None)
                errors.append({"index": i, "error": e.code, "message": e.message})
            else:
                ids.append(reply)
        doc = {"ids": ids}
        if errors:
            doc["errors"] = errors
        return json_response(doc, 207 if errors else 201)

    # ------------------------------------------------------------------- GETJOB
    async def get_jobs(self, request: web.Request, session: Session) -> web.StreamResponse:
        q = request.query
        argv = [b"GETJOB"]
        if flag(request, "nohang"):
            argv.append(b"NOHANG")
        if "timeout_ms" in q:
            argv += (b"TIMEOUT", q["timeout_ms"].encode())
        if "count" in q:
            argv += (b"COUNT", q["count"].encode())
        argv += (b"WITHCOUNTERS", b"FROM", request.match_info["queue"].encode())
        octets = wants_octets(request)
        if octets and q.get("count", "1") != "1":
            raise HttpError(406, "BADREQUEST",
                            f"{OCTETS} carries one job: use count=1 or ask for {JSON}")
        fut = session.submit(argv)
        session.flush()
        try:
            reply = await fut
        except asyncio.CancelledError:
            # The HTTP client went away: a job already taken goes back.
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.give_back(session, fut.result())
            raise
        jobs = check(reply)
        base64 = request.query.get("encoding") == "base64"
        if octets:
            if not isinstance(jobs, list) or not jobs:
                resp = web.Response(status=204)
            else:
                e = jobs[0]
                resp = web.Response(body=e[2], content_type=OCTETS, headers={
                    "X-Job-Id": text(e[1]), "X-Job-Queue": text(e[0]),
                    "X-Job-Nacks": str(e[4]), "X-Job-Additional-Deliveries": str(e[6])})
        else:
            resp = json_response({"jobs": jobs_list(jobs, base64)})
        if not isinstance(jobs, list) or not jobs:
            return resp
        try:    # written here, so that a job that could not be sent goes back
            await resp.prepare(request)
            await resp.write_eof()
        except (asyncio.CancelledError, ConnectionError):
            self.give_back(session, jobs)
            raise
        return resp

    def give_back(self, session: Session, jobs) -> None:
        """ENQUEUE jobs taken for a client that is gone (as a worker that
        cannot run them would hand them back)."""
        if isinstance(jobs, list) and jobs:
            session.submit([b"ENQUEUE", *(e[1] for e in jobs)])
            session.flush()
            log.debug("HTTP client gone: %d jobs given back", len(jobs))

    async def peek(self, request: web.Request, session: Session) -> web.Response:
        count = request.query.get("count", "10")
        reply = check(await session.call(b"QPEEK", request.match_info["queue"].encode(),
                                         count.encode()))
        return json_response({"jobs": jobs_list(
            reply, request.query.get("encoding") == "base64")})

    # ------------------------------------------------------------------- queues
    async def qstat(self, request: web.Request, session: Session) -> web.Response:
        name = request.match_info["queue"]
        reply = check(await session.call(b"QSTAT", name.encode()))
        if not isinstance(reply, list):
            raise HttpError(404, "NOQUEUE", f"NOQUEUE no queue named {name!r} on this node")
        return json_response(qstat_document(reply))

    async def queues(self, request: web.Request, session: Session) -> web.Response:
        """QSCAN (every queue at once with BUSYLOOP, or a page from ``cursor``)
        and, unless ``stats=false``, each queue's QSTAT."""
        q = request.query
        argv = [b"QSCAN"]
        paged = "cursor" in q
        if paged:
            argv.append(q["cursor"].encode())
        if "count" in q:
            argv += (b"COUNT", q["count"].encode())
        if not paged:
            argv.append(b"BUSYLOOP")
        for name, option in (("minlen", b"MINLEN"), ("maxlen", b"MAXLEN"),
                             ("importrate", b"IMPORTRATE")):
            if name in q:
                argv += (option, q[name].encode())
        cursor, names = check(await session.call(*argv))
        with_stats = q.get("stats", "true").lower() not in FALSE
        doc = {"cursor": text(cursor)}
        if not with_stats:
            doc["queues"] = [{"name": text(n)} for n in names]
            return json_response(doc)
        futures = [session.submit([b"QSTAT", n]) for n in names]
        session.flush()
        stats = []
        for fut in futures:
            reply = await fut
            if isinstance(reply, list):     # (a queue collected meanwhile is skipped)
                stats.append(qstat_document(reply))
        doc["queues"] = stats
        return json_response(doc)

    async def pause(self, request: web.Request, session: Session) -> web.Response:
        doc = await self.read_json(request) if request.body_exists else None
        doc = {} if doc is None else doc
        if not isinstance(doc, dict):
            raise bad_request("a JSON object {\"state\": \"in|out|all|none\", \"bcast\": bool}")
        unknown = set(doc) - {"state", "bcast"}
        if unknown:
            raise bad_request(f"unknown field {sorted(unknown)[0]!r}")
        state = doc.get("state", request.query.get("state"))
        if state not in PAUSE_STATES:
            raise bad_request("state must be one of in, out, all, none")
        bcast = doc.get("bcast", flag(request, "bcast"))
        if not isinstance(bcast, bool):
            raise bad_request("bcast must be true or false")
        argv = [b"PAUSE", request.match_info["queue"].encode(), state.encode()]
        if bcast:
            argv.append(b"BCAST")
        return json_response({"pause": text(check(await session.call(*argv)))})

    # --------------------------------------------------------------------- jobs
    async def show(self, request: web.Request, session: Session) -> web.Response:
        jid = request.match_info["id"]
        reply = check(await session.call(b"SHOW", jid.encode()))
        if reply is None:
            raise HttpError(404, "NOJOB", "NOJOB Job not known in the context of this node.")
        if wants_octets(request):
            return web.Response(body=reply[-1], content_type=OCTETS,
                                headers={"X-Job-Id": jid, "X-Job-Queue": text(reply[3])})
        return json_response(show_document(reply, request.query.get("encoding") == "base64"))

    async def deljob(self, request: web.Request, session: Session) -> web.Response:
        n = check(await session.call(b"DELJOB", request.match_info["id"].encode()))
        if not n:
            raise HttpError(404, "NOJOB", "NOJOB Job not known in the context of this node.")
        return json_response({"deleted": n})

    async def job_action(self, request: web.Request, session: Session) -> web.Response:
        action = request.match_info["action"]
        jid = request.match_info["id"].encode()
        if action == "working":
            return json_response({"retry": check(await session.call(b"WORKING", jid))})
        n = check(await session.call(JOB_ACTIONS[action], jid))
        return json_response({"count": n})

    # ------------------------------------------------------------------ cluster
    async def cluster(self, request: web.Request, session: Session) -> web.Response:
        hello = session.submit([b"HELLO"])
        nodes = session.submit([b"CLUSTER", b"NODES"])
        info = session.submit([b"CLUSTER", b"INFO"])
        session.flush()
        hello, nodes, info = check(await hello), check(await nodes), check(await info)
        return json_response(cluster_document(hello, nodes, info))
