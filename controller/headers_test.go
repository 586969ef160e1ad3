package controller_test

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestServer_AHeaderOverItsBoundIsRefused: a request header over 64 KiB is
// answered 431. net/http's default bound is 1 MiB, which let anyone hold a
// MiB of the controller's memory a connection by leaving such a header
// unfinished until the header timeout (150 connections: 200 MiB).
func TestServer_AHeaderOverItsBoundIsRefused(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	u, _ := url.Parse(e.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /healthz HTTP/1.1\r\nHost: mesh\r\nX-A: " + strings.Repeat("a", 100<<10) + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a header of 100 KiB: %s", resp.Status)
	}
}
