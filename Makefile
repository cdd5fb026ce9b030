# fabricwatch: the README's two commands (`make demo`, `make test`) and their set-up.
#
# Every target sets up what it needs and is quick when that is already done: the virtualenv is
# rebuilt only when pyproject.toml changes, the Kafka jars only when deploy/kafka/pom.xml does
# (Maven keeps what it downloaded in ~/.m2). Services are started by the demo and by the test
# fixtures themselves, on their own ports, and stopped when they end.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
MAKEFLAGS += --no-builtin-rules

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.fabricwatch-installed
JARS := deploy/kafka/libs/.complete
# Prometheus Alertmanager, built from its Go module into the ignored .gocache (the alert tests
# and the demo run it); built once per machine: about 4 min cold on 2 cores, seconds warm
ALERTMANAGER := .gocache/bin/alertmanager-v0.35.0
# Prometheus and promtool, from their Go module the same way (the alert-rule tests and the
# scrape-versus-stream benchmark run them): about 3.5 min cold on 2 cores
PROMETHEUS := .gocache/bin/promtool-v0.316.0
# The test command's logs of what runs beside its main session (ignored with .fabricwatch)
TEST_LOGS := .fabricwatch/test-logs
LAB_PACKAGES := ibsim-utils opensm infiniband-diags
# The lab tools count as present when this command is on PATH.
IBSIM ?= ibsim
# Debian's Chromium: the report's browser test opens the HTML report in it, headless.
BROWSER_PACKAGES := chromium
CHROMIUM ?= chromium

.PHONY: setup test lint demo stack-up stack-down stack-status lab-deps browser-deps clean

## setup: virtualenv (Python 3.11) with the pinned dependencies, the Kafka broker's jars,
## Alertmanager, Prometheus and promtool (without Go it warns: their tests then fail in CI, are
## skipped elsewhere, and the demo writes alerts to a file)
setup: $(INSTALLED) $(JARS) $(ALERTMANAGER) $(PROMETHEUS)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 13) else 1)' \
	  || { echo "fabricwatch needs Python 3.11 or 3.12; $(PYTHON) is $$($(PYTHON) -V 2>&1)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

$(ALERTMANAGER): fabricwatch/alertmanager.py | $(INSTALLED)
	$(BIN)/python -m fabricwatch.alertmanager build --optional

$(PROMETHEUS): fabricwatch/prometheus.py | $(INSTALLED)
	$(BIN)/python -m fabricwatch.prometheus build --optional

$(JARS): deploy/kafka/pom.xml | $(INSTALLED)
	@command -v java >/dev/null || { echo "Kafka needs Java 17+: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }
	@command -v mvn >/dev/null || { echo "the Kafka jars come through Maven: apt-get install -y maven" >&2; exit 1; }
	$(BIN)/fabricwatch stack jars

## lab-deps: ibsim, opensm and infiniband-diags for the lab tests (root and apt; warns otherwise)
lab-deps:
	@if command -v $(IBSIM) >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "WARNING: ibsim is missing and installing $(LAB_PACKAGES) needs root; the lab tests will be skipped" >&2; exit 0; fi; \
	echo "installing $(LAB_PACKAGES)"; \
	if $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(LAB_PACKAGES) >/dev/null; \
	then echo "installed $(LAB_PACKAGES)"; \
	else echo "WARNING: could not install $(LAB_PACKAGES); the lab tests will be skipped" >&2; fi

## browser-deps: Debian's chromium for the report's headless browser test (root and apt; warns otherwise)
browser-deps:
	@if command -v $(CHROMIUM) >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "WARNING: chromium is missing and installing it needs root; the browser test will be skipped" >&2; exit 0; fi; \
	echo "installing $(BROWSER_PACKAGES)"; \
	if $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null; \
	then echo "installed $(BROWSER_PACKAGES)"; \
	else echo "WARNING: could not install $(BROWSER_PACKAGES); the browser test will be skipped" >&2; fi

## lint: ruff and mypy (strict) over the packages
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

## test: the whole suite: lint, types, unit, integration (real Kafka, Temporal, chdb), end to end
test: $(INSTALLED) $(JARS) lab-deps browser-deps
	# Alertmanager and Prometheus build from their Go modules (~4.5 min cold on 2 cores)
	# while lint and the unit tests run, which need neither; the integration tests do.
	@mkdir -p $(TEST_LOGS); \
	( $(MAKE) --no-print-directory $(ALERTMANAGER) $(PROMETHEUS) \
	    > $(TEST_LOGS)/go-tools.log 2>&1 ) & tools=$$!; \
	$(BIN)/ruff check . && $(BIN)/mypy && $(BIN)/pytest tests/unit --durations=10; rc=$$?; \
	wait $$tools || { echo "building the Go tools failed:"; cat $(TEST_LOGS)/go-tools.log; }; \
	exit $$rc
	# Two pytest sessions at once, each with its own broker and Temporal server. The runbook
	# tests have theirs apart because each new dispatcher group reads the last 15 minutes of
	# fabric.detections, and the other tests publish thousands of isolating detections within
	# that time; after them, in the same session, the real-time scrape-versus-stream run (4
	# minutes of waiting on clocks, an eighth of a core). Its output follows the other's.
	@$(BIN)/pytest tests/integration/workflows tests/integration/test_scrape_vs_stream.py \
	    --durations=5 > $(TEST_LOGS)/runbooks.log 2>&1 & side=$$!; \
	$(BIN)/pytest tests --ignore=tests/unit --ignore=tests/integration/workflows \
	    --ignore=tests/integration/test_scrape_vs_stream.py --durations=15; rc=$$?; \
	wait $$side; side_rc=$$?; \
	echo "--- the runbook tests and the scrape-versus-stream run (their own session) ---"; \
	cat $(TEST_LOGS)/runbooks.log; \
	[ $$rc = 0 ] && [ $$side_rc = 0 ]

## demo: the main job
demo: setup
	$(BIN)/fabricwatch demo --fresh

stack-up: setup
	$(BIN)/fabricwatch stack up

stack-down:
	@if [ -x $(BIN)/fabricwatch ]; then $(BIN)/fabricwatch stack down; else echo "no virtualenv: nothing to stop"; fi

stack-status: setup
	$(BIN)/fabricwatch stack status

## clean: stop the local stack and remove the virtualenv, jars and local state
clean: stack-down
	rm -rf $(VENV) deploy/kafka/libs .fabricwatch .pytest_cache .mypy_cache .ruff_cache
