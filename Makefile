SHELL := /bin/bash
# airlock: `make up` runs the all-in-one dev node; `make test` runs every test. Both install and
# start what they need (Docker engine, redis-server, a Vault server built from Go modules, the
# sandbox images) and cache what they build outside the checkout.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GO      ?= go
export AIRLOCK_CACHE ?= /var/cache/airlock
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build up test unit e2e lint fuzz bench bench-gateway bench-dns bench-pool bench-state deps vault seaweedfs runsc image kube kube-down clean

all: build

# bin/airlock is the client, which links no server; it hands `up`, `audit verify`, `image build`
# and `template build` to bin/airlock-node beside it.
build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/airlock ./cmd/airlock
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/airlock-node ./cmd/airlock-node
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/airlock-agent ./cmd/airlock-agent

deps:
	@scripts/deps.sh

vault:
	@scripts/vault.sh

# SeaweedFS's weed, an S3-compatible object store for the S3 snapshot store's tests, built from
# tools/seaweedfs and linked to bin/weed.
seaweedfs:
	@scripts/seaweedfs.sh

# gVisor's runsc, built from tools/runsc and registered with the engine as the runtime "runsc".
runsc: deps
	@scripts/runsc.sh

image: deps build
	@bin/airlock image build

# A real single-node Kubernetes cluster for the Kubernetes backend's tests, in a network
# namespace of its own (scripts/kube.sh); its env file is what the e2e tests read.
KUBE_ENV ?= /var/lib/airlock/kube/env
kube: deps image
	@scripts/kube.sh

kube-down:
	@scripts/kube.sh down

up: deps vault seaweedfs runsc image build
	bin/airlock up $(if $(CONFIG),--config $(CONFIG))

test: deps vault seaweedfs runsc image build kube
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /e2e)
	cd tools/runsc && $(GO) test -count=1 ./register
	AIRLOCK_KUBE_ENV=$(KUBE_ENV) $(GO) test -count=1 -timeout 25m -v ./e2e/

unit:
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /e2e)

e2e: deps vault seaweedfs runsc image build kube
	AIRLOCK_KUBE_ENV=$(KUBE_ENV) $(GO) test -count=1 -timeout 25m -v ./e2e/

lint:
	@scripts/lint.sh

# Fuzz each parser that faces untrusted input, and the two round trips that must agree byte for
# byte (what the gateway matches and sends; what the trail writes and verifies), for FUZZTIME;
# the corpora live in testdata/fuzz.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run XXX -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./scope
	$(GO) test -run XXX -fuzz '^FuzzCanonicalHost$$' -fuzztime $(FUZZTIME) ./scope
	$(GO) test -run XXX -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./token
	$(GO) test -run XXX -fuzz '^FuzzFraming$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzPathMatchedIsPathSent$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzReadPushCommands$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzScrubSampling$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzScrubEscapes$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzReflectingUpstream$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzHeadSize$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzBudgetAccounting$$' -fuzztime $(FUZZTIME) ./gateway
	$(GO) test -run XXX -fuzz '^FuzzTrailRoundTrip$$' -fuzztime $(FUZZTIME) ./audit
	$(GO) test -run XXX -fuzz '^FuzzSealedIndex$$' -fuzztime $(FUZZTIME) ./audit
	$(GO) test -run XXX -fuzz '^FuzzAnswer$$' -fuzztime $(FUZZTIME) ./dnsfilter
	$(GO) test -run XXX -fuzz '^FuzzWire$$' -fuzztime $(FUZZTIME) ./dnsfilter

# Benchmarks: go benchmarks with allocations, then the side-by-side peer runs.
bench: bench-gateway bench-dns bench-pool
	$(GO) test -run XXX -bench . -benchmem ./gateway/... ./dnsfilter/...
	$(GO) test -run XXX -bench . -benchmem ./audit/   # AIRLOCK_AUDIT_BENCH_RECORDS=10000000 for the 10 M record trail
	$(GO) test -run XXX -bench . -benchmem ./review/  # AIRLOCK_REVIEW_BENCH_RECORDS=10000000: a day of 1,000 leases

bench-gateway:
	@scripts/bench-gateway.sh

bench-dns:
	@scripts/bench-dns.sh

bench-pool: image build
	@scripts/bench-pool.sh

bench-state: vault image build
	@scripts/bench-state.sh

clean:
	rm -rf bin
