"""disquette-check-aof FILE [--fix [--force]]: check (and repair) an append-only file;
disquette-check-aof --import-disque DISQUE_AOF [--disque-nodes NODES_CONF] [--out FILE]:
write a Disque 1.0-rc1 AOF again as a Disquette one (server/disque_import.py).

Reads the whole file, verifies the header and every record's checksums, decodes
every record, and reports what it holds. Exit status: 0 when the file is valid
(or was just repaired), 1 when it has a torn tail (fixable with --fix), 2 when it
is corrupt before its end (the node refuses to start; --fix --force cuts the file
at the first bad record, losing everything after it), 3 on usage or I/O errors.

A torn tail is what a crash in the middle of a write leaves; the node itself
truncates it at start when ``aof-load-truncated yes`` (the default).

The import exits with the same codes: 1 when the Disque AOF ends in the
middle of a command (Disque's own ``disque-check-aof --fix`` cuts it), 2 when
it is damaged before its end (both with the byte offset), 3 on usage or I/O
errors (an output file that exists is not overwritten).

``--to-version 2`` rewrites a valid file as format version 2, which the
previous release reads (a downgrade: docs/operations.md, Upgrades): version 3
differs only by its job records' field order, so every file converts.
"""

from __future__ import annotations

import argparse
import os
import sys

from broker import aof_format as fmt
from disquette import aof_codec as codec
from protocol import disque_aof
from server import disque_import

CHUNK = 1 << 20


def _chunks(f):
    while True:
        data = f.read(CHUNK)
        if not data:
            return
        yield data


def _truncate(path: str, offset: int) -> None:
    if offset < fmt.FILE_HEADER_SIZE:
        with open(path, "wb") as f:
            f.write(fmt.file_header())
            f.flush()
            os.fsync(f.fileno())
        return
    with open(path, "r+b") as f:
        f.truncate(offset)
        f.flush()
        os.fsync(f.fileno())


def _values(col):
    """A decoded column as a list (or None, or an all-zero column's int 0)."""
    return col if col is None or isinstance(col, int) else list(col)


