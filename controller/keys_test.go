package controller_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controller"
	"mesh/controller/ctltest"
	"mesh/keyring"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// lockedBuffer collects a controller's log; its workers write while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// run is one start of a controller on a store; log and out are what it wrote.
type run struct {
	ctl      *controller.Controller
	log, out *lockedBuffer
	stopOnce sync.Once
}

// startOn starts a controller on the store sc names, with the key settings
// of with (KeyFile, Key); it returns the start's error rather than failing.
func startOn(t *testing.T, sc store.Config, with controller.Config) (*run, error) {
	t.Helper()
	r := &run{log: &lockedBuffer{}, out: &lockedBuffer{}}
	cfg := controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL,
		Out: r.out, Log: slog.New(slog.NewTextHandler(r.log, nil)), DrainTimeout: 5 * time.Second,
		KeyFile: with.KeyFile, Key: with.Key}
	if with.Listen != "" {
		cfg.Listen = with.Listen
	}
	var err error
	r.ctl, err = controller.Start(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { r.stopOnce.Do(func() { _ = r.ctl.Stop() }) })
	}
	return r, err
}

func mustStart(t *testing.T, sc store.Config, with controller.Config) *run {
	t.Helper()
	r, err := startOn(t, sc, with)
	if err != nil {
		t.Fatalf("start: %v\nlog:\n%s", err, r.log)
	}
	return r
}

// stop stops a controller, so the next start finds the data dir free.
func (r *run) stop(t *testing.T) {
	t.Helper()
	var err error
	r.stopOnce.Do(func() { err = r.ctl.Stop() })
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// admin logs in as the admin the first start made.
func (r *run) admin(t *testing.T) *ctltest.Env {
	t.Helper()
	m := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(r.out.String())
	if m == nil {
		t.Fatalf("no first-start password in %q", r.out.String())
	}
	e := ctltest.Attach(t, r.ctl.URL(), "")
	e.Admin = e.Login("admin", m[1])
	return e
}

// writeKey writes a fresh key file, private to its owner.
func writeKey(t *testing.T) (path string, key []byte) {
	t.Helper()
	key = make([]byte, keyring.KeySize)
	rand.Read(key)
	path = filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, key
}

// rawKeys is each key row's private_key column, as stored.
func rawKeys(t *testing.T, st *store.Store) map[string][]byte {
	t.Helper()
	rows, err := st.DB().Raw("SELECT id, private_key FROM keys").Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var id string
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	if len(out) != 2 {
		t.Fatalf("%d key rows, want 2", len(out))
	}
	return out
}

func keyDialects(t *testing.T, f func(t *testing.T, sc store.Config)) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) { f(t, storetest.Config(t, d)) })
	}
}

func TestSigningKeys_EncryptedAtRest(t *testing.T) {
	keyDialects(t, func(t *testing.T, sc store.Config) {
		keyFile, key := writeKey(t)
		first := mustStart(t, sc, controller.Config{KeyFile: keyFile})
		if !first.ctl.Store.SealsKeys() || !strings.Contains(first.log.String(), "signing keys encrypted at rest") {
			t.Fatalf("the start does not say the keys are encrypted at rest:\n%s", first.log)
		}
		admin := first.admin(t).Admin
		for id, raw := range rawKeys(t, first.ctl.Store) {
			if !keyring.IsSealed(raw) {
				t.Fatalf("key %s is not sealed in the store", id)
			}
		}
		first.stop(t)

		t.Run("ErrNoKeyFile", func(t *testing.T) {
			r, err := startOn(t, sc, controller.Config{})
			if err == nil {
				r.stop(t)
				t.Fatal("started without the key on a store whose keys are sealed")
			}
			if msg := err.Error(); !strings.Contains(msg, "encrypted at rest") || !strings.Contains(msg, "--key-file") {
				t.Fatalf("refusal %q; want it to say the keys are encrypted and name --key-file", msg)
			}
		})
		t.Run("ErrWrongKeyFile", func(t *testing.T) {
			wrong, _ := writeKey(t)
			r, err := startOn(t, sc, controller.Config{KeyFile: wrong})
			if err == nil {
				r.stop(t)
				t.Fatal("started with the wrong key")
			}
			msg := err.Error()
			if !strings.Contains(msg, "the key file "+wrong+" does not open the store's signing keys") || strings.Contains(msg, "internal error") {
				t.Fatalf("refusal %q; want the key file named as not opening the keys", msg)
			}
		})
		t.Run("ErrKeyFileOpenToOthers", func(t *testing.T) {
			if err := os.Chmod(keyFile, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(keyFile, 0o600)
			r, err := startOn(t, sc, controller.Config{KeyFile: keyFile})
			if err == nil {
				r.stop(t)
				t.Fatal("started with a key file others may read")
			}
			if !strings.Contains(err.Error(), "chmod 600") {
				t.Fatalf("refusal %q; want the fix named", err)
			}
		})
		t.Run("OKKeyInEnvironment", func(t *testing.T) {
			// MESH_KEY holds the key as text; a token issued before still verifies.
			r := mustStart(t, sc, controller.Config{Key: hex.EncodeToString(key) + "\n"})
			defer r.stop(t)
			e := ctltest.Attach(t, r.ctl.URL(), admin)
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: admin}, 200, nil)
		})
	})
}

func TestSigningKeys_SealedAtStart(t *testing.T) {
	keyDialects(t, func(t *testing.T, sc store.Config) {
		plain := mustStart(t, sc, controller.Config{})
		if plain.ctl.Store.SealsKeys() || !strings.Contains(plain.log.String(), "signing keys stored in plaintext") {
			t.Fatalf("the start does not say the keys are in plaintext:\n%s", plain.log)
		}
		e := plain.admin(t)
		host := e.Enroll("m1") // the host pins the declaration key's public half
		before := rawKeys(t, plain.ctl.Store)
		for id, raw := range before {
			if len(raw) != ed25519.SeedSize {
				t.Fatalf("key %s: %d bytes stored without a key file, want the plaintext seed", id, len(raw))
			}
		}
		plain.stop(t)

		keyFile, _ := writeKey(t)
		sealed := mustStart(t, sc, controller.Config{KeyFile: keyFile})
		if !strings.Contains(sealed.log.String(), "signing keys stored in plaintext are now sealed") {
			t.Fatalf("the start does not say it sealed the keys:\n%s", sealed.log)
		}
		for id, raw := range rawKeys(t, sealed.ctl.Store) {
			if !keyring.IsSealed(raw) || bytes.Contains(raw, before[id]) {
				t.Fatalf("key %s is not sealed after a start with a key file", id)
			}
		}
		e = ctltest.Attach(t, sealed.ctl.URL(), e.Admin)

		// Tokens issued before (the admin's, the host's) still verify, and
		// what the controller signs verifies with the key the host pinned.
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, nil)
		resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: host.Token,
			Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
		if resp.StatusCode != 200 {
			t.Fatalf("host poll with a token issued before: %d %s", resp.StatusCode, body)
		}
		var env models.Envelope
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatal(err)
		}
		verified := false
		for _, s := range env.Signatures {
			for _, k := range host.Keys {
				verified = verified || k.KeyID == s.KeyID && ed25519.Verify(ed25519.PublicKey(k.PublicKey), env.Payload, s.Sig)
			}
		}
		if !verified {
			t.Fatal("the declaration does not verify with the key the host pinned before the keys were sealed")
		}
	})
}
