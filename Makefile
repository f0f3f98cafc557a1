# gpucap: `make lab` opens the workbook, `make test` runs every test. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8888
APP_PORT ?= 8866
CHROMIUM ?= /usr/bin/chromium

.DEFAULT_GOAL := help
.PHONY: help venv lab app app-planner test lint typecheck unit notebooks browser chromium accuracy speed peers golden e2e e2e-suite e2e-telemetry clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[notebooks,test]'
	touch $(STAMP)

venv: $(STAMP) ## create .venv with the package, notebook and test extras

lab: $(STAMP) ## open JupyterLab on notebooks/ (prints the address; works headless)
	$(BIN)/jupyter lab --notebook-dir=notebooks --no-browser --ip=127.0.0.1 --port=$(PORT) \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

app: $(STAMP) ## serve notebook 02 as a page for colleagues who do not code (127.0.0.1, port APP_PORT=8866)
	$(BIN)/python -m gpucap.app.serve --port $(APP_PORT)

app-planner: $(STAMP) ## serve the capacity planner (notebook 05) as a page (127.0.0.1, port APP_PORT=8866)
	$(BIN)/python -m gpucap.app.serve --page planner --port $(APP_PORT)

lint: $(STAMP) ## ruff lint and format check over code, tests, benchmarks and notebooks
	$(BIN)/ruff check gpucap tests benchmarks notebooks
	$(BIN)/ruff format --check gpucap tests benchmarks notebooks

typecheck: $(STAMP) ## mypy on gpucap/
	$(BIN)/mypy

# Tests run on every core (pytest-xdist): two on the reference machine.
JOBS ?= auto

unit: $(STAMP) ## unit and property tests with coverage
	$(BIN)/python -m pytest -n $(JOBS) --ignore=tests/browser --cov=gpucap --cov-report=term

notebooks: $(STAMP) ## execute every notebook (outputs must not be committed)
	$(BIN)/nbstripout --verify notebooks/*.ipynb
	$(BIN)/python -m pytest -n $(JOBS) --nbmake notebooks -p no:cacheprovider

# A CJK font (1.6 MB) so that the glossary's Chinese terms render on a bare machine's browser.
CJK_FONT := fonts-wqy-microhei

chromium: ## install Debian's Chromium (and a CJK font) for the browser test when missing
	@test -x $(CHROMIUM) || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi; }
	@fc-list :lang=zh | grep -q . || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $(CJK_FONT); \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq $(CJK_FONT); fi; }

browser: $(STAMP) chromium ## the page in headless Chromium: change inputs, check the recommendation
	$(BIN)/python -m pytest tests/browser -p no:cacheprovider

test: lint typecheck unit notebooks browser e2e ## everything CI runs (e2e: a real vLLM server on this CPU)

accuracy: $(STAMP) ## error table on ../shared/data/measured-public.csv (benchmarks/out/)
	$(BIN)/python benchmarks/accuracy.py

e2e: $(STAMP) ## real vLLM on this CPU: load test, calibrate on the measured CPU (own venv; ~10 min)
	MAIN_PYTHON=$(BIN)/python PYTHON=$(PYTHON) bash benchmarks/e2e/run.sh

e2e-suite: $(STAMP) ## real vLLM on this CPU in every load mode: fit once, predict the rest (~25 min; not in test)
	PYTHON=$(PYTHON) $(BIN)/python benchmarks/e2e/suite.py

e2e-telemetry: $(STAMP) ## real vLLM on this CPU: refit from its /metrics and step log alone, check against its load test (~8 min; not in test)
	PYTHON=$(PYTHON) $(BIN)/python benchmarks/e2e/telemetry.py

speed: $(STAMP) ## gpucap's own speed: configurations/s, planner search, widget update, fit time
	$(BIN)/python benchmarks/speed.py

peers: $(STAMP) ## gpucap next to NVIDIA aiconfigurator on the same measurements (own venv .venv-peers, ~850 MB)
	test -x .venv-peers/bin/python || $(BIN)/python benchmarks/peers.py --setup
	$(BIN)/python benchmarks/peers.py

golden: $(STAMP) ## rewrite tests/golden/predictions.csv on purpose (say why in the commit)
	$(BIN)/python tests/golden/make_golden.py

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .venv-peers benchmarks/e2e/.venv benchmarks/e2e/model .pytest_cache .mypy_cache .ruff_cache .coverage
