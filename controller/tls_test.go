package controller_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"mesh/controller"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// startTLS starts a controller serving TLS on loopback on the store sc names.
func startTLS(t *testing.T, sc store.Config, keyFile string) *controller.Controller {
	t.Helper()
	c, err := controller.Start(context.Background(), controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir,
		DatabaseURL: sc.DatabaseURL, Out: io.Discard, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DrainTimeout: 5 * time.Second, TLS: true, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLS_OneCAAcrossRestartsAndResumption: the mesh CA is made once and
// kept in the store (sealed with the key file), so a restart serves under
// the same pin; the session ticket keys are kept there too, so a client's
// session resumes on the restarted controller without a full handshake.
func TestTLS_OneCAAcrossRestartsAndResumption(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			sc := storetest.Config(t, d)
			keyFile, _ := writeKey(t)
			first := startTLS(t, sc, keyFile)
			pin := first.CA.Pin()
			conf := meshca.ClientConfig(first.CA.Cert)
			conf.ServerName, conf.ClientSessionCache = "localhost", tls.NewLRUClientSessionCache(8)
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: conf}}
			get := func(c *controller.Controller) *tls.ConnectionState {
				t.Helper()
				resp, err := hc.Get(c.URL() + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.TLS
			}
			if st := get(first); st.DidResume || st.NegotiatedProtocol != "http/1.1" {
				t.Fatalf("first connection: resumed %v, ALPN %q", st.DidResume, st.NegotiatedProtocol)
			}
			if err := first.Stop(); err != nil {
				t.Fatal(err)
			}
			var raw []byte
			second := startTLS(t, sc, keyFile)
			defer second.Stop()
			if err := second.Store.DB().Raw("SELECT private_key FROM tls_keys WHERE purpose = ?", store.TLSCA).Row().Scan(&raw); err != nil {
				t.Fatal(err)
			}
			if len(raw) == 0 || raw[0] == 0x30 { // a PKCS#8 DER sequence starts 0x30
				t.Fatal("the CA's private key is stored in plaintext though a key file is given")
			}
			if got := second.CA.Pin(); got != pin {
				t.Fatalf("pin after a restart %s, want %s", got, pin)
			}
			if st := get(second); !st.DidResume {
				t.Fatal("the session did not resume on the restarted controller")
			}
		})
	}
}
