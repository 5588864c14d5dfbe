"""Node configuration: the value of every directive, loaded from disque.conf
and the command line, read and changed by CONFIG GET/SET, written back by
CONFIG REWRITE.

The directives themselves (name, kind, default, run-time settable, doc) are
declared once, in broker/directives.py; Config is those typed fields plus
what reads and changes them.  disque.conf's syntax is broker/config_file.py's,
the value kinds broker/config_kinds.py's.

The module is pure: nothing here touches sockets, the clock or the file
system; ``Config.from_argv`` and ``Config.load_file`` are handed the reader
of the config file (and of the files it includes) by the process
(server/main.py ``read_config_file``).  Reactions to a change (the cluster's
node timeout, starting the AOF, ``chdir`` for ``dir``...) belong to whoever
owns what changes: CONFIG SET hands ``Config.set_many`` a ``changed``
callback (``Node.config_changed``), called with each changed name, which may
refuse the change.
"""

from __future__ import annotations

import copy
import os.path
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.config_file import (
    REWRITE_SIGNATURE,
    ConfigError,
    RenameCommand,
    config_line,
    directive_lines,
    fatal_error,
    quote_arg,
    split_args,
)
from broker.config_file import rewrite as rewrite_text
from broker.config_kinds import OutputBufferLimit, Seed, format_memory, parse_memory
from broker.directives import DEFAULT_PIDFILE, DIRECTIVES, AppendFsync, Directive, Directives
from broker.glob import stringmatch

# What other modules import from here; most live in the modules named above.
__all__ = [
    "AppendFsync",
    "Config",
    "ConfigError",
    "Directive",
    "DIRECTIVES",
    "OutputBufferLimit",
    "RenameCommand",
    "Seed",
    "DEFAULT_PIDFILE",
    "REWRITE_SIGNATURE",
    "parse_memory",
    "format_memory",
    "split_args",
    "quote_arg",
    "stringmatch",
]


def _nobody(name: str) -> None:
    """The default ``changed`` of Config.set: no one applies the change."""


