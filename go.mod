module github.com/mevedel/mevedel-exec

go 1.26.8

require (
	github.com/creack/pty v1.1.24
	github.com/kevinburke/ssh_config v1.6.0
	github.com/klauspost/compress v1.18.7
	github.com/pkg/sftp v1.13.12
	github.com/sourcegraph/jsonrpc2 v0.2.3
	golang.org/x/crypto v0.59.0
	golang.org/x/sys v0.50.0
	mvdan.cc/sh/v3 v3.14.1
)

require github.com/kr/fs v0.1.0 // indirect
