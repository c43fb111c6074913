# All set-up lives here: a fresh machine of this kind needs only `make test` / `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kmq-installed

.PHONY: test demo install system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,demo]'
	touch $(STAMP)

install: $(STAMP)

# Debian's OpenLDAP server and tools, for the directory tests against a real slapd.
system-deps:
	@bash deploy/install-system-deps.sh

test: install system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/kmq demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
