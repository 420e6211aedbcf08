# The two set-up commands: `make demo` and `make test`. Both create or refresh .venv.
PYTHON ?= python3
# A CPU build where pip resolves it from this machine's wheels; elsewhere pass the build you
# want, e.g. make TORCH='torch==2.13.0' PIP_ARGS='--index-url <a CPU wheel index>'.
TORCH ?= torch==2.13.0
PIP_ARGS ?=
VENV := .venv
STAMP := $(VENV)/.installed
TORCH_PIN := $(VENV)/.torch-pin
PY := $(VENV)/bin/python

.PHONY: venv demo trunk test bench clean

venv: $(STAMP)

# The torch request is remembered in .venv/.torch-pin; it is rewritten (so the stamp goes out of
# date and everything reinstalls) only when TORCH or PIP_ARGS change.
WANTED_PIN := $(strip $(TORCH) $(PIP_ARGS))
ifneq ($(strip $(shell cat $(TORCH_PIN) 2>/dev/null)),$(WANTED_PIN))
$(shell mkdir -p $(VENV) && echo '$(WANTED_PIN)' > $(TORCH_PIN))
endif

$(STAMP): pyproject.toml Makefile $(TORCH_PIN)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_ARGS) '$(TORCH)'
	$(PY) -m pip install -q -e '.[dev,hf,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tatu.ops.demo
	@echo "tatu is in .venv/bin: \`. .venv/bin/activate\` puts it on your PATH for the commands above (README.md, Two commands)"

# The trunk `make demo` starts from, shipped in data/demo/trunk/ with its run.log and manifest:
# rebuilt here by tatu's own recipe (demo sources, tokenizer, data, the daemon's pretraining; ops/trunk.py).
trunk: $(STAMP)
	$(PY) -m tatu.ops.trunk

# Apertium's taggers (category metrics) and Chromium (the page tests' browser): installed with
# apt-get when root, else the command is printed. The tests run on TEST_WORKERS pytest-xdist
# workers (0: in this process alone); tests/conftest.py keeps apart the ones that cannot share the
# machine. One more worker than the 2 cores the suite is sized for: the systemd tests and the Ray
# tests each hold a worker for minutes, much of it waiting on units, restart timers and the cluster.
TEST_WORKERS ?= 3
test: $(STAMP)
	$(PY) -m tatu.ops.packages tagger
	$(PY) -m tatu.ops.packages browser
	$(VENV)/bin/pytest -q --durations=15 -n $(TEST_WORKERS)

# The quick ratio benchmarks that need nothing but a checkout; the others need data, taggers, hours
# or older commits and are run by hand (docs/benchmarks.md says which and why).
bench: $(STAMP)
	$(PY) bench/attention.py
	$(PY) bench/generate.py
	$(PY) bench/stream.py
	$(PY) bench/eval.py
	$(PY) bench/ddp_scaling.py
	$(PY) bench/partial.py
	$(PY) bench/retention.py
	$(PY) -u bench/overhead.py
	$(PY) -u bench/control_flood.py
	$(PY) -u bench/cpu_sums.py

clean:
	rm -rf $(VENV) demo runs *.egg-info
