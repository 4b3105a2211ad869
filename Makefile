# DistCache-P4 entry points.  Run as root (Mininet needs it).
#   make deps    apt packages + Python environment (idempotent, works on a bare Debian 12)
#   make build   compile p4src/ with p4c-bm2-ss if installed; write softswitch's P4Info
#   make constants  regenerate distcache/p4names.py (P4Info names) and p4defines.py (define.p4, size.p4) from p4src/
#   make run     bring up the demo topology, run a workload, fail and recover spines, print a summary, tear down
#   make up      bring a topology up and open the Mininet CLI (distcache / distcache-ctl) until you exit;
#                PROMETHEUS=1 also runs a Prometheus server scraping the deployment's metrics; PCAP=1 captures every switch port
#   make test    the whole test suite (unit, P4Runtime, Mininet end-to-end)
#   make linearizability  record histories under faults (and with coherence broken on purpose), check them
#   make verify  model-check the coherence protocol (model/distcache.m, Rumur): it holds; seeded bugs give counterexamples
#   make ptf     the PTF data-plane tests on one switch in a private netns (TARGET=softswitch|bmv2)
#   make mutants break p4src/ on purpose, one way at a time, and check the tests catch each (BMv2)
#   make figures paper-scale simulation: Figures 9-11 as PNG + CSV in docs/figures
#   make emulate Figures 9(a), 10, 11 on the running system (rate-limited Mininet), beside the simulator's prediction
#   make bench   softswitch pipeline throughput per path (pkt/s)
#   make bench-shim  shim GET/PUT throughput and write latency vs redis-benchmark (loopback, its own redis-server)
#   make bench-switch  pkt/s through one switch (hit, miss, forwarding) on veths in a private netns: softswitch, BMv2 (fast
#                build), ebpf side by side, and the veths' ceiling (limit_pps: a program that only turns reads around)
#   make clean   stop what killed runs left, remove build outputs and run folders (a live run's are kept)

SHELL := /bin/bash
PY := .venv/bin/python
TARGET ?= softswitch
TOPO ?= topologies/demo-2spine-2rack.json
# SWITCH_LOG=packets: BMv2's per-packet trace in runs/<time>/<switch>.txt (~10x slower); events by default
SWITCH_LOG ?= events
APT_PACKAGES := python3 python3-venv python3-pip mininet redis-server bridge-utils iproute2 \
                ethtool tcpdump iputils-ping procps psmisc net-tools clang llvm libbpf-dev bpftool rumur gcc tshark prometheus
P4C := $(shell command -v p4c-bm2-ss 2>/dev/null)
STAMP := .venv/.deps-stamp

.PHONY: deps build constants run up emulate linearizability verify bench-shim bench-switch test test-fast test-mininet ptf mutants bench figures lint clean

deps: $(STAMP) build/lincheck build/dcload build/faultinject.bpf.o build/pktsend build/turnaround.bpf.o build/loopbind.bpf.o \
	build/p4rt-shell-venv/.installed

$(STAMP): pyproject.toml
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing apt packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@# Mininet's Python package is Debian's, for /usr/bin/python3: build the venv on that interpreter.
	@[ -x $(PY) ] || /usr/bin/python3 -m venv --system-site-packages .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@$(PY) -c "import mininet.net, finsy, redis, scapy, numpy, scipy, matplotlib, ptf" && touch $(STAMP) && echo "deps ready"

LINCHECK_SRC := tools/lincheck/go.mod tools/lincheck/go.sum $(wildcard tools/lincheck/*.go)

# The linearizability checker (tools/lincheck, Go + porcupine). Debian 12's golang-go (Go 1.19) is enough.
build/lincheck: $(LINCHECK_SRC)
	@command -v go >/dev/null 2>&1 || { echo "installing apt packages: golang-go"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go; }
	@mkdir -p build
	cd tools/lincheck && CGO_ENABLED=0 go build -buildvcs=false -o ../../build/lincheck .

# The compiled load generator of make bench-shim (tools/dcload, Go, no dependencies).
build/dcload: tools/dcload/go.mod $(wildcard tools/dcload/*.go) build/lincheck
	cd tools/dcload && CGO_ENABLED=0 go build -buildvcs=false -o ../../build/dcload .

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

build: deps build/softswitch.p4info.txt
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
constants: $(STAMP)
	$(PY) -m tools.gen_constants

FORCE:

run: build
	$(PY) -m dcnet.demo --target $(TARGET) --topo $(TOPO) --switch-log $(SWITCH_LOG) $(if $(PCAP),--pcap)

up: build
	$(PY) -m dcnet.up --target $(TARGET) --topo $(TOPO) --switch-log $(SWITCH_LOG) $(if $(PROMETHEUS),--prometheus) $(if $(PCAP),--pcap)

emulate: build
	$(PY) -m dcnet.emulate --target $(TARGET) --switch-log $(SWITCH_LOG)

linearizability: build
	$(PY) -m dcnet.linearizability --target $(TARGET) $(if $(SEED),--seed $(SEED))

# The coherence protocol's model, checked exhaustively (model/README.md): Debian's rumur generates a C verifier.
verify: $(STAMP)
	@{ command -v rumur && command -v cc; } >/dev/null 2>&1 || { echo "installing apt packages: rumur gcc"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rumur gcc; }
	$(PY) -m model.run --suite verify --save build/model/runs --show-trace

test: build
	$(PY) -m pytest -q -rs

test-fast: deps
	$(PY) -m pytest -q -m "not mininet"

test-mininet: build
	$(PY) -m pytest -q -m mininet

ptf: deps
	$(PY) -m tests.ptf.run --target $(TARGET)

mutants: deps
	$(PY) -m tests.ptf.mutants

figures: deps
	$(PY) -m simulator figures --out docs/figures

bench: deps
	$(PY) -m bench.pipeline

bench-shim: build
	$(PY) -m bench.shim $(if $(PROFILE),--profile $(PROFILE))

bench-switch: build
	$(PY) -m bench.switch $(if $(PROFILE),--profile $(PROFILE))

# ruff with the rule sets of pyproject.toml (RUF100 flags a noqa that silences nothing), its formatter, and
# mypy over the libraries and the control plane (warn_unused_ignores: a type: ignore that hides nothing fails)
lint: deps
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	@if [ -x $(PY) ]; then $(PY) -m dcnet.cleanup --outputs; else rm -rf build runs .pytest_cache; fi
