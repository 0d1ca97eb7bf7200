# The two commands of the README are `make run` and `make test`.
GO      ?= go
BIN     := bin/mevedel-exec
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/mevedel/mevedel-exec/rpc.ServerVersion=$(VERSION)
# The command `make run-cli` sends through the helper; override with CMD='...'.
CMD     ?= echo "hello from mevedel-exec in $$PWD"; for i in 1 2 3; do echo "tick $$i"; sleep 1; done
export MEVEDEL_EXEC_PROGRAM := $(CURDIR)/$(BIN)

.PHONY: setup build package run run-cli test test-go lint-go test-units test-elisp check bench bench-emacs bench-ack bench-oneshot bench-first-output bench-live200 bench-replay200 clean

setup:
	@scripts/setup.sh

# The helper, and its builds for the hosts its agent is deployed to
# (Linux amd64 and arm64: the helper uploads the one a host needs).
build: setup
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/mevedel-exec
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)-linux-amd64 ./cmd/mevedel-exec
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)-linux-arm64 ./cmd/mevedel-exec

# The Emacs package as `package-install-file' takes it:
# dist/mevedel-execution-VERSION.tar (Emacs's own package.el builds it).
package:
	emacs -Q --batch -l scripts/package.el dist

# A scripted Emacs session through the facade: what a user would see.
run: build
	emacs --batch -Q -L elisp -l scripts/demo.el

# The same helper from the shell, with its own small client.
run-cli: build
	$(BIN) run -- '$(CMD)'

# The Go suite and the Elisp suite run side by side: the ERT suite mostly
# waits on its helper, so it costs the Go suite little.
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-go test-elisp

# The longest packages are named first: go test starts packages in the
# order given, and the last to start sets the wall time.
SLOW_UNITS := ./spool ./test/tui ./remote
# A race-built test binary sleeps a second at exit for late reports; 50 ms
# is what the tests' own helpers get (testsupport.RaceExit). Twenty
# packages paid that second each, two at a time in go test's slots.
RACE_EXIT := GORACE=atexit_sleep_ms=50
test-go: setup lint-go
	$(RACE_EXIT) $(GO) test -race -count=1 -timeout 20m -parallel 3 ./test/e2e $(SLOW_UNITS) \
	  $$($(GO) list ./... | grep -v -e /test/e2e$$ $(patsubst ./%,-e /%$$,$(SLOW_UNITS)))

lint-go:
	@unformatted=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...

# The inner loop: gofmt, vet, the unit tests of every package but the end
# to end one, and the ERT suite (against the real helper).
check:
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-units test-elisp

test-units: setup lint-go
	$(RACE_EXIT) $(GO) test -race -count=1 -parallel 4 $(SLOW_UNITS) \
	  $$($(GO) list ./... | grep -v -e /test/e2e$$ $(patsubst ./%,-e /%$$,$(SLOW_UNITS)))

# Byte-compiling must give no warning at all (--strict), nor linting; the ERT suite runs
# against the real helper, built with -tags strict so that an illegal state
# move panics there as in every other test build.
test-elisp: setup
	$(GO) build -tags strict -ldflags "$(LDFLAGS)" -o bin/mevedel-exec-strict ./cmd/mevedel-exec
	eask compile --strict
	rm -f elisp/*.elc
	# The linters the package ecosystem runs: package-lint, checkdoc,
	# check-declare (Debian's elpa-package-lint, found without network).
	scripts/lint-elisp.sh
	# All files in one Emacs too: a name two files define differently
	# (a class and an option) shows only there.
	emacs -Q --batch -L elisp --eval '(setq byte-compile-error-on-warn t)' -f batch-byte-compile elisp/*.el
	rm -f elisp/*.elc
	MEVEDEL_EXEC_PROGRAM=$(CURDIR)/bin/mevedel-exec-strict scripts/ert.sh

bench: build
	$(GO) run ./test/bench all

# Emacs's main thread while a command prints 64 MiB: facade vs make-process.
bench-emacs: build
	emacs --batch -Q -L elisp -L test/bench/emacs -l test/bench/emacs/heartbeat.el

# A yielded command's settlement to the facade's durable mailbox/ack.
bench-ack: build
	emacs --batch -Q -L elisp -L test/bench/emacs -l test/bench/emacs/ack.el

# A command's first output on screen (emacs -nw under tmux): the facade's
# shell command against compile, the same command, interleaved.
bench-first-output: build
	test/bench/emacs/tty.sh test/bench/emacs/firstoutput.el

# Emacs with 200 live commands (emacs -nw under tmux): its CPU and largest
# heartbeat gap with the panel open and one output followed, against the
# same commands under make-process.
bench-live200: build
	test/bench/emacs/tty.sh test/bench/emacs/live200.el

# What the exec/changed traffic of 200 live commands costs Emacs, with
# their panel open, replayed without the commands (batch).
bench-replay200: build
	HOME=$$(mktemp -d) MEVEDEL_EXEC_PROGRAM=$(CURDIR)/bin/mevedel-exec REPLAY_SECONDS=$${REPLAY_SECONDS:-20} \
	  emacs --batch -Q -L elisp -L test/bench/emacs -l test/bench/emacs/replay200.el

# Emacs's 10 ms heartbeat while run-one-shot waits for a 2 s command,
# next to the same wait with a blocking call-process.
bench-oneshot: build
	emacs --batch -Q -L elisp -L test/bench/emacs -l test/bench/emacs/oneshot.el

clean:
	rm -rf bin dist elisp/*.elc