@dataclass(kw_only=True, eq=False, repr=False)
class Config(Directives):
    """Every directive as a plain typed attribute (``-`` spelled ``_``).

    ``Config()`` holds the defaults; ``Config(port=7712, appendonly=True)``
    overrides typed values directly (for tests and tools; no validation beyond
    the name).  Assigning attributes directly is allowed too; ``set()`` is the
    validating path used for CONFIG SET, files and the command line.
    """

    config_file: str | None = None
    # `rename-command old new` lines, in order: not a directive of the table
    # (a config-file-only edit of the command table, as in Redis, kept out of
    # CONFIG GET and left as written by CONFIG REWRITE); the process applies
    # them to the command table at start.
    rename_commands: list[RenameCommand] = field(default_factory=list)

    # -- building -----------------------------------------------------------

    @classmethod
    def from_argv(cls, argv: list[str], cwd: str, read: Callable[[str], str]) -> "Config":
        """redis-server style: ``[CONFIG_FILE] [--directive arg... ]...``.

        ``argv`` excludes the program name.  Options are applied after the
        file, so they win.  The file path is made absolute against ``cwd`` so
        CONFIG REWRITE still finds it after the server chdir'ed into ``dir``;
        ``read(path) -> text`` reads it (and its includes), raising ConfigError.
        """
        config = cls()
        rest = list(argv)
        if rest and not rest[0].startswith("--"):
            path = rest.pop(0)
            if path == "-":
                raise ConfigError("Reading the configuration from standard input "
                                  "('-') is not supported")
            config.load_file(path, cwd=cwd, read=read)
        options: list[list[str]] = []
        for arg in rest:
            if arg.startswith("--") and len(arg) > 2:
                options.append([arg[2:]])
            elif options:
                options[-1].append(arg)
            else:
                raise ConfigError(f"Unexpected argument '{arg}': options are "
                                  "--directive value ..., after an optional config file")
        for option in options:
            config._apply_args(option, where=f"the command line option '--{option[0]}'",
                               lineno=None)
        return config

    def load_file(self, path: str, *, cwd: str, read: Callable[[str], str]) -> None:
        """Apply a disque.conf (``read(path) -> text``; includes are relative
        to ``cwd`` too) and remember its absolute path for CONFIG REWRITE."""
        path = os.path.normpath(os.path.join(cwd, path))
        text = read(path)
        self.config_file = path
        self.load_text(text, include=lambda p: read(os.path.join(cwd, p)))

    def load_text(self, text: str, *, include: Callable[[str], str] | None = None) -> None:
        """Apply disque.conf text on top of the current values.

        ``include path`` lines are followed only when an ``include`` reader is
        given (load_file gives one); otherwise they are refused, since a pure
        parser cannot read files.
        """
        for lineno, line, args in directive_lines(text, include):
            self._apply_args(args, where=None, lineno=lineno, line=line)

    def _apply_args(self, args: list[str], *, where: str | None,
                    lineno: int | None, line: str | None = None) -> None:
        name = args[0].lower()
        values = args[1:]
        if line is None:
            line = config_line(name, values)
        if name == "rename-command" and len(values) == 2:
            self.rename_commands.append(
                RenameCommand(values[0], values[1], lineno, line, where))
            return
        d = DIRECTIVES.get(name)
        ok_arity = d is not None and (len(values) == 1 if d.kind.nargs == "1" else len(values) >= 1)
        if not ok_arity:
            raise fatal_error("Bad directive or wrong number of arguments",
                              lineno, line, where)
        assert d is not None
        try:
            value = d.kind.parse(" ".join(values), getattr(self, d.attr))
        except ValueError as e:
            raise fatal_error(str(e), lineno, line, where) from None
        setattr(self, d.attr, value)

    # -- CONFIG GET / SET ------------------------------------------------------

    @staticmethod
    def _directive(name: str) -> Directive:
        d = DIRECTIVES.get(name.lower())
        if d is None:
            raise ConfigError(f"Unsupported CONFIG parameter: {name}")
        return d

    def set(self, name: str, value: str, *, at_runtime: bool = True,
            changed: Callable[[str], None] = _nobody) -> None:
        """CONFIG SET: validate, convert, store, then call ``changed(name)``
        (with the directive's canonical name) so that whoever owns what
        changes applies it; its raising ConfigError refuses the change (the
        old value is put back). A new cluster-auth-pass keeps the one it
        replaces in cluster-auth-pass-previous (the rotation window: both are
        accepted until that is set to "")."""
        d = self._directive(name)
        if at_runtime and not d.runtime:
            raise ConfigError(f"Unsupported CONFIG parameter: {name} (it can't be "
                              "changed at run time: set it in the config file and restart)")
        try:
            new = d.kind.parse(value, getattr(self, d.attr))
        except ValueError as e:
            raise ConfigError(f"Invalid argument '{value}' for CONFIG SET '{name}' - {e}",
                              reason=str(e)) from None
        old = getattr(self, d.attr)
        old_previous = self.cluster_auth_pass_previous
        setattr(self, d.attr, new)
        if d.name == "cluster-auth-pass" and old and new and old != new:
            self.cluster_auth_pass_previous = old
        try:
            changed(d.name)
        except ConfigError:
            setattr(self, d.attr, old)
            self.cluster_auth_pass_previous = old_previous
            raise

    def set_many(self, pairs: list[tuple[str, str]],
                 changed: Callable[[str], None] = _nobody) -> None:
        """CONFIG SET of several directives, all or nothing (as Redis 7): every
        value is checked and stored, then ``changed`` hears each name, so
        directives that go together (a new tls-cert-file and its tls-key-file)
        are applied together. If a value or ``changed`` refuses, every
        directive gets its old value back and ``changed`` hears again each
        name it had already heard, to apply the old value."""
        if len(pairs) == 1:
            self.set(*pairs[0], changed=changed)
            return
        names = list(dict.fromkeys(self._directive(n).name for n, _ in pairs))
        saved = {name: getattr(self, DIRECTIVES[name].attr) for name in names}
        saved_previous = self.cluster_auth_pass_previous
        told: list[str] = []
        try:
            for name, value in pairs:
                self.set(name, value)
            for name in names:
                told.append(name)
                changed(name)
        except ConfigError:
            for name, value in saved.items():
                setattr(self, DIRECTIVES[name].attr, value)
            self.cluster_auth_pass_previous = saved_previous
            for name in told:
                try:
                    changed(name)
                except ConfigError:
                    pass
            raise

    def render(self, name: str) -> str:
        """A directive's value as CONFIG GET shows it."""
        d = self._directive(name)
        return d.kind.render(getattr(self, d.attr))

    def get(self, pattern: str) -> list[tuple[str, str]]:
        """CONFIG GET: (name, value) for each directive matching the glob, table order."""
        return [(d.name, d.kind.render(getattr(self, d.attr)))
                for d in DIRECTIVES.values() if stringmatch(pattern, d.name)]

    # -- CONFIG REWRITE ------------------------------------------------------

    def rewrite(self, old_text: str) -> str:
        """The new content of the config file, the way Redis' CONFIG REWRITE
        does it (broker/config_file.py's rewrite: comments and unknown lines
        stay, a value equal to the default is not appended)."""
        wanted = []
        for d in DIRECTIVES.values():
            defaults = dict(d.kind.file_lines(d.default))
            wanted += [(d.name, key, words, words == defaults.get(key))
                       for key, words in d.kind.file_lines(getattr(self, d.attr))]
        return rewrite_text(old_text, wanted, _directive_line_key)

    # -- conveniences --------------------------------------------------------

    @property
    def client_port(self) -> int:
        """The client port a node is known by: ``port``, or ``tls-port`` when
        plaintext is off (port 0)."""
        return self.port or self.tls_port

    @property
    def effective_bus_port(self) -> int:
        """The port the cluster bus listens on (cluster-bus-port 0 = the client
        port + 10000, the client port being tls-port when port is 0)."""
        return self.cluster_bus_port or self.client_port + 10000

    def cluster_secrets(self) -> list[str]:
        """The bus secrets accepted now, current first: none when
        cluster-auth-pass is empty (no bus authentication)."""
        if not self.cluster_auth_pass:
            return []
        prev = self.cluster_auth_pass_previous
        return [self.cluster_auth_pass] + ([prev] if prev and prev != self.cluster_auth_pass
                                           else [])

    def rename_error(self, entry: RenameCommand, reason: str) -> ConfigError:
        """The fatal config error for a rename-command line the command table
        refuses (Redis' texts: "No such command in rename-command"...)."""
        return fatal_error(reason, entry.lineno, entry.line, entry.where)

    def as_dict(self) -> dict[str, Any]:
        """Directive name -> typed value, table order."""
        return {d.name: getattr(self, d.attr) for d in DIRECTIVES.values()}

    def copy(self) -> "Config":
        """An independent copy: the values, config_file and rename_commands."""
        other = type(self)()
        for d in DIRECTIVES.values():
            setattr(other, d.attr, copy.deepcopy(getattr(self, d.attr)))
        other.config_file = self.config_file
        other.rename_commands = list(self.rename_commands)
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        changed = ", ".join(f"{d.attr}={getattr(self, d.attr)!r}" for d in DIRECTIVES.values()
                            if getattr(self, d.attr) != d.default)
        return f"Config({changed})"


def _directive_line_key(args: list[str]) -> tuple[str, Any] | None:
    # Which directive a line of the file sets, and for which key (rewrite's question).
    d = DIRECTIVES.get(args[0].lower())
    return None if d is None else (d.name, d.kind.line_key(args[1:]))
