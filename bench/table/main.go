// Command table reads `go test -bench` output on stdin and prints the
// fan-out benchmarks' figures as one table (`go tool task bench`): first
// and second fan-out p50/p99, CPU per machine, memory per waiting poll,
// one row per dialect and size; the reports that follow the second;
// what the large run adds below them;
// the floor (BenchmarkFanoutFloor: the transport alone) as a row of its own;
// then the TLS reconnect and the idle hosts' CPU, a table each.
// Lines that are not such results pass by unprinted.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// row is one benchmark's result line: its name and metrics by unit.
type row struct {
	name    string
	metrics map[string]float64
}

// prefixes are the benchmarks tabled, and the label their rows' names
// start with.
var prefixes = []struct{ bench, label string }{
	{"BenchmarkFanout", ""},
	{"BenchmarkReconnectTLS", "reconnect-"},
	{"BenchmarkIdle", "idle-"},
}

// parse picks the fan-out benchmarks' result lines out of r.
func parse(r io.Reader) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		label, ok := "", false
		for _, p := range prefixes {
			if strings.HasPrefix(f[0], p.bench) {
				label, ok = p.label, true
				break
			}
		}
		if !ok {
			continue
		}
		name := f[0]
		// The subtest (dialect-machines), without GOMAXPROCS' suffix: the
		// name ends in the machine count, so a second number is that.
		if _, sub, ok := strings.Cut(name, "/"); ok {
			name = sub
			parts := strings.Split(name, "-")
			if n := len(parts); n > 2 && numeric(parts[n-1]) && numeric(parts[n-2]) {
				name = strings.Join(parts[:n-1], "-")
			}
		}
		m := map[string]float64{}
		// f[1] is the iteration count; then value unit pairs.
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a number", f[0], f[i])
			}
			m[f[i+1]] = v
		}
		rows = append(rows, row{label + name, m})
	}
	return rows, sc.Err()
}

func numeric(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

type column struct{ head, unit, format string }

var main1 = []column{
	{"1st p50 ms", "first-p50-ms", "%.0f"},
	{"1st p99 ms", "first-p99-ms", "%.0f"},
	{"2nd p50 ms", "second-p50-ms", "%.0f"},
	{"2nd p99 ms", "second-p99-ms", "%.0f"},
	{"1st CPU µs/machine", "first-cpu-µs/machine", "%.0f"},
	{"2nd CPU µs/machine", "second-cpu-µs/machine", "%.0f"},
	{"1st PG µs/machine", "first-pg-cpu-µs/machine", "%.0f"},
	{"2nd PG µs/machine", "second-pg-cpu-µs/machine", "%.0f"},
	{"live KiB/poll", "KiB/poll", "%.1f"},
}

// reportCols: every host the second fan-out answered reporting it
// applied, all at once.
var reportCols = []column{
	{"reports ms", "reports-ms", "%.0f"},
	{"CPU µs/report", "cpu-µs/report", "%.0f"},
	{"PG µs/report", "pg-cpu-µs/report", "%.0f"},
}

var large = []column{
	{"start ms", "start-ms", "%.0f"},
	{"1st compose-all ms", "first-compose-all-ms", "%.0f"},
	{"1st all answered ms", "first-all-ms", "%.0f"},
	{"2nd compose-all ms", "second-compose-all-ms", "%.0f"},
	{"2nd all answered ms", "second-all-ms", "%.0f"},
	{"list page p50 ms", "list-p50-ms", "%.1f"},
	{"list page p99 ms", "list-p99-ms", "%.1f"},
	{"state page max ms", "state-page-max-ms", "%.1f"},
	{"overview ms", "overview-ms", "%.0f"},
}

// reconnectCols: every TLS host reconnecting after a controller restart.
var reconnectCols = []column{
	{"reconnect p50 ms", "p50-ms", "%.0f"},
	{"reconnect p99 ms", "p99-ms", "%.0f"},
	{"all parked ms", "all-parked-ms", "%.0f"},
	{"CPU µs/host", "cpu-µs/host", "%.0f"},
}

// idleCols: idle hosts polling every 5 s.
var idleCols = []column{
	{"CPU % of a core", "cpu-%", "%.1f"},
	{"polls/s", "polls/s", "%.0f"},
	{"handshakes/s", "handshakes/s", "%.0f"},
	{"CPU µs/poll", "cpu-µs/poll", "%.0f"},
}

// write prints the rows that have any of cols as a Markdown table.
func write(w io.Writer, rows []row, cols []column) {
	var some []row
	for _, r := range rows {
		for _, c := range cols {
			if _, ok := r.metrics[c.unit]; ok {
				some = append(some, r)
				break
			}
		}
	}
	if len(some) == 0 {
		return
	}
	fmt.Fprint(w, "| run |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.head)
	}
	fmt.Fprint(w, "\n|---|")
	for range cols {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range some {
		fmt.Fprintf(w, "| %s |", r.name)
		for _, c := range cols {
			if v, ok := r.metrics[c.unit]; ok {
				fmt.Fprintf(w, " "+c.format+" |", v)
			} else {
				fmt.Fprint(w, " – |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func main() {
	rows, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "table: no benchmark results in the input")
		os.Exit(1)
	}
	write(os.Stdout, rows, main1)
	write(os.Stdout, rows, reportCols)
	write(os.Stdout, rows, large)
	write(os.Stdout, rows, reconnectCols)
	write(os.Stdout, rows, idleCols)
}
