# Disquette build, test and run targets.  Everything the project needs is
# installed from here, at the versions constraints.txt pins; nothing by hand.
# See README.md.

SHELL := /bin/bash

PYTHON ?= $(shell command -v python3.11 || command -v python3)
# One venv, filled in two steps, a stamp file each: $(VENV)/.installed for what a
# node needs (`make run`, `make venv`: the SDK and the node, `pip install -e
# ./sdk -e .`), then $(VENV)/.test-installed for the `test` extra on top (`make
# test`: pytest, PySpark, pyarrow, playwright, the deploy checkers...: about
# 1.3 GB).
VENV ?= .venv
PY := $(VENV)/bin/python
# The distributions declare ranges (docs/operations.md#distributions); every
# install here takes the versions constraints.txt pins, the build requirements
# of the isolated builds included (pip reads PIP_CONSTRAINT there too, where it
# ignores -c).
CONSTRAINTS := $(CURDIR)/constraints.txt
PIP := PIP_CONSTRAINT=$(CONSTRAINTS) $(PY) -m pip --disable-pip-version-check

# pydisque needs redis<5, so it lives in its own venv.
PD_VENV := .venv-pydisque
PD_PY := $(PD_VENV)/bin/python
PD_PINS := redis==4.6.0 pydisque==0.1.5 six==1.17.0

# Debian packages the tests and benchmarks use, and the binaries that tell
# whether they are already there.
DEB_PKGS := redis-tools redis-server
DEB_BINS := redis-cli redis-benchmark redis-server
# Tools the deploy checks (tests/deploy/) run, as binary=package; a package is
# installed only when its binary is missing (kubectl may already come from a
# package that Debian's kubernetes-client would conflict with).
DEB_TOOLS := kubectl=kubernetes-client systemd-analyze=systemd shellcheck=shellcheck
# The HTTP dashboard tests (tests/http/) drive Debian's chromium; bench/bench_http.py
# loads the HTTP port with wrk.
DEB_TOOLS += chromium=chromium wrk=wrk
# tests/docs runs the docs' curl examples against the HTTP port.
DEB_TOOLS += curl=curl
# The chaos suite's clock faults preload libfaketime (package faketime brings it);
# its packet-loss fault drops packets with iptables in a network namespace of its
# own, loopback brought up with ip (chaos/netns.py).
DEB_TOOLS += faketime=faketime iptables=iptables ip=iproute2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# --dist loadgroup: tests marked @pytest.mark.xdist_group("name") (e.g. the ones
# sharing one multi-node cluster per module) run on one worker; the rest are
# spread as usual.
PYTEST_ARGS ?= -q -n 2 --dist loadgroup -ra --durations=10

# `make run` starts one node per port (default: a 3-node cluster); with several
# ports every node gets them all as cluster-seeds and they join on their own.
HOST ?= 127.0.0.1
PORTS ?= 7711 7712 7713
# Each node also serves its HTTP API and dashboard on port + HTTP_OFFSET (8711...).
HTTP_OFFSET ?= 1000
BROKER ?= $(PY) -m server
RUN_DIR ?= run

BENCH_ARGS ?=
# `make chaos` runs every chaos scenario (chaos/scenarios.py) against a real
# cluster behind the fault proxy, each for 300 s with 5 seeds (from a random
# first one, printed; about 6 minutes per scenario and seed), at about 420
# acknowledged adds/s (2 producers a node, 45 adds/s each, 5 a pipelined call):
# over 100k acknowledged jobs a run. The summary is chaos-runs/index.html.
# E.g. CHAOS_ARGS="--seed 42 --seconds 120 --seeds 1".
CHAOS_ARGS ?= --nodes 5 --seconds 300 --seeds 5 --producers 2 --rate 45 --batch 5

.PHONY: all venv test-venv deps deps-build pydisque-venv test run bench bench-compiled chaos dist clean distclean

all: venv

venv: $(VENV)/.installed

