package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// A state dir whose state.json was corrupt failed enrol only after the
// controller had spent the single-use join token and taken the name: the
// same command, run again once state.json was moved aside, was refused
// (403), and a new token for the name too (409). The state dir is judged
// before the token is sent.
func TestEnroll_ACorruptStateDoesNotSpendTheToken(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	tok := e.JoinToken()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runHost(t, "enroll", "--controller", e.URL, "--join-token", tok, "--name", "m1", "--state", dir)
	if code == 0 {
		t.Fatal("enrolled over a corrupt state.json")
	}
	if !strings.Contains(errOut, "join token is unspent") {
		t.Errorf("the refusal does not say the token is unspent: %s", errOut)
	}
	if err := os.Remove(filepath.Join(dir, "state.json")); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runHost(t, "enroll", "--controller", e.URL, "--join-token", tok, "--name", "m1", "--state", dir); code != 0 {
		t.Fatalf("after state.json was moved aside, enrolling with the same token: exit %d %s", code, errOut)
	}
}
