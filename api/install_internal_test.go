package api

import (
	"encoding/base64"
	"os/exec"
	"strings"
	"testing"
)

func TestShellQuote(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, s := range []string{"", "1.0.0", "it's", `$(id) "x" ` + "`y`", "a'b'c", "\\n;|&"} {
		out, err := exec.Command(sh, "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("%q quoted as %s printed %q (%v)", s, shellQuote(s), out, err)
		}
	}
}

// TestInstallLine: the one-liner carries the mesh CA itself and its pin,
// over https only; plain HTTP gives none (the script checks a CA).
func TestInstallLine(t *testing.T) {
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	e := Enrolment{CAPin: "sha256:" + strings.Repeat("ab", 32), CAPEM: pem}
	line := e.installLine("https://ctl.example:8443", "tok")
	for _, want := range []string{
		"d=$(mktemp -d) && echo " + base64.StdEncoding.EncodeToString(pem) + ` | base64 -d > "$d/mesh-ca.pem"`,
		`curl -fsS --retry 10 --cacert "$d/mesh-ca.pem" -o "$d/install.sh" 'https://ctl.example:8443/install.sh' && sh "$d/install.sh" `,
		`--controller 'https://ctl.example:8443' --ca-file "$d/mesh-ca.pem" --pin ` + e.CAPin, "--token tok",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if got := e.installLine("http://127.0.0.1:8080", "tok"); got != "" {
		t.Errorf("over plain HTTP: %q", got)
	}
}
