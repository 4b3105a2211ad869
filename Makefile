# DistCache-P4 entry points.  Run as root (Mininet needs it).  `make help` lists every target and variable:
# a target's line is the `## ` comment after its prerequisites, a variable's the `## NAME:` comment above it.

SHELL := /bin/bash
PY := .venv/bin/python
## TARGET: the data plane: softswitch (built in), bmv2 or ebpf (p4lang's tools on PATH)
TARGET ?= softswitch
## TOPO: the cluster file of run and up (topologies/*.json)
TOPO ?= topologies/demo-2spine-2rack.json
## SWITCH_LOG: events, or packets: BMv2's per-packet trace in runs/<time>/<switch>.txt (~10x slower)
SWITCH_LOG ?= events
APT_PACKAGES := python3 python3-venv python3-pip mininet redis-server bridge-utils iproute2 \
                ethtool tcpdump iputils-ping procps psmisc net-tools clang llvm libbpf-dev bpftool rumur gcc tshark prometheus \
                nutcracker
P4C := $(shell command -v p4c-bm2-ss 2>/dev/null)
STAMP := .venv/.deps-stamp
## PCAP: 1: capture every switch port of run and up in runs/<time>/pcap/ (for Wireshark)
PCAP ?=
## PROMETHEUS: 1: up also runs a Prometheus server scraping the deployment
PROMETHEUS ?=
## SEED: linearizability: replay the fault schedule of this seed
SEED ?=
## PROFILE: bench-switch: a folder for a py-spy profile
PROFILE ?=
## E2E_TARGETS: test, test-mininet: the Mininet scenarios' targets, e.g. softswitch,ebpf (tests/e2e/targets.py)

.PHONY: help deps build go-test constants diagram run up emulate linearizability verify bench-shim bench-switch test test-fast test-mininet ptf mutants bench figures lint clean

TOOLS := build/distcache-shim build/distcache-gateway build/storagebench build/lincheck build/faultinject.bpf.o build/pktsend build/turnaround.bpf.o build/loopbind.bpf.o \
	build/p4rt-shell-venv/.installed

deps: $(STAMP) $(TOOLS)  ## apt packages, the Python environment .venv and the compiled tools in build/ (idempotent)

$(STAMP): pyproject.toml
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing apt packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@# Mininet's Python package is Debian's, for /usr/bin/python3: build the venv on that interpreter.
	@[ -x $(PY) ] || /usr/bin/python3 -m venv --system-site-packages .venv
	$(PY) -m pip install -q --upgrade pip
	@# setuptools says, as information, that an editable install with a mapped folder (dcnet is mininet/dcnet) uses an
	@# import finder: nothing to act on, so it is not shown
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e '.[dev]'
	@$(PY) -c "import mininet.net, finsy, redis, scapy, numpy, scipy, matplotlib, ptf" && touch $(STAMP) && echo "deps ready"

