package main

import (
	"strings"
	"testing"
)

const out = `goos: linux
BenchmarkFanout/sqlite-10000-2         	       1	9784293281 ns/op	        13.93 KiB/poll	       1250 first-p50-ms	       1895 first-p99-ms	       1200 second-p50-ms	       1810 second-p99-ms	       220.0 first-cpu-µs/machine	       210.0 second-cpu-µs/machine	       3100 reports-ms	       301.0 cpu-µs/report
--- BENCH: BenchmarkFanout/sqlite-10000-2
    fanout_test.go:136: sqlite: controller RSS 32 MiB
BenchmarkFanoutLarge/postgres-tls-100000         	       1	2784293281 ns/op	        17.93 KiB/poll	       188.7 start-ms	       10.96 list-p99-ms
BenchmarkReconnectTLS/resume-500-2         	       1	3204613219 ns/op	       820.0 all-parked-ms	       580.0 cpu-µs/host	       620.7 p50-ms	       772.0 p99-ms
BenchmarkIdle/tls-full-500-2               	       1	18036767748 ns/op	         9.555 cpu-%	       970.7 cpu-µs/poll	        95.94 handshakes/s	        98.43 polls/s
PASS
`

func TestTable(t *testing.T) {
	rows, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0].name != "sqlite-10000" || rows[1].name != "postgres-tls-100000" ||
		rows[2].name != "reconnect-resume-500" || rows[3].name != "idle-tls-full-500" {
		t.Fatalf("rows %+v", rows)
	}
	var b strings.Builder
	write(&b, rows, main1)
	write(&b, rows, reportCols)
	write(&b, rows, large)
	write(&b, rows, reconnectCols)
	write(&b, rows, idleCols)
	got := b.String()
	for _, want := range []string{
		"| sqlite-10000 | 1250 | 1895 | 1200 | 1810 | 220 | 210 | – | – | 13.9 |",
		"| postgres-tls-100000 | – | – | – | – | – | – | – | – | 17.9 |",
		"| sqlite-10000 | 3100 | 301 | – |",
		"| postgres-tls-100000 | 189 | – | – | – | – | – | 11.0 | – |",
		"| reconnect-resume-500 | 621 | 772 | 820 | 580 |",
		"| idle-tls-full-500 | 9.6 | 98 | 96 | 971 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "| sqlite-10000 |") != 2 {
		t.Errorf("the sqlite row belongs in the first table and the reports' only:\n%s", got)
	}
}

func TestNotANumber(t *testing.T) {
	if _, err := parse(strings.NewReader("BenchmarkFanout/x-1 1 2 ns/op x KiB/poll\n")); err == nil {
		t.Error("no error for a value that is not a number")
	}
}