# The SDK (sdk/pyproject.toml, whose sources are the checkout's disquette/ and
# pyspark_*.py) goes in first: the node requires it. Then the node, with
# editable_mode=compat, which puts the checkout itself on sys.path (a .pth
# file), so top-level modules are visible to pkgutil: PySpark finds the
# `disquette` data source (pyspark_disquette.py) by listing them, and
# `disquette` is imported from the checkout (the SDK's own editable finder is
# only asked after sys.path).
# setup.py compiles the extensions in place (Cython: the .pyx; mypyc: the
# modules whose first line is "# compiled: mypyc...", typed against the modules
# they import): a changed one rebuilds them. (A module unmarked keeps its
# built .so, which still shadows it: `make clean venv`.) The compiled modules
# take the job record's constants (disquette/job_record.py) as literals.
EXT_SOURCES := setup.py disquette/job_record.py $(wildcard protocol/*.pyx protocol/*.pxd) $(shell awk \
  'FNR == 1 { if (index($$0, "# compiled: mypyc") == 1) print FILENAME; nextfile }' \
  $(wildcard protocol/*.py broker/*.py broker/commands/*.py cluster/*.py server/*.py server/http/*.py))

$(VENV)/.installed: pyproject.toml sdk/pyproject.toml disquette/_version.py constraints.txt \
    $(EXT_SOURCES) | deps-build
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# (the metadata the checkout held while one distribution was named disquette)
	rm -rf disquette.egg-info
	$(PIP) install -q -e ./sdk
	$(PIP) install -q -e . --config-settings editable_mode=compat
	@touch $@

test-venv: $(VENV)/.test-installed

$(VENV)/.test-installed: $(VENV)/.installed
	$(PIP) install -q -e '.[test]' --config-settings editable_mode=compat
	@touch $@

# The extensions' compiler and Python's headers, where missing.
deps-build:
	@pkgs=; command -v gcc >/dev/null 2>&1 || pkgs=gcc; \
	$(PYTHON) -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	  || pkgs="$$pkgs python3-dev"; \
	if [ -n "$$pkgs" ]; then \
	  echo "installing Debian packages: $$pkgs"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$pkgs; \
	fi

deps:
	@pkgs=; for b in $(DEB_BINS); do command -v $$b >/dev/null 2>&1 || pkgs="$(DEB_PKGS)"; done; \
	for t in $(DEB_TOOLS); do command -v $${t%%=*} >/dev/null 2>&1 || pkgs="$$pkgs $${t#*=}"; done; \
	if [ -n "$$pkgs" ]; then \
	  echo "installing Debian packages:$$pkgs"; \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$pkgs; \
	fi

pydisque-venv: $(PD_VENV)/.installed

$(PD_VENV)/.installed: Makefile
	@test -x $(PD_PY) || $(PYTHON) -m venv $(PD_VENV)
	$(PD_PY) -m pip --disable-pip-version-check install -q $(PD_PINS)
	$(PD_PY) -c 'from pydisque.client import Client'
	@touch $@

# The whole suite runs on the compiled build; then the unit and simulation tests
# again on the pure-Python modules (DISQUETTE_NO_EXTENSIONS=1), with a shorter
# sweep: tests/unit/test_builds_agree.py already compares 1,000 seeds' digests
# across the builds.
PURE_SIM_SEEDS ?= 200

test: deps test-venv pydisque-venv
	@rc=0; $(PY) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc = 0 ]; then \
	  echo "== the unit and simulation tests on the pure build (DISQUETTE_NO_EXTENSIONS=1)"; \
	  DISQUETTE_NO_EXTENSIONS=1 SIM_SEEDS=$(PURE_SIM_SEEDS) $(PY) -m pytest $(PYTEST_ARGS) \
	    --ignore=tests/unit/test_builds_agree.py tests/unit tests/sim || rc=$$?; \
	fi; \
	if [ -n "$${PYTEST_EXITCODE_FILE:-}" ]; then echo $$rc > "$$PYTEST_EXITCODE_FILE"; fi; \
	if [ $$rc != 0 ]; then echo "pytest exited with code $$rc" >&2; fi; \
	exit $$rc

# `make run`: a 3-node cluster on 7711-7713, joined, in the foreground: the
# nodes' logs are shown prefixed with their port (and appended to
# $(RUN_DIR)/<port>/stdout.log); Ctrl-C stops them all.  Any ports work, e.g.
# `make run PORTS="7711 7712 7713 7714 7715"`; with one port (`make run
# PORTS=7711`) a single node runs in the foreground.
run: venv
	@set -u; ports=($(PORTS)); n=$${#ports[@]}; \
	if [ $$n = 1 ]; then \
	  p=$${ports[0]}; mkdir -p $(RUN_DIR)/$$p; \
	  echo "Disquette node on $(HOST):$$p — try: redis-cli -p $$p PING — dashboard: http://$(HOST):$$((p + $(HTTP_OFFSET)))/"; \
	  exec $(BROKER) --port $$p --http-port $$((p + $(HTTP_OFFSET))) --dir $(RUN_DIR)/$$p; \
	fi; \
	call() { $(PY) -c "import socket,sys; s=socket.create_connection(('$(HOST)',int(sys.argv[1])),1); s.sendall(sys.argv[2].encode()+b'\r\n'); f=s.makefile('rb'); h=f.readline(); print((f.read(int(h[1:])) if h[:1]==b'\$$' else h).decode().strip())" "$$@" 2>/dev/null; }; \
	pids=(); trap 'kill $${pids[@]} 2>/dev/null; wait' EXIT; trap 'exit 130' INT TERM; \
	seeds=$$(printf '$(HOST):%s,' "$${ports[@]}"); seeds=$${seeds%,}; \
	for p in "$${ports[@]}"; do \
	  mkdir -p $(RUN_DIR)/$$p; log=$(RUN_DIR)/$$p/stdout.log; touch $$log; off=$$(stat -c %s $$log); \
	  $(BROKER) --port $$p --http-port $$((p + $(HTTP_OFFSET))) --dir $(RUN_DIR)/$$p --cluster-seeds $$seeds >>$$log 2>&1 & pid=$$!; pids+=($$pid); \
	  tail -c +$$((off + 1)) -F --pid=$$pid $$log 2>/dev/null | sed -u "s/^/[$$p] /" & \
	done; \
	echo "joining through cluster-seeds $$seeds"; \
	for i in $$(seq 200); do \
	  ok=1; for p in "$${ports[@]}"; do \
	    case "$$(call $$p 'CLUSTER INFO' | tr -d '\r')" in *"cluster_known_nodes:$$n"*"cluster_reachable_nodes:$$((n - 1))"*) ;; *) ok=0;; esac; \
	  done; \
	  [ $$ok = 1 ] && break; sleep 0.1; \
	done; \
	if [ $$ok = 1 ]; then echo "Disquette cluster of $$n nodes on $(HOST): ports $(PORTS) — try: redis-cli -p $${ports[0]} HELLO  (Ctrl-C stops all)"; \
	  for p in "$${ports[@]}"; do echo "  dashboard of $$p: http://$(HOST):$$((p + $(HTTP_OFFSET)))/"; done; \
	else echo "warning: the nodes did not all see each other within 20 s (see $(RUN_DIR)/<port>/stdout.log)" >&2; fi; \
	wait

# The benchmarks compare with pydisque and PySpark, from the test extra, and
# with Celery, dramatiq and RQ, from the bench extra (bench/bench_libraries.py,
# which takes its own arguments: LIBS_ARGS="--jobs 20000").
LIBS_ARGS ?=
bench: deps test-venv $(VENV)/.bench-installed
	$(PY) bench/bench_single.py $(BENCH_ARGS)
	$(PY) bench/bench_cluster.py $(BENCH_ARGS)
	$(PY) bench/bench_cycle.py $(BENCH_ARGS)
	$(PY) bench/bench_sdk.py $(BENCH_ARGS)
	$(PY) bench/bench_libraries.py $(LIBS_ARGS)
	$(PY) bench/bench_http.py $(BENCH_ARGS)

# The compiled-core experiment (issue 17): Cython and mypyc builds of the same
# tree against the pure-Python one; installs the `bench` extra first.
bench-compiled: test-venv $(VENV)/.bench-installed
	$(PY) bench/bench_compiled.py $(BENCH_ARGS)

$(VENV)/.bench-installed: $(VENV)/.test-installed
	$(PIP) install -q -e '.[test,bench]' --config-settings editable_mode=compat
	@touch $@

# The chaos suite drives its proxy with toxiproxy-python, from the test extra.
chaos: test-venv
	$(PY) -m chaos run --scenario all $(CHAOS_ARGS)

# `make dist`: both distributions, each an sdist and a wheel, in dist/
# (docs/operations.md#distributions): disquette-server (the node, compiled:
# a wheel for this platform and Python) and disquette (the SDK, pure Python).
dist: $(VENV)/.installed
	$(PIP) install -q build
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m build --outdir dist sdk

clean:
	rm -rf $(RUN_DIR) chaos-runs .pytest_cache .hypothesis build dist *.egg-info sdk/build sdk/*.egg-info
	find protocol broker cluster server \( -name '*.so' -o -name '*.c' \) -delete
	rm -f *__mypyc.*.so
	find . -path ./$(VENV) -prune -o -path ./$(PD_VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(PD_VENV)