LINCHECK_SRC := tools/lincheck/go.mod tools/lincheck/go.sum $(wildcard tools/lincheck/*.go)

# The linearizability checker (tools/lincheck, Go + porcupine; a module of its own).
build/lincheck: $(LINCHECK_SRC) | build/.go-ready
	cd tools/lincheck && CGO_ENABLED=0 go build -buildvcs=false -o ../../build/lincheck .

# The compiled parts (the root Go module, go.mod): the storage shim (shim/) and make bench-shim's load generator
# (tools/storagebench), sharing internal/.  tools/go/ensure-go.sh installs a Go that reads go.mod's toolchain line (Debian 12's
# golang-go is too old; bookworm-backports' golang-1.23 is not) and protoc; the gRPC code is generated here from
# distcache/proto/ into internal/pb/ (not committed), by the plugins go.mod's versions build into build/bin/.
GO_DIRS := internal shim gateway tools/storagebench tools/rediscommands tools/lincheck
GO_SRC := go.mod go.sum $(shell find internal shim gateway tools/storagebench tools/rediscommands -name '*.go' -not -path 'internal/pb/*' 2>/dev/null)
GO_BUILD := CGO_ENABLED=0 go build -buildvcs=false -trimpath
PB_GO := internal/pb/shimpb/shim.pb.go internal/pb/shimpb/shim_grpc.pb.go
build/.go-ready: tools/go/ensure-go.sh
	@bash tools/go/ensure-go.sh
	@mkdir -p build && touch $@
build/bin/protoc-gen-go: go.mod | build/.go-ready
	GOBIN=$(CURDIR)/build/bin go install google.golang.org/protobuf/cmd/protoc-gen-go
build/bin/protoc-gen-go-grpc: | build/.go-ready
	GOBIN=$(CURDIR)/build/bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC)
PROTOC_GEN_GO_GRPC := v1.5.1
$(PB_GO) &: distcache/proto/shim.proto build/bin/protoc-gen-go build/bin/protoc-gen-go-grpc
	@mkdir -p internal/pb
	protoc -I distcache/proto --plugin=protoc-gen-go=build/bin/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=build/bin/protoc-gen-go-grpc \
		--go_out=internal/pb --go_opt=module=distcache/internal/pb --go_opt=Mshim.proto=distcache/internal/pb/shimpb \
		--go-grpc_out=internal/pb --go-grpc_opt=module=distcache/internal/pb \
		--go-grpc_opt=Mshim.proto=distcache/internal/pb/shimpb shim.proto
# the shim, and beside it the same program with the deliberate breaks of tests/breaks.py compiled in (build tag
# breaks: the fault matrix's control run and the tests that show the checks catch a break; no other build has them)
build/distcache-shim: $(GO_SRC) $(PB_GO)
	$(GO_BUILD) -o $@ ./shim
	$(GO_BUILD) -tags breaks -o build/distcache-shim-breaks ./shim
# The gateway (gateway/) answers COMMAND and dispatches by what a redis-server says of its commands: the replies
# of Debian's redis-server (the storage servers') to COMMAND and COMMAND DOCS, taken here (tools/rediscommands)
# into gateway/redisdata/ (not committed) and compiled in.
REDIS_DATA := gateway/redisdata/command.resp2 gateway/redisdata/command.resp3 gateway/redisdata/docs.resp2 gateway/redisdata/docs.resp3
$(REDIS_DATA) &: tools/rediscommands/main.go internal/resp/resp.go | build/.go-ready
	@command -v redis-server >/dev/null || { echo "redis-server is missing: make deps installs it"; exit 1; }
	@rm -rf build/rediscommands && mkdir -p build/rediscommands
	redis-server --port 0 --unixsocket $(CURDIR)/build/rediscommands/redis.sock --save "" --appendonly no \
		--dir $(CURDIR)/build/rediscommands --daemonize yes --pidfile $(CURDIR)/build/rediscommands/redis.pid \
		--logfile $(CURDIR)/build/rediscommands/redis.log
	@for i in $$(seq 50); do [ -S build/rediscommands/redis.sock ] && break; sleep 0.1; done
	go run ./tools/rediscommands -socket build/rediscommands/redis.sock -out gateway/redisdata; \
		status=$$?; kill $$(cat build/rediscommands/redis.pid); exit $$status
build/distcache-gateway: $(GO_SRC) $(REDIS_DATA)
	$(GO_BUILD) -o $@ ./gateway
# make bench-shim's load generator and coherence peer
build/storagebench: $(GO_SRC)
	$(GO_BUILD) -o $@ ./tools/storagebench

# The tc eBPF programs of tools/: the packet fault injector (tools/faultinject; mininet/dcnet/netfaults.py loads
# it), make bench-switch's turnaround (tools/turnaround: the veths' ceiling, limit_pps; bench/switch/limit.py) and
# the cgroup programs that keep BMv2's Thrift server on loopback in a deployment (tools/loopbind; harness/loopbind.py).
# Debian's clang; asm/types.h lives under the multiarch include directory.
BPF_CFLAGS := -O2 -g -Wall -target bpf -mcpu=v3 -I/usr/include/$(shell uname -m)-linux-gnu
define BPF_COMPILE
	@{ command -v clang && [ -f /usr/include/bpf/bpf_helpers.h ] && { command -v bpftool || [ -x /usr/sbin/bpftool ]; }; } \
		>/dev/null 2>&1 || { echo "installing apt packages: clang llvm libbpf-dev bpftool"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang llvm libbpf-dev bpftool; }
	@mkdir -p build
	clang $(BPF_CFLAGS) -c $< -o $@
endef
build/faultinject.bpf.o: tools/faultinject/faultinject.bpf.c | $(STAMP)
	$(BPF_COMPILE)
build/turnaround.bpf.o: tools/turnaround/turnaround.bpf.c | $(STAMP)
	$(BPF_COMPILE)
build/loopbind.bpf.o: tools/loopbind/loopbind.bpf.c | $(STAMP)
	$(BPF_COMPILE)

# make bench-switch's compiled sender (tools/pktsend, C: one frame offered on an AF_PACKET socket in sendmmsg batches).
build/pktsend: tools/pktsend/pktsend.c
	@command -v gcc >/dev/null 2>&1 || { echo "installing apt packages: gcc libc6-dev"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev; }
	@mkdir -p build
	gcc -O2 -Wall -Wextra -Werror -o $@ $<

P4SRC := $(shell find p4src -name '*.p4')

build: deps build/softswitch.p4info.txt  ## softswitch's P4Info; p4src/ compiled with p4c-bm2-ss where it is on PATH
ifeq ($(P4C),)
	@echo "p4c-bm2-ss not found: skipping the P4 compile; the softswitch target will be used (TARGET=softswitch)"
else
build: build/distcache.json
endif

# softswitch's pipeline is Python (softswitch/dataplane); its P4Info is written from it every time (cheap).
build/softswitch.p4info.txt: FORCE | $(STAMP)
	@mkdir -p build
	@$(PY) -m softswitch.p4info $@

# p4c runs only when p4src/ changed; its P4Info comes with the JSON.
build/distcache.json: $(P4SRC)
	@mkdir -p build
	$(P4C) --std p4-16 --arch v1model -o $@ --p4runtime-files build/distcache.p4info.txtpb p4src/v1model/distcache.p4
	@echo "compiled p4src/v1model/distcache.p4 -> build/distcache.json (BMv2) + build/distcache.p4info.txtpb"

# p4lang's p4runtime-shell in a venv of its own: it pins protobuf and grpcio older than ours.  Made here or by
# tests/p4runtime/test_p4runtime_shell.py (which runs this target); the test skips only when PyPI is unreachable.
P4RT_SHELL_VENV := build/p4rt-shell-venv
$(P4RT_SHELL_VENV)/.installed: tests/p4runtime/p4rt-shell-requirements.txt
	@rm -rf $(P4RT_SHELL_VENV)
	/usr/bin/python3 -m venv $(P4RT_SHELL_VENV)
	$(P4RT_SHELL_VENV)/bin/pip install -q -r $<
	@touch $@

# The Python side's P4Info names and P4 constants, generated from p4src/ (tools/gen_constants.py): from p4c's
# P4Info where p4c is installed, else from the source reader; tests/unit/test_p4_constants.py fails when they are stale.
constants: $(STAMP)  ## regenerate distcache/p4names.py and p4defines.py after a change to p4src/
	$(PY) -m tools.gen_constants

FORCE:

run: build  ## the demo: a topology, a Zipf workload, hot keys cached by themselves, spines failed (TARGET TOPO SWITCH_LOG PCAP)
	$(PY) -m dcnet.demo --target $(TARGET) --topo $(TOPO) --switch-log $(SWITCH_LOG) $(if $(PCAP),--pcap)

up: build  ## bring a topology up and open the Mininet CLI until you exit (TARGET TOPO SWITCH_LOG PCAP PROMETHEUS)
	$(PY) -m dcnet.up --target $(TARGET) --topo $(TOPO) --switch-log $(SWITCH_LOG) $(if $(PROMETHEUS),--prometheus) $(if $(PCAP),--pcap)

emulate: build  ## Figures 9(a), 10, 11 on the running system beside the simulator's prediction (TARGET; ~30 min)
	$(PY) -m dcnet.emulate --target $(TARGET) --switch-log $(SWITCH_LOG)

linearizability: build  ## the fault matrix: histories under faults checked, and a control run that must fail (TARGET SEED)
	$(PY) -m dcnet.linearizability --target $(TARGET) $(if $(SEED),--seed $(SEED))

# The coherence protocol's model, checked exhaustively (model/README.md): Debian's rumur generates a C verifier.
verify: $(STAMP)  ## model-check the coherence protocol (model/, Rumur): it holds, seeded bugs give counterexamples (~30 min)
	@{ command -v rumur && command -v cc; } >/dev/null 2>&1 || { echo "installing apt packages: rumur gcc"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rumur gcc; }
	$(PY) -m model.run --suite verify --save build/model/runs --show-trace

test: build go-test  ## the whole test suite: Go's (race detector on), unit, P4Runtime, PTF, Mininet, the model (~22 min)
	$(PY) -m pytest -q -rs

# the compiled parts' own tests, with the race detector (it needs cgo: Debian's gcc); the shim's breaks build too
go-test: $(PB_GO) $(REDIS_DATA) | build/.go-ready  ## the Go parts' tests (shim, wire codec, checker) with the race detector
	CGO_ENABLED=1 go test -race -count=1 ./...
	CGO_ENABLED=1 go test -race -count=1 -tags breaks ./shim
	cd tools/lincheck && go test -count=1 ./...

test-fast: deps go-test  ## Go's tests and the Python tests that need no Mininet or PTF namespace
	$(PY) -m pytest -q -m "not mininet"

test-mininet: build  ## only the Mininet and PTF tests
	$(PY) -m pytest -q -m mininet

ptf: deps  ## the PTF packet tests on one switch in a private namespace (TARGET)
	$(PY) -m tests.ptf.run --target $(TARGET)

mutants: deps  ## break p4src/ on purpose, one change at a time, and check the tests catch each (needs BMv2)
	$(PY) -m tests.ptf.mutants

figures: deps  ## Figures 9-11 by simulation at paper scale, PNG + CSV in docs/figures/ (~1 min)
	$(PY) -m simulator figures --out docs/figures

bench: deps  ## softswitch's pipeline throughput per path, in packets per second
	$(PY) -m bench.pipeline

bench-shim: build  ## a storage server (shim + Redis) against the same Redis alone: ops/s, latency, CPU per request
	$(PY) -m bench.shim

bench-switch: build  ## packets per second through one switch on veths, every target side by side (PROFILE)
	$(PY) -m bench.switch $(if $(PROFILE),--profile $(PROFILE))

# ruff with the rule sets of pyproject.toml (RUF100 flags a noqa that silences nothing), its formatter, and
# mypy over the libraries and the control plane (warn_unused_ignores: a type: ignore that hides nothing fails)
lint: deps $(REDIS_DATA)  ## ruff check, ruff format --check and mypy; gofmt and go vet
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	@unformatted=$$(gofmt -l $(GO_DIRS)); [ -z "$$unformatted" ] || { echo "gofmt -w these: $$unformatted"; exit 1; }
	go vet ./... && go vet -tags breaks ./shim
	cd tools/lincheck && go vet ./...

help:  ## this list: every target and the variables it takes
	@awk -F':.*## ' '/^[a-z][a-z-]*:.*## / { printf "  make %-17s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo "variables (make run TARGET=bmv2 ...):"
	@awk 'name != "" { d = ($$1 == name && $$2 == "?=" && $$3 != "") ? " (default " $$3 ")" : ""; \
		printf "  %-17s %s%s\n", name, desc, d; name = "" } \
		/^## [A-Z_0-9]+: / { name = substr($$2, 1, length($$2) - 1); desc = substr($$0, length($$2) + 5) }' $(MAKEFILE_LIST)

diagram: deps  ## redraw the README's architecture picture, docs/figures/architecture.{svg,png}, from the code
	$(PY) -m tools.draw_architecture

clean:  ## stop what killed runs left running; remove build/ and runs/ (a live run's are kept)
	@if [ -x $(PY) ]; then $(PY) -m dcnet.cleanup --outputs; else rm -rf build runs .pytest_cache; fi
