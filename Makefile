# The two commands of the README are `make run` and `make test`.
GO      ?= go
BIN     := bin/mevedel-exec
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/mevedel/mevedel-exec/rpc.ServerVersion=$(VERSION)
# The command `make run` sends through the helper; override with CMD='...'.
CMD     ?= echo "hello from mevedel-exec in $$PWD"; for i in 1 2 3; do echo "tick $$i"; sleep 1; done

.PHONY: setup build run test bench clean

setup:
	@scripts/setup.sh

build: setup
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/mevedel-exec

run: build
	$(BIN) run -- '$(CMD)'

test: setup
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

bench: build
	$(GO) run ./test/bench spool

clean:
	rm -rf bin
