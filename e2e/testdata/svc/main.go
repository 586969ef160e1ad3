// Command svc is the service the end-to-end tests deploy: it listens on a
// TCP port until SIGTERM, and answers every connection with its name.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	port := flag.String("port", "", "port to listen on (127.0.0.1)")
	flag.String("config", "", "config file (read by real services; ignored here)")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:"+*port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "svc:", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "svc on %s (root %s)\n", *port, os.Getenv("MESH_ROOT"))
			c.Close()
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ln.Close()
}
