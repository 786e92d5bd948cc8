# Einsora edge. `make run` starts a solo hub with an in-process agent on the
# embedded SQLite store; `make test` runs every test.
GO      ?= go
DATA    ?= $(CURDIR)/.data
DRIVERS ?= sim
# A version dpkg accepts from any checkout (scripts/version.sh).
VERSION ?= $(shell scripts/version.sh)
LDFLAGS := -X main.version=$(VERSION)
BIN     := bin
# Run from the module proxy, not a dependency of the module.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build run test test-short lint fmt bench bench-fleet darwin clean deb formula lint-deb release

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

# The fleet benchmark: N simulated agents against a real einsora-hub serve
# and against a stock Go TLS long poll; see docs/performance.md. Not part
# of make test.
N ?= 1000
bench-fleet: build
	$(GO) run ./scripts/fleetbench -n $(N) -hub $(BIN)/einsora-hub $(FLEETBENCH_FLAGS)

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
	rm -rf $(BIN) $(DATA) dist

# The .debs of both programs into bin/ (scripts/build-deb.sh): static,
# stripped, with man pages, completions and a changelog; nfpm runs from the
# module proxy (not a dependency of the module). ARCH is amd64 or arm64.
ARCH ?= amd64
deb:
	scripts/build-deb.sh $(VERSION) $(ARCH) bin/

# lintian on the .debs of this version; any error or warning not
# overridden (with its reason, in packaging/deb/*/lintian-overrides) fails.
lint-deb: deb
	lintian --fail-on error,warning --tag-display-limit 0 bin/einsora-agent_$(VERSION)_$(ARCH).deb bin/einsora-hub_$(VERSION)_$(ARCH).deb

# make release VERSION=x.y.z [BASE_URL=https://…]: tarballs (linux, darwin
# × amd64, arm64), the source tarball, both .debs for both architectures,
# the Homebrew formula (make formula, when BASE_URL says where the source
# tarball will be served) and SHA256SUMS, into dist/.
release:
	@case "$(origin VERSION)" in command\ line|environment) ;; *) echo "make release needs VERSION=x.y.z"; exit 2;; esac
	BASE_URL="$(BASE_URL)" scripts/release.sh $(VERSION)
