"""disquette-check-aof FILE [--fix [--force]]: check (and repair) an append-only file.

Reads the whole file, verifies the header and every record's checksums, decodes
every record, and reports what it holds. Exit status: 0 when the file is valid
(or was just repaired), 1 when it has a torn tail (fixable with --fix), 2 when it
is corrupt before its end (the node refuses to start; --fix --force cuts the file
at the first bad record, losing everything after it), 3 on usage or I/O errors.

A torn tail is what a crash in the middle of a write leaves; the node itself
truncates it at start when ``aof-load-truncated yes`` (the default).
"""

from __future__ import annotations

import argparse
import os
import sys

from broker import aof_format as fmt

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="disquette-check-aof",
        description="Check a Disquette append-only file; --fix truncates a torn last record.")
    p.add_argument("file", help="the AOF file (e.g. disque.aof in the node's dir)")
    p.add_argument("--fix", action="store_true",
                   help="truncate a torn last record (what a crash mid-write leaves)")
    p.add_argument("--force", action="store_true",
                   help="with --fix: also cut a file corrupt before its end at the first "
                        "bad record (everything after it is lost)")
    args = p.parse_args(argv)
    out = sys.stdout
    try:
        with open(args.file, "rb") as f:
            # The file's size, not what the check read: it stops at the damage.
            size = os.fstat(f.fileno()).st_size
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
            print("This is not a file this version of Disquette can load.", file=out)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
