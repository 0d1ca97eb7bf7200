module github.com/mevedel/mevedel-exec

go 1.26.8

require (
	github.com/creack/pty v1.1.24 // indirect
	github.com/sourcegraph/jsonrpc2 v0.2.3 // indirect
	golang.org/x/sys v0.50.0 // indirect
	mvdan.cc/sh/v3 v3.14.1 // indirect
)
