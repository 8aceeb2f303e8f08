# cove: make up (install, build, start the daemon, prove a sandbox works)
#       make test (everything the tests need, then the tests)
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin

GO      ?= go
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin
IMAGES  ?= /var/lib/cove/images

.PHONY: all deps deps-e2e e2b-sdk build image up down test unit fuzz e2e mcp-check bench vet clean proto

all: build

deps:
	bash scripts/install-deps.sh

# The QEMU microVM backend's packages (qemu, busybox-static, e2fsprogs).
deps-qemu:
	INSTALL_QEMU=1 bash scripts/install-deps.sh

# What only the e2e suite needs (headless Chromium for the preview check).
deps-e2e:
	INSTALL_E2E=1 bash scripts/install-deps.sh

# The published E2B SDKs the e2e suite drives cove with (e2e/e2b_test.go):
# the current one (v2 routes) and an older one (v1 routes), each installed
# once into a directory keyed by its version.
E2B_SDK_DIR      ?= /var/cache/cove/e2b-sdk
E2B_SDK_VERSIONS := 2.51.0 2.45.0
e2b-sdk: deps-e2e
	@for v in $(E2B_SDK_VERSIONS); do \
	  d=$(E2B_SDK_DIR)/$$v; \
	  if [ -f $$d/node_modules/e2b/package.json ] && grep -q "\"version\": \"$$v\"" $$d/node_modules/e2b/package.json; then continue; fi; \
	  rm -rf $$d.tmp && mkdir -p $$d.tmp && \
	  npm install --prefix $$d.tmp --no-audit --no-fund --no-save e2b@$$v >/dev/null && \
	  rm -rf $$d && mv $$d.tmp $$d && echo "e2b-sdk: e2b@$$v in $$d" || exit 1; \
	done

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/cove ./cmd/cove
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/cove-agent ./cmd/cove-agent

# The image is content-addressed: an unchanged agent and recipe is a no-op.
image: deps build
	$(BIN)/cove image build --dir $(IMAGES) --agent $(BIN)/cove-agent

# The image plus its VM artifacts (kernel, initrd, ext4 disk) for --backend qemu.
image-vm: deps-qemu build
	$(BIN)/cove image build --vm --dir $(IMAGES) --agent $(BIN)/cove-agent

up: image
	bash scripts/up.sh

down:
	bash scripts/down.sh

# The E2B envd facade's protobuf code (internal/e2b/pb), regenerated from
# its .proto files with pinned tools from the Go module proxy.
PROTO_TOOLS := github.com/bufbuild/buf/cmd/buf@v1.75.0 \
	google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 \
	connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
proto:
	@for t in $(PROTO_TOOLS); do $(GO) install $$t || exit 1; done
	cd internal/e2b/pb && PATH="$$($(GO) env GOPATH)/bin:$$PATH" buf generate

# vet also refuses an untidy go.mod and any tracked file over 1 MB (a
# committed binary or image).
vet:
	$(GO) vet ./...
	@out=$$(gofmt -l cmd internal pkg e2e); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff || { echo "go.mod is not tidy: run go mod tidy"; exit 1; }
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' -- 2>/dev/null | awk '$$1 > 1048576 {print $$2}'); \
	  if [ -n "$$big" ]; then echo "tracked files over 1 MB:"; echo "$$big"; exit 1; fi

# The QEMU runtime's tests boot real VMs, so unit tests need the VM image.
unit: image-vm e2b-sdk
	$(GO) test -count=1 -race $$($(GO) list ./... | grep -v /e2e)

# A short run of each fuzz target (the seeds and testdata/fuzz corpora
# also run as plain tests in unit). A failing input lands in the
# package's testdata/fuzz/<Target>/: keep it there as a regression seed.
# Minimizing is bounded: slow targets (tar, mkdir) would otherwise spend
# the whole run minimizing new inputs instead of fuzzing. The run is a
# count of inputs, not a duration: Go's fuzzer can fail a run with
# "context deadline exceeded" when its duration ends mid-step.
FUZZTIME ?= 10000x
FUZZ_TARGETS := \
	internal/agentproto:FuzzReadJSON internal/agentproto:FuzzReadRecord \
	internal/agentproto:FuzzDataReader internal/agentproto:FuzzResolvePath \
	internal/agent:FuzzResolve internal/agent:FuzzMkdirRelative \
	internal/fsutil:FuzzExtractTar internal/fsutil:FuzzExtractTarEntries \
	internal/api:FuzzDecodeRequest internal/sandbox:FuzzCreateOptions

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=200x -parallel 2 ./$$pkg; done

e2e: image deps-e2e e2b-sdk
	COVE_E2B_SDK_DIR=$(E2B_SDK_DIR) COVE_IMAGE_DIR=$(IMAGES) $(GO) test -count=1 -timeout 25m -v ./e2e/ 2>&1 | tee $(BIN)/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; \
	  rc=$${PIPESTATUS[0]}; [ $$rc = 0 ] || grep -A60 '^e2e: the shared daemon' $(BIN)/e2e.log; exit $$rc

# cove's MCP server against independent clients: the MCP inspector over
# stdio and the MCP conformance suite against /mcp (scripts/mcp-check.sh).
mcp-check: image
	COVE_IMAGE_DIR=$(IMAGES) bash scripts/mcp-check.sh

# The same end-to-end suite against QEMU microVMs under TCG.
e2e-qemu: image-vm deps-e2e e2b-sdk
	COVE_E2B_SDK_DIR=$(E2B_SDK_DIR) COVE_E2E_BACKEND=qemu COVE_IMAGE_DIR=$(IMAGES) $(GO) test -count=1 -timeout 45m -v ./e2e/ 2>&1 | tee $(BIN)/e2e-qemu.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; \
	  rc=$${PIPESTATUS[0]}; [ $$rc = 0 ] || grep -A60 '^e2e: the shared daemon' $(BIN)/e2e-qemu.log; exit $$rc

test: vet unit fuzz e2e e2e-qemu mcp-check

bench: up
	$(BIN)/cove bench --out $(BIN)/bench.json

clean:
	rm -rf $(BIN)
