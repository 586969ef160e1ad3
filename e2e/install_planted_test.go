package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mesh/store"
)

// TestInstall_LineDoesNotWriteThroughAPlantedName: the install line
// saved the script as mesh-install.sh in the current directory (curl -o),
// then ran it as root (sh mesh-install.sh). In a directory
// another local user can write to, that user plants mesh-install.sh
// first — a symlink to a file of theirs, or a file of theirs: curl, as
// root, follows the link (or truncates their file, which stays theirs)
// and writes the script into a file the other user controls, which root
// then runs. Between the save and the run the other user rewrites it:
// their commands run as root. Piped to sh, nothing was ever on disk to
// swap. The line writes its files in a directory of its own (mktemp -d).
func TestInstall_LineDoesNotWriteThroughAPlantedName(t *testing.T) {
	for _, tool := range []string{"curl", "openssl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	c := startControllerTLS(t, store.SQLite)
	work := t.TempDir()
	// Another local user's file, and their link to it under the name the
	// line saves the script as.
	planted := filepath.Join(work, "theirs")
	if err := os.WriteFile(planted, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(planted, filepath.Join(work, "mesh-install.sh")); err != nil {
		t.Fatal(err)
	}
	out, _ := runInstall(t, c.installLine(), work, "--prefix", filepath.Join(work, "p"), "--name", "inst0")
	got, err := os.ReadFile(planted)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(string(got), "#!") {
		t.Fatalf("the install line wrote the script it runs as root through a mesh-install.sh planted in its directory, into another user's file (%d bytes there, which that user may rewrite before sh reads it); output:\n%.400s", len(got), out)
	}
}
