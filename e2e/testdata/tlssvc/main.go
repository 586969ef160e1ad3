// Command tlssvc is the TLS service the end-to-end tests deploy with a
// certificate resource: it serves TLS on a port with the chain and key the
// host wrote (read at every handshake, so a renewed certificate is served
// at once), and appends a line to --hups on every SIGHUP, so a test sees
// that a renewal signalled it. Paths are as declared, under MESH_ROOT.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	listen := flag.String("listen", "", "address to serve TLS on")
	cert := flag.String("cert", "", "the chain (PEM), as declared")
	key := flag.String("key", "", "the key (PEM), as declared")
	hups := flag.String("hups", "", "a file to append a line to on every SIGHUP")
	flag.Parse()
	root := os.Getenv("MESH_ROOT")
	if root == "/" {
		root = ""
	}
	conf := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(root+*cert, root+*key)
		return &c, err
	}}
	ln, err := tls.Listen("tcp", *listen, conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlssvc:", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err == nil {
					fmt.Fprintln(c, "tlssvc")
				}
			}(c)
		}
	}()
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for s := range sig {
		if s != syscall.SIGHUP {
			break
		}
		_ = os.MkdirAll(filepath.Dir(root+*hups), 0o755)
		f, err := os.OpenFile(root+*hups, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintln(f, "hup")
			f.Close()
		}
	}
	ln.Close()
}
