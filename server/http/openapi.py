"""The OpenAPI 3 document served at /openapi.json: every route of
server/http/api.py, its parameters, bodies and replies (tests/http checks it
against a live node with schemathesis)."""

from __future__ import annotations

from broker.commands.connection import VERSION


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERROR = {"$ref": "#/components/responses/Error"}


def _op(summary: str, command: str, responses: dict, *, params=(), body=None,
        tag: str = "jobs", errors=(400, 401, 503)) -> dict:
    op = {"summary": summary, "description": f"Runs `{command}`.", "tags": [tag],
          "responses": {**responses, **{str(s): ERROR for s in errors}, "default": ERROR}}
    if params:
        op["parameters"] = list(params)
    if body is not None:
        op["requestBody"] = body
    return op


def _q(name: str, schema: dict, description: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def _path(name: str, description: str, pattern: str | None = None) -> dict:
    schema = {"type": "string", "minLength": 1}
    if pattern:
        schema["pattern"] = pattern
    return {"name": name, "in": "path", "required": True, "schema": schema,
            "description": description}


INT = {"type": "integer"}
NONNEG = {"type": "integer", "minimum": 0}
BOOL_Q = {"type": "string", "enum": ["true", "false", "1", "0", "yes", "no"]}
QUEUE = _path("queue", "Queue name (URL-encoded).")
JOB_ID = _path("id", "Job id (`D-...`, 40 characters).")
ENCODING = _q("encoding", {"type": "string", "enum": ["base64"]},
              "`base64`: every body as `body_base64`, even UTF-8 text.")

ADD_OPTIONS = {
    "timeout_ms": {**NONNEG, "description": "ADDJOB ms-timeout: how long to wait for the "
                   "copies (0: as long as needed). Default 5000."},
    "replicate": {"type": "integer", "minimum": 1, "maximum": 65535,
                  "description": "REPLICATE: copies before the id is returned."},
    "delay": {**NONNEG, "description": "DELAY seconds before the job is queued."},
    "retry": {**NONNEG, "description": "RETRY seconds before an unacked job is queued again "
              "(0: at most once)."},
    "ttl": {"type": "integer", "minimum": 1, "description": "TTL seconds."},
    "maxlen": {"type": "integer", "minimum": 1,
               "description": "MAXLEN: refuse if the queue already has that many jobs."},
    "async": {"type": "boolean", "description": "ASYNC: answer at once, replicate in the "
              "background."},
    "hold": {"type": "boolean", "description": "(ext) HOLD: add the job held, queued only "
             "when an ENQUEUE releases it."},
    "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 256,
                        "description": "(ext) IDEMPOTENCY: a retried add with the same key "
                        "gets the first add's id (one job per request; per item in a batch)."},
}
BOOL_OPTIONS = ("async", "hold")


