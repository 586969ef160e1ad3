package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/store"
	"mesh/testwait"
)

// `mesh-controller backup FILE` stopped part way (SIGTERM: a unit stopped,
// a job under `timeout`; Ctrl-C) died in the middle of its copy and left a
// file under FILE's name, sized like a backup (351 MB of a 600 MB store),
// and FILE-journal beside it: a rotation could keep it in place of a good
// one. The copy is written under a name of its own until it is whole, and
// a stopped backup removes what it wrote.
func TestBackup_StoppedPartWayLeavesNoFileUnderItsName(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mesh-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	if code, out, errOut := runCtl(t, "", "migrate", "--data", data); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	st, err := store.Open(t.Context(), store.Config{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	// 128 MiB of an upload's chunks: a copy that takes a while (~0.7 s on two
	// cores, where the stop comes ~0.1 s in). Zeros, not randomblob: this
	// process runs SQLite under -race, where random bytes took minutes.
	if err := st.DB().Exec(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<128)
		INSERT INTO blob_chunks SELECT 'upload:big', x, zeroblob(1048576) FROM c`).Error; err != nil {
		t.Fatal(err)
	}
	st.Close()

	out := filepath.Join(dir, "backups")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(out, "mesh-backup.db")
	cmd := exec.Command(bin, "backup", backup, "--data", data)
	cmd.Env = append(os.Environ(), "MESH_LISTEN=127.0.0.1:0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	written := func() (int64, bool) {
		es, _ := os.ReadDir(out)
		var n int64
		for _, e := range es {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return n, len(es) > 0
	}
	testwait.For(t, 30*time.Second, "the backup to begin writing", func() bool {
		n, _ := written()
		return n > 8<<20
	})
	if _, err := os.Stat(backup); err == nil {
		t.Fatal("the backup's name exists while the copy is being written")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if err == nil {
		t.Fatal("the backup completed before its stop: the store to copy is too small for this test")
	}
	if es, _ := os.ReadDir(out); len(es) > 0 {
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Fatalf("a stopped backup (%v) left %s", err, strings.Join(names, ", "))
	}
}
