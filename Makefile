# The two set-up commands: `make demo` and `make test`. Both create or refresh .venv.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
STAMP := $(VENV)/.installed
PY := $(VENV)/bin/python

.PHONY: venv demo test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q '$(TORCH)'
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tatu.ops.demo

test: $(STAMP)
	$(VENV)/bin/pytest -q

bench: $(STAMP)
	$(PY) bench/attention.py
	$(PY) bench/generate.py

clean:
	rm -rf $(VENV) demo runs *.egg-info
