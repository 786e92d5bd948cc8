# Einsora edge. `make run` starts a solo hub with an in-process agent on the
# embedded SQLite store; `make test` runs every test.
GO      ?= go
DATA    ?= $(CURDIR)/.data
DRIVERS ?= sim
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin
# Run from the module proxy, not a dependency of the module.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build run test test-short lint fmt bench darwin clean deb formula

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

run: build
	$(BIN)/einsora-hub solo --data $(DATA) --drivers $(DRIVERS)

# The whole suite, race detector on. Docker tests skip without an engine
# unless EINSORA_REQUIRE_DOCKER=1, which CI sets.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

test-short:
	$(GO) test -short -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

darwin:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...

# The Homebrew formula with a release's url and sha256:
#   make formula URL=https://.../einsora-edge-1.2.0.tar.gz VERSION=1.2.0 [TARBALL=path]
formula:
	@test -n "$(URL)" || { echo "make formula: set URL=https://..." >&2; exit 2; }
	mkdir -p dist
	scripts/render-formula.sh "$(URL)" "$(patsubst v%,%,$(VERSION))" $(TARBALL) > dist/einsora-agent.rb.tmp
	mv dist/einsora-agent.rb.tmp dist/einsora-agent.rb
	@echo "wrote dist/einsora-agent.rb"

clean:
	rm -rf $(BIN) $(DATA)

# A .deb of the agent, with nfpm run from the module proxy (not a
# dependency of the module). ARCH is amd64 or arm64.
ARCH ?= amd64
NFPM ?= github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
deb:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/deb/einsora-agent ./cmd/einsora-agent
	ARCH=$(ARCH) VERSION=$(patsubst v%,%,$(VERSION)) $(GO) run $(NFPM) pkg --config packaging/deb/nfpm.yaml --packager deb --target bin/
