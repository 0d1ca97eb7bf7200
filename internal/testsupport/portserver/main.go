// Command portserver is a TCP server for the port forwarding tests, built
// static so that it runs in a test container as well as here: it listens
// on 127.0.0.1:PORT, prints "listening", and to each connection writes
// the network namespace it runs in ("netns net:[N]"), then echoes what
// it reads until EOF and closes.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: portserver PORT")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ns, _ := os.Readlink("/proc/self/ns/net")
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "netns %s\n", ns)
			_, _ = io.Copy(c, c)
		}()
	}
}
