package meshca_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/meshca"
)

func mustCA(t *testing.T) *meshca.CA {
	t.Helper()
	cert, key, err := meshca.New(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := meshca.Parse(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serve runs an HTTPS server presenting cert on loopback.
func serve(t *testing.T, cert *tls.Certificate) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: meshca.NextProtos}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestParsePin(t *testing.T) {
	good := "sha256:" + strings.Repeat("AB", 32)
	if p, err := meshca.ParsePin(good); err != nil || p != strings.ToLower(good) {
		t.Fatalf("%q: %q %v", good, p, err)
	}
	for _, bad := range []string{"", "sha256:", "sha1:" + strings.Repeat("ab", 32), "sha256:" + strings.Repeat("ab", 31), "sha256:" + strings.Repeat("zz", 32)} {
		if _, err := meshca.ParsePin(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParse_KeyMustBelongToCertificate(t *testing.T) {
	c1, _, _ := meshca.New(time.Now())
	_, k2, _ := meshca.New(time.Now())
	if _, err := meshca.Parse(c1, k2); err == nil {
		t.Fatal("a CA with another CA's key was accepted")
	}
}

func TestIssueServing_NamesAndChain(t *testing.T) {
	ca := mustCA(t)
	cert, err := ca.IssueServing([]string{"ctl.example.net", "10.1.2.3"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ctl.example.net", "10.1.2.3", "localhost", "127.0.0.1", "::1"} {
		if err := cert.Leaf.VerifyHostname(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if err := cert.Leaf.VerifyHostname("other.example.net"); err == nil {
		t.Error("a name not given is in the certificate")
	}
	if len(cert.Certificate) != 2 || string(cert.Certificate[1]) != string(ca.Cert.Raw) {
		t.Error("the chain does not carry the CA after the leaf")
	}
	if d := cert.Leaf.NotAfter.Sub(time.Now()); d > time.Hour || d < 50*time.Minute {
		t.Errorf("lifetime %v, want an hour", d)
	}
}

func TestDiscover(t *testing.T) {
	ca := mustCA(t)
	cert, err := ca.IssueServing(nil, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, cert)
	addr := srv.Listener.Addr().String()
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		got, err := meshca.Discover(ctx, addr, "127.0.0.1", ca.Pin())
		if err != nil {
			t.Fatal(err)
		}
		if meshca.Pin(got) != ca.Pin() {
			t.Fatal("another CA returned")
		}
		// And requests verified as usual against it.
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: meshca.ClientConfig(got)}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.TLS.NegotiatedProtocol != "http/1.1" {
			t.Errorf("ALPN %q, want http/1.1", resp.TLS.NegotiatedProtocol)
		}
	})
	t.Run("ErrPinMismatch", func(t *testing.T) {
		other := mustCA(t)
		_, err := meshca.Discover(ctx, addr, "127.0.0.1", other.Pin())
		var pm *meshca.PinMismatchError
		if !errors.As(err, &pm) {
			t.Fatalf("err %v, want a pin mismatch", err)
		}
		if pm.Expected != other.Pin() || pm.Seen[len(pm.Seen)-1] != ca.Pin() {
			t.Fatalf("expected %s seen %v", pm.Expected, pm.Seen)
		}
		if !strings.Contains(err.Error(), other.Pin()) || !strings.Contains(err.Error(), ca.Pin()) {
			t.Fatalf("the message names neither pin: %v", err)
		}
	})
	t.Run("ErrWrongName", func(t *testing.T) {
		if _, err := meshca.Discover(ctx, addr, "ctl.example.net", ca.Pin()); err == nil {
			t.Fatal("a certificate not naming the address was accepted")
		}
	})
	t.Run("ErrLeafPinnedIsNotACA", func(t *testing.T) {
		if _, err := meshca.Discover(ctx, addr, "127.0.0.1", meshca.Pin(cert.Leaf)); err == nil {
			t.Fatal("the leaf's own pin was taken for a CA")
		}
	})
	t.Run("ErrExpired", func(t *testing.T) {
		old, err := ca.IssueServing(nil, time.Now().Add(-2*time.Hour), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s := serve(t, old)
		if _, err := meshca.Discover(ctx, s.Listener.Addr().String(), "127.0.0.1", ca.Pin()); err == nil {
			t.Fatal("an expired certificate was accepted")
		}
	})
	t.Run("ErrNotTLS", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err == nil {
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
				c.Close()
			}
		}()
		if _, err := meshca.Discover(ctx, l.Addr().String(), "127.0.0.1", ca.Pin()); err == nil {
			t.Fatal("a plain server was accepted")
		}
	})
}

// TestNoInsecureSkipVerify: no source outside tests turns off certificate
// verification; the pinned CA is found without it (Discover).
func TestNoInsecureSkipVerify(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "InsecureSkipVerify") {
			t.Errorf("%s sets InsecureSkipVerify", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
