# All set-up lives here: a fresh machine of this kind needs only `make test` / `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kmq-installed

.PHONY: test test-unit demo install system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,demo]'
	touch $(STAMP)

install: $(STAMP)

# Debian's OpenLDAP server and tools, for the directory tests against a real slapd.
system-deps:
	@bash deploy/install-system-deps.sh

# Everything: unit tests, the type check (mypy), and the integration tests that start a broker
# and slapd.
test: install system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

# Fast: no broker, no slapd (tests that start one are marked integration by tests/conftest.py);
# the type check included.
test-unit: install
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/kmq demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