def to_version(path: str, version: int) -> int:
    """Rewrite the valid AOF at ``path`` in format ``version`` (2: its C and
    c job records as version 2's J and j, by the codec's encoders; the other
    records, version 2's already, as they are), atomically. The job records
    rewritten."""
    rewritten = 0
    tmp = f"{path}.to-version-{version}"
    scanner = codec.Scanner()
    with open(path, "rb") as src, open(tmp, "wb") as out:
        out.write(codec.file_header(version))
        for data in _chunks(src):
            for _, payload in scanner.feed(data):
                kind = payload[0]
                if kind == codec.REC_JOBS or kind == codec.REC_JOB_ROWS:
                    cols = [_values(c) for c in codec.decode_jobs(payload)]
                    n = len(cols[0])
                    rows = [list(row) for row in zip(*(
                        [c] * n if c is None or isinstance(c, int) else c for c in cols))]
                    encode = (codec.encode_job_columns if kind == codec.REC_JOBS
                              else codec.encode_job_rows)
                    out.write(encode(rows, version))
                    rewritten += 1
                else:
                    out.write(codec.encode_record(bytes(payload)))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return rewritten


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="disquette-check-aof",
        description="Check a Disquette append-only file; --fix truncates a torn last record.")
    p.add_argument("file", nargs="?", help="the AOF file (e.g. disque.aof in the node's dir)")
    p.add_argument("--fix", action="store_true",
                   help="truncate a torn last record (what a crash mid-write leaves)")
    p.add_argument("--force", action="store_true",
                   help="with --fix: also cut a file corrupt before its end at the first "
                        "bad record (everything after it is lost)")
    p.add_argument("--import-disque", metavar="DISQUE_AOF",
                   help="write this Disque 1.0-rc1 AOF as a Disquette AOF (--out)")
    p.add_argument("--disque-nodes", metavar="NODES_CONF",
                   help="with --import-disque: the Disque node's nodes.conf; the import "
                        "keeps its node id and peers (nodes.conf written beside --out)")
    p.add_argument("--out", metavar="FILE", default="disque.aof",
                   help="with --import-disque: the Disquette AOF to write (default "
                        "disque.aof); never overwritten")
    p.add_argument("--to-version", type=int, choices=[2],
                   help="rewrite a valid file as format version 2, which the previous "
                        "release reads (stop the node first)")
    args = p.parse_args(argv)
    if args.import_disque is not None:
        if args.file is not None or args.fix:
            p.error("--import-disque takes no FILE and no --fix")
        return import_disque(args.import_disque, args.out, args.disque_nodes)
    if args.file is None:
        p.error("a FILE to check, or --import-disque DISQUE_AOF")
    out = sys.stdout
    try:
        with open(args.file, "rb") as f:
            # The file's size, not what the check read: it stops at the damage.
            size = os.fstat(f.fileno()).st_size
            head = f.read(16)
            f.seek(0)
            s = fmt.check_chunks(_chunks(f))
    except OSError as e:
        print(f"Cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 3

    version = s.version if s.version is not None else "?"
    print(f"AOF {args.file}: {size} bytes, format version {version}", file=out)
    counts = ", ".join(f"{name} {s.records[k]}" for k, name in fmt.RECORD_NAMES.items())
    print(f"records: {sum(s.records.values())} ({counts}); job copies {s.jobs}", file=out)
    print(f"jobs alive at the end of the valid part: {s.live}", file=out)

    if s.corrupt is not None:
        e = s.corrupt
        print(f"AOF is corrupt: {e.reason} at byte offset {e.offset}", file=out)
        if isinstance(e, fmt.BadHeader):
            print(disque_import.disque_aof_hint(args.file, head)
                  or "This is not a file this version of Disquette can load.", file=out)
            return 2
        lost = size - e.offset
        if args.fix and args.force:
            _truncate(args.file, e.offset)
            print(f"Truncated the AOF at byte offset {e.offset} ({lost} bytes discarded).",
                  file=out)
            return 0
        print(f"This is not a torn tail: the node will refuse to load it. --fix --force "
              f"would cut the file at byte offset {e.offset}, discarding {lost} bytes.",
              file=out)
        return 2
    if s.torn is not None:
        t = s.torn
        print(f"AOF has a {t}", file=out)
        if args.fix:
            _truncate(args.file, t.offset)
            print(f"Successfully truncated the AOF to {max(t.offset, fmt.FILE_HEADER_SIZE)} "
                  f"bytes.", file=out)
            return 0
        print("Run with --fix to truncate it.", file=out)
        return 1
    print("AOF is valid", file=out)
    if args.to_version is not None:
        if s.version == args.to_version:
            print(f"It is format version {args.to_version} already.", file=out)
            return 0
        try:
            rewritten = to_version(args.file, args.to_version)
        except OSError as e:
            print(f"Cannot rewrite {args.file}: {e.strerror}", file=sys.stderr)
            return 3
        print(f"Rewrote the AOF as format version {args.to_version} ({rewritten} job records "
              f"in version {args.to_version}'s field order): a node of the previous release "
              "loads it.", file=out)
    return 0


def import_disque(path: str, out_path: str, nodes_path: str | None) -> int:
    """--import-disque: see the module's docstring for the exit codes."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        nodes_text = None
        if nodes_path is not None:
            with open(nodes_path, encoding="utf-8") as f:
                nodes_text = f.read()
    except OSError as e:
        print(f"Cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 3
    print(f"Disque AOF {path}: {len(data)} bytes")
    nodes = None
    if nodes_text is not None:
        try:
            nodes = disque_import.read_disque_nodes(nodes_text)
        except ValueError as e:
            print(f"Cannot import {nodes_path}: {e}", file=sys.stderr)
            return 3
    try:
        imported = disque_import.convert(data, nodes)
    except disque_aof.DisqueAOFError as e:
        if e.truncated:
            print(f"Disque AOF is truncated: {e.why} at byte offset {e.offset}. Nothing "
                  f"written: cut it there first (Disque's disque-check-aof --fix does).")
            return 1
        print(f"Disque AOF is damaged: {e.why} at byte offset {e.offset}. Nothing written.")
        return 2
    nodes_out = os.path.join(os.path.dirname(out_path), "nodes.conf")
    try:
        if nodes is not None and os.path.lexists(nodes_out):
            raise FileExistsError(f"{nodes_out} exists: move it away first")
        disque_import.write_new(out_path, imported.aof)
        if nodes is not None:
            disque_import.write_new(nodes_out, nodes.text.encode())
    except OSError as e:
        print(f"Cannot write: {e}", file=sys.stderr)
        return 3
    print(f"Wrote {out_path}: {len(imported.aof)} bytes, format version {fmt.VERSION}, "
          f"{len(imported.jobs)} jobs")
    if nodes is not None:
        print(f"Wrote {nodes_out}: node id {nodes.myself}, {len(nodes.known) - 1} peers")
    else:
        print("No --disque-nodes: the node that loads it takes a new id and holds "
              "every job alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
