#!/bin/sh
# Start script of the Disquette container image (installed as
# /usr/local/bin/disquette-entrypoint). Turns DISQUETTE_* environment variables
# into disquette-server options, then execs the server, so that it is PID 1 and
# gets SIGTERM itself (it flushes the AOF and saves nodes.conf on the way out).
#
#   disquette-entrypoint [CONFIG_FILE] [--directive value ...]
#   disquette-entrypoint COMMAND [ARG ...]     e.g. disquette-check-aof /data/disque.aof
#
# The server reads CONFIG_FILE (or $DISQUETTE_CONFIG), then the options built
# from the environment, then the options given here: the last one wins. An
# unset or empty variable passes nothing, so the file (or the default) applies.
set -eu

# variable -> directive. Keep docs/operations.md ("Deploying") in step with this list.
VARS='
DISQUETTE_PORT port
DISQUETTE_BIND bind
DISQUETTE_DIR dir
DISQUETTE_SEEDS cluster-seeds
DISQUETTE_BUS_PORT cluster-bus-port
DISQUETTE_ANNOUNCE_IP cluster-announce-ip
DISQUETTE_ANNOUNCE_PORT cluster-announce-port
DISQUETTE_ANNOUNCE_BUS_PORT cluster-announce-bus-port
DISQUETTE_NODE_TIMEOUT cluster-node-timeout
DISQUETTE_APPENDONLY appendonly
DISQUETTE_APPENDFSYNC appendfsync
DISQUETTE_MAXMEMORY maxmemory
DISQUETTE_LOGLEVEL loglevel
DISQUETTE_REQUIREPASS requirepass
DISQUETTE_PROTECTED_MODE protected-mode
DISQUETTE_CLUSTER_AUTH_PASS cluster-auth-pass
DISQUETTE_TLS_PORT tls-port
DISQUETTE_TLS_CERT_FILE tls-cert-file
DISQUETTE_TLS_KEY_FILE tls-key-file
DISQUETTE_TLS_KEY_FILE_PASS tls-key-file-pass
DISQUETTE_TLS_CA_CERT_FILE tls-ca-cert-file
DISQUETTE_TLS_CA_CERT_DIR tls-ca-cert-dir
DISQUETTE_TLS_AUTH_CLIENTS tls-auth-clients
DISQUETTE_TLS_CLUSTER tls-cluster
'

# A first argument that is neither an option nor a config file is a command
# to run instead of the server (a shell, disquette-check-aof...).
config=${DISQUETTE_CONFIG:-}
if [ $# -gt 0 ]; then
    case $1 in
        -*) ;;
        *.conf) config=$1; shift ;;
        *) if [ -f "$1" ]; then config=$1; shift; else exec "$@"; fi ;;
    esac
fi

# Append the options from the environment after the given ones, then rotate
# the given ones ($given of them) to the end so they come last and win.
given=$#
while read -r var directive; do
    [ -n "$var" ] || continue
    eval "value=\${$var:-}"
    [ -n "$value" ] || continue
    if [ "$directive" = bind ]; then
        # bind takes several addresses: one argument each.
        set -f
        # shellcheck disable=SC2086
        set -- "$@" --bind $value
        set +f
    else
        set -- "$@" "--$directive" "$value"
    fi
done <<EOF
$VARS
EOF
while [ "$given" -gt 0 ]; do
    set -- "$@" "$1"
    shift
    given=$((given - 1))
done

if [ -n "$config" ]; then
    exec disquette-server "$config" "$@"
fi
exec disquette-server "$@"
