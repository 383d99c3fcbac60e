GO ?= go
BIN := bin/kvxds
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

.PHONY: run build test vet fmt bench golden clean

# The README's first command: kvxds on the example policy.
run:
	$(GO) run ./cmd/kvxds serve --policy examples/chat.hcl

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/kvxds

vet:
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The README's second command.
test: fmt vet
	$(GO) test -race -timeout 12m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./xds/...

# Rewrite every golden file from the current code.
golden:
	$(GO) test ./policy/ ./xds/... -update

clean:
	rm -rf bin