def document() -> dict:
    schemas = {
        "Error": {
            "type": "object", "required": ["error", "message"],
            "properties": {
                "error": {"type": "string", "description":
                          "The RESP error code (ERR, BADID, NOJOB, TOOLATE, PAUSED, MAXLEN, "
                          "NOAUTH, NOREPL, LOADING, LEAVING, OOM, MISCONF) or the HTTP "
                          "layer's (BADREQUEST, NOTFOUND, METHOD, TOOLARGE, UNSUPPORTED, "
                          "NOQUEUE, WRONGPASS, CLOSED, INTERNAL)."},
                "message": {"type": "string", "description": "The full error text."},
            },
        },
        "NewJob": {
            "type": "object", "additionalProperties": False,
            "description": "A job: `body` (text, sent as UTF-8) or `body_base64` (exact bytes), "
                           "and ADDJOB's options (those given in the query string are the "
                           "defaults).",
            "properties": {"body": {"type": "string"}, "body_base64": {
                "type": "string", "format": "byte"}, **ADD_OPTIONS},
        },
        "Job": {
            "type": "object", "required": ["queue", "id"],
            "description": "A job taken (GETJOB, with its counters) or peeked (QPEEK). The "
                           "body is `body` when its bytes are UTF-8, else `body_base64`.",
            "properties": {
                "queue": {"type": "string"}, "id": {"type": "string"},
                "body": {"type": "string"}, "body_base64": {"type": "string"},
                "nacks": NONNEG, "additional_deliveries": NONNEG,
            },
        },
        "JobDetail": {
            "type": "object", "description": "SHOW's fields (`-` spelled `_`).",
            "required": ["id", "queue", "state"],
            "properties": {
                "id": {"type": "string"}, "queue": {"type": "string"},
                "state": {"type": "string", "enum": ["wait-repl", "active", "queued",
                                                     "acked", "held"]},
                "repl": INT, "ttl": INT, "ctime": INT, "delay": INT, "retry": INT,
                "nacks": INT, "additional_deliveries": INT,
                "nodes_delivered": {"type": "array", "items": {"type": "string"}},
                "nodes_confirmed": {"type": "array", "items": {"type": "string"}},
                "next_requeue_within": {"type": ["integer", "null"]},
                "next_awake_within": {"type": ["integer", "null"]},
                "body": {"type": "string"}, "body_base64": {"type": "string"},
            },
        },
        "QueueStat": {
            "type": "object", "description": "QSTAT's fields (`-` spelled `_`).",
            "required": ["name", "len", "pause"],
            "properties": {
                "name": {"type": "string"}, "len": NONNEG, "age": INT, "idle": INT,
                "blocked": NONNEG,
                "import_from": {"type": "array", "items": {"type": "string"}},
                "import_rate": NONNEG, "jobs_in": NONNEG, "jobs_out": NONNEG,
                "pause": {"type": "string", "enum": ["none", "in", "out", "all"]},
            },
        },
        "ClusterNode": {
            "type": "object", "required": ["id", "ip", "port", "flags", "link"],
            "properties": {
                "id": {"type": "string"}, "ip": {"type": "string"}, "port": INT,
                "flags": {"type": "array", "items": {"type": "string"}},
                "myself": {"type": "boolean"},
                "priority": {"type": ["integer", "null"],
                             "description": "HELLO priority: 1 ok, 5 no link, 10 PFAIL, "
                                            "100 FAIL or leaving."},
                "ping_sent": INT, "pong_received": INT,
                "link": {"type": "string", "enum": ["connected", "disconnected"]},
            },
        },
    }
    jobs_reply = {"type": "object", "required": ["jobs"],
                  "properties": {"jobs": {"type": "array", "items": _ref("Job")}}}
    count_reply = {"type": "object", "required": ["count"], "properties": {"count": NONNEG}}
    paths = {
        "/queues/{queue}/jobs": {
            "parameters": [QUEUE],
            "post": _op(
                "Add a job, or a batch of jobs (a JSON array)", "ADDJOB",
                {"201": _json({"oneOf": [
                    {"type": "object", "required": ["id"], "properties": {
                        "id": {"type": "string"}}},
                    {"type": "object", "required": ["ids"], "properties": {
                        "ids": {"type": "array", "items": {"type": "string"}}}}]},
                    "Added: the job's id, or every id of the batch in order."),
                 "207": _json({"type": "object", "required": ["ids", "errors"], "properties": {
                     "ids": {"type": "array", "items": {"type": ["string", "null"]}},
                     "errors": {"type": "array", "items": {
                         "type": "object", "required": ["index", "error", "message"],
                         "properties": {"index": NONNEG, "error": {"type": "string"},
                                        "message": {"type": "string"}}}}}},
                     "A batch with failed items: `ids[i]` is null for each failed item, "
                     "described in `errors` (items are independent, as the commands of "
                     "a RESP pipeline).")},
                params=[_q(k, v, v["description"]) for k, v in ADD_OPTIONS.items()
                        if k not in BOOL_OPTIONS]
                + [_q(k, BOOL_Q, ADD_OPTIONS[k]["description"]) for k in BOOL_OPTIONS],
                body={"required": True, "content": {
                    "application/json": {"schema": {"oneOf": [
                        _ref("NewJob"),
                        {"type": "array", "items": {"oneOf": [_ref("NewJob"),
                                                              {"type": "string"}]}}]}},
                    "application/octet-stream": {"schema": {"type": "string",
                                                            "format": "binary"}}}},
                errors=(400, 401, 409, 413, 415, 503, 507)),
            "get": _op(
                "Take jobs (long poll)", "GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] WITHCOUNTERS "
                "FROM queue",
                {"200": {"description": "The jobs taken (an empty list after TIMEOUT or with "
                                        "NOHANG). With `Accept: application/octet-stream` "
                                        "and count 1: the body itself, id and counters in "
                                        "X-Job-* headers.",
                         "content": {"application/json": {"schema": jobs_reply},
                                     "application/octet-stream": {"schema": {
                                         "type": "string", "format": "binary"}}}},
                 "204": {"description": "No job (octet-stream only)."}},
                params=[_q("count", {"type": "integer", "minimum": 1},
                           "COUNT: jobs at most (default 1)."),
                        _q("timeout_ms", NONNEG,
                           "TIMEOUT: ms to wait when the queue is empty (0, the default: "
                           "for ever)."),
                        _q("nohang", BOOL_Q, "NOHANG: never wait."), ENCODING],
                errors=(400, 401, 406, 503)),
        },
        "/queues/{queue}/peek": {
            "parameters": [QUEUE],
            "get": _op("Look at queued jobs without taking them", "QPEEK queue count",
                       {"200": _json(jobs_reply, "Oldest first (newest first if count < 0).")},
                       params=[_q("count", INT, "Jobs at most (default 10)."), ENCODING],
                       tag="queues"),
        },
        "/queues/{queue}": {
            "parameters": [QUEUE],
            "get": _op("A queue's state", "QSTAT queue",
                       {"200": _json(_ref("QueueStat"), "The queue.")},
                       tag="queues", errors=(400, 401, 404, 503)),
        },
        "/queues/{queue}/pause": {
            "parameters": [QUEUE],
            "post": _op(
                "Pause or resume a queue", "PAUSE queue in|out|all|none [BCAST]",
                {"200": _json({"type": "object", "required": ["pause"], "properties": {
                    "pause": {"type": "string", "enum": ["none", "in", "out", "all"]}}},
                    "The queue's pause state after the call.")},
                params=[_q("state", {"type": "string", "enum": ["in", "out", "all", "none"]},
                           "The state (or in the body)."),
                        _q("bcast", BOOL_Q, "BCAST: the same on every node.")],
                body={"required": False, "content": {"application/json": {"schema": {
                    "type": "object", "additionalProperties": False, "properties": {
                        "state": {"type": "string", "enum": ["in", "out", "all", "none"]},
                        "bcast": {"type": "boolean"}}}}}},
                tag="queues"),
        },
        "/queues": {
            "get": _op(
                "Every queue of this node with its state", "QSCAN [cursor] [COUNT n] "
                "[BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r], then QSTAT of each",
                {"200": _json({"type": "object", "required": ["cursor", "queues"],
                               "properties": {"cursor": {"type": "string"},
                                              "queues": {"type": "array", "items": {
                                                  "anyOf": [_ref("QueueStat"), {
                                                      "type": "object", "required": ["name"],
                                                      "properties": {"name": {
                                                          "type": "string"}}}]}}}},
                              "The queues (all of them unless `cursor` is given: then "
                              "one QSCAN page; `cursor` is the next one, \"0\" at the end). "
                              "With `stats=false` only their names.")},
                params=[_q("cursor", {"type": "string", "pattern": "^[0-9]+$"},
                           "QSCAN cursor (pages); without it every queue (BUSYLOOP)."),
                        _q("count", {"type": "integer", "minimum": 1}, "QSCAN COUNT."),
                        _q("minlen", NONNEG, "MINLEN."), _q("maxlen", NONNEG, "MAXLEN."),
                        _q("importrate", NONNEG, "IMPORTRATE."),
                        _q("stats", BOOL_Q, "false: names only (default true).")],
                tag="queues"),
        },
        "/jobs/{id}": {
            "parameters": [JOB_ID],
            "get": _op("A job's fields", "SHOW id",
                       {"200": {"description": "The job (`Accept: application/octet-stream`:"
                                               " its body).",
                                "content": {"application/json": {"schema": _ref("JobDetail")},
                                            "application/octet-stream": {"schema": {
                                                "type": "string", "format": "binary"}}}}},
                       params=[ENCODING], errors=(400, 401, 404, 503)),
            "delete": _op("Forget a job on this node only", "DELJOB id",
                          {"200": _json({"type": "object", "required": ["deleted"],
                                         "properties": {"deleted": NONNEG}}, "Deleted.")},
                          errors=(400, 401, 404, 503)),
        },
        "/jobs/{id}/ack": {"parameters": [JOB_ID], "post": _op(
            "Acknowledge: delete the job everywhere", "ACKJOB id",
            {"200": _json(count_reply, "Jobs known and not yet acked (0 also starts a dummy "
                                       "ack in a cluster).")})},
        "/jobs/{id}/fastack": {"parameters": [JOB_ID], "post": _op(
            "Delete here and, best effort, elsewhere", "FASTACK id",
            {"200": _json(count_reply, "Jobs deleted here.")})},
        "/jobs/{id}/nack": {"parameters": [JOB_ID], "post": _op(
            "Queue the job again now (nacks + 1)", "NACK id",
            {"200": _json(count_reply, "Queued again (0: unknown here, or not active).")},
            errors=(400, 401, 503, 507))},
        "/jobs/{id}/working": {"parameters": [JOB_ID], "post": _op(
            "Postpone the next delivery by RETRY", "WORKING id",
            {"200": _json({"type": "object", "required": ["retry"],
                           "properties": {"retry": NONNEG}}, "RETRY seconds.")},
            errors=(400, 401, 404, 409, 503))},
        "/cluster": {"get": _op(
            "The nodes this node knows", "HELLO, CLUSTER NODES, CLUSTER INFO",
            {"200": _json({"type": "object", "required": ["myself", "nodes", "info"],
                           "properties": {"myself": {"type": "string"},
                                          "nodes": {"type": "array",
                                                    "items": _ref("ClusterNode")},
                                          "info": {"type": "object"}}},
                          "Every known node with its flags, link and HELLO priority, and "
                          "CLUSTER INFO's fields.")},
            tag="cluster")},
        "/metrics": {"get": {
            "summary": "Prometheus metrics", "tags": ["operations"],
            "responses": {"200": {"description": "Prometheus text exposition format.",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}},
                          "401": ERROR, "default": ERROR}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Disquette HTTP API", "version": VERSION,
                 "description": "Each endpoint runs the Disque command it names on the node "
                                "that serves it, with the same limits and errors. When "
                                "`requirepass` is set, send `Authorization: Bearer "
                                "<password>`."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"Error": _json(_ref("Error"), "An error: the RESP error code and "
                                                        "text.")},
            "securitySchemes": {"password": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"password": []}],
    }
