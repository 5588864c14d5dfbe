# Disquette build, test and run targets.  Everything the project needs is
# installed from here (pinned); nothing by hand.  See README.md.

SHELL := /bin/bash

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check

# pydisque needs redis<5, so it lives in its own venv.
PD_VENV := .venv-pydisque
PD_PY := $(PD_VENV)/bin/python
PD_PINS := redis==4.6.0 pydisque==0.1.5 six==1.17.0

# Debian packages the tests and benchmarks use, and the binaries that tell
# whether they are already there.
DEB_PKGS := redis-tools redis-server
DEB_BINS := redis-cli redis-benchmark redis-server
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

PYTEST_ARGS ?= -q -n 2 -ra --durations=10

# `make run` starts one node per port; with several ports the others MEET the first.
HOST ?= 127.0.0.1
PORTS ?= 7711
BROKER ?= $(PY) -m broker
RUN_DIR ?= run

BENCH_ARGS ?=

.PHONY: all venv deps pydisque-venv test run bench clean distclean

all: venv

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[test]'
	@touch $@

deps:
	@missing=0; for b in $(DEB_BINS); do command -v $$b >/dev/null 2>&1 || missing=1; done; \
	if [ $$missing = 1 ]; then \
	  echo "installing Debian packages: $(DEB_PKGS)"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(DEB_PKGS); \
	fi

pydisque-venv: $(PD_VENV)/.installed

$(PD_VENV)/.installed: Makefile
	@test -x $(PD_PY) || $(PYTHON) -m venv $(PD_VENV)
	$(PD_PY) -m pip --disable-pip-version-check install -q $(PD_PINS)
	$(PD_PY) -c 'from pydisque.client import Client'
	@touch $@

test: deps venv pydisque-venv
	@rc=0; $(PY) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ -n "$${PYTEST_EXITCODE_FILE:-}" ]; then echo $$rc > "$$PYTEST_EXITCODE_FILE"; fi; \
	if [ $$rc != 0 ]; then echo "pytest exited with code $$rc" >&2; fi; \
	exit $$rc

# One port: the node runs in the foreground.  Several ports, e.g.
# `make run PORTS="7711 7712 7713"`: all run in the background (logs in
# $(RUN_DIR)/<port>/stdout.log), the others MEET the first, Ctrl-C stops all.
run: venv
	@set -u; ports=($(PORTS)); \
	if [ $${#ports[@]} = 1 ]; then \
	  p=$${ports[0]}; mkdir -p $(RUN_DIR)/$$p; \
	  echo "Disquette node on $(HOST):$$p — try: redis-cli -p $$p PING"; \
	  exec $(BROKER) --port $$p --dir $(RUN_DIR)/$$p; \
	fi; \
	pids=(); trap 'kill $${pids[@]} 2>/dev/null; wait' EXIT; trap 'exit 130' INT TERM; \
	for p in "$${ports[@]}"; do \
	  mkdir -p $(RUN_DIR)/$$p; \
	  $(BROKER) --port $$p --dir $(RUN_DIR)/$$p >>$(RUN_DIR)/$$p/stdout.log 2>&1 & pids+=($$!); \
	done; \
	for p in "$${ports[@]}"; do \
	  for i in $$(seq 100); do \
	    $(PY) -c "import socket,sys; s=socket.create_connection(('$(HOST)',$$p),0.2); s.sendall(b'PING\r\n'); sys.exit(0 if s.recv(64).startswith(b'+PONG') else 1)" 2>/dev/null && break; \
	    sleep 0.1; \
	  done; \
	done; \
	for p in "$${ports[@]:1}"; do \
	  $(PY) -c "import socket; s=socket.create_connection(('$(HOST)',$$p),1); s.sendall(b'CLUSTER MEET $(HOST) $${ports[0]}\r\n'); print('$$p: CLUSTER MEET ->', s.recv(256).decode().strip())" || true; \
	done; \
	echo "Disquette cluster on $(HOST): ports $(PORTS) — try: redis-cli -p $${ports[0]} HELLO  (Ctrl-C stops all)"; \
	wait

bench: deps venv
	$(PY) bench/bench_single.py $(BENCH_ARGS)

clean:
	rm -rf $(RUN_DIR) .pytest_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -path ./$(PD_VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(PD_VENV)
