package api_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

// fuzzEnv starts one controller for a fuzz target (each fuzz worker
// process starts its own): on PostgreSQL when MESH_TEST_POSTGRES_URL is
// set, which is stricter about text than SQLite, else on SQLite.
func fuzzEnv(f *testing.F) *ctltest.Env {
	f.Helper()
	tb := &fuzzTB{TB: f}
	if os.Getenv("MESH_TEST_POSTGRES_URL") != "" {
		return ctltest.Start(tb, store.Postgres)
	}
	return ctltest.Start(tb, store.SQLite)
}

// fuzzTB keeps the controller's log lines instead of passing them to the
// F: an F may not log once the fuzz target runs, and the controller logs
// from its own goroutines. fuzzDo shows the last lines with a 5xx.
type fuzzTB struct {
	testing.TB
	mu    sync.Mutex
	lines []string
}

func (tb *fuzzTB) Log(args ...any) { tb.keep(fmt.Sprint(args...)) }

func (tb *fuzzTB) Logf(format string, args ...any) { tb.keep(fmt.Sprintf(format, args...)) }

func (tb *fuzzTB) keep(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.lines = append(tb.lines, s)
	if len(tb.lines) > 20 {
		tb.lines = tb.lines[len(tb.lines)-20:]
	}
}

func (tb *fuzzTB) last() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return strings.Join(tb.lines, "\n")
}

// logOf is the controller's recent log, for a failure message.
func logOf(e *ctltest.Env) string {
	if tb, ok := e.T.(*fuzzTB); ok {
		return tb.last()
	}
	return ""
}

// fuzzDo sends one request with a plain client (the Env's helpers belong
// to the F, not to the fuzz call) and checks the answer against
// openapi.yaml. A 5xx is always a finding: bad input is the client's fault.
func fuzzDo(t *testing.T, e *ctltest.Env, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 500 {
		t.Fatalf("%s %s: %d %s\ncontroller log:\n%s", req.Method, req.URL.Path, resp.StatusCode, b, logOf(e))
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/octet-stream") {
		if err := ctltest.ValidateResponse(t, req, resp.StatusCode, resp.Header, b); err != nil {
			t.Fatalf("%s %s (%d) does not match openapi.yaml: %v\n%.500s", req.Method, req.URL.Path, resp.StatusCode, err, b)
		}
	}
	return resp, b
}

// headerSafe reports whether s can travel as a header value unchanged.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// forges are the sources FuzzWebhook posts to, one per forge kind.
var forges = []struct {
	source, kind, repo, branch string
	headers                    func(event, delivery, sig string) map[string]string
}{
	{"gitea", models.ForgeGitea, "gitea/webhooks", "develop", func(e, d, s string) map[string]string {
		return map[string]string{"X-Gitea-Event": e, "X-Gitea-Delivery": d, "X-Gitea-Signature": s}
	}},
	{"forgejo", models.ForgeForgejo, "gitea/webhooks", "develop", func(e, d, s string) map[string]string {
		return map[string]string{"X-Forgejo-Event": e, "X-Forgejo-Delivery": d, "X-Forgejo-Signature": s}
	}},
	{"github", models.ForgeGitHub, "octo-org/fleet", "main", func(e, d, s string) map[string]string {
		return map[string]string{"X-GitHub-Event": e, "X-GitHub-Delivery": d, "X-Hub-Signature-256": "sha256=" + s}
	}},
}

// fuzzPush is the part of a push event the controller reads.
var fuzzCommitID = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)

type fuzzPush struct {
	Ref        string `json:"ref"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Repository struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Pusher struct {
		Name     string `json:"name"`
		Login    string `json:"login"`
		Username string `json:"username"`
	} `json:"pusher"`
	Commits []struct {
		Added    []string `json:"added"`
		Removed  []string `json:"removed"`
		Modified []string `json:"modified"`
	} `json:"commits"`
}

// FuzzWebhook posts arbitrary bodies and headers to each forge's webhook.
// A bad signature is always 401; a signed delivery is answered 200 or 400,
// never 5xx; a merge is made only from a push to the source's default
// branch of its repository that names a commit.
func FuzzWebhook(f *testing.F) {
	gitea, err := os.ReadFile("testdata/gitea-push.json")
	if err != nil {
		f.Fatal(err)
	}
	github, err := os.ReadFile("testdata/github-push.json")
	if err != nil {
		f.Fatal(err)
	}
	for i := range forges {
		body := gitea
		if forges[i].kind == models.ForgeGitHub {
			body = github
		}
		f.Add(uint8(i), "push", "d-1", body, true)
		f.Add(uint8(i), "push", "d-2", body, false)
		f.Add(uint8(i), "ping", "d-3", []byte(`{"zen": "hi"}`), true)
		f.Add(uint8(i), "push", "d-4", []byte(`{"ref": "refs/heads/`+forges[i].branch+`", "after": "0000000000000000000000000000000000000000", "deleted": true, "repository": {"full_name": "`+forges[i].repo+`"}}`), true)
		f.Add(uint8(i), "push", "d-5", []byte(`{"ref": "refs/heads/`+forges[i].branch+`", "after": "ab\u0000c", "repository": {"full_name": "`+strings.ToUpper(forges[i].repo)+`"}, "pusher": {"name": "\u0000"}, "commits": [{"added": ["a\u0000"]}]}`), true)
		f.Add(uint8(i), "push", "", body, true)
		f.Add(uint8(i), "issues", "d-6", []byte(`[]`), true)
		f.Add(uint8(i), "push", "d-7", []byte(`{"ref": 1}`), true)
	}
	e := fuzzEnv(f)
	for _, fg := range forges {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin, Body: map[string]string{
			"name": fg.source, "kind": fg.kind, "repository": fg.repo, "default_branch": fg.branch, "secret": hookSecret}}, 201, nil)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "webhooks", "repository": "gitea/webhooks"}}, 201, nil)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{
		"name": "node-tools", "repository": "octo-org/fleet", "source_paths": []string{"modules/node-tools/"}}}, 201, nil)

	f.Fuzz(func(t *testing.T, which uint8, event, delivery string, body []byte, signed bool) {
		if !headerSafe(event) || !headerSafe(delivery) {
			return
		}
		fg := forges[int(which)%len(forges)]
		key := hookSecret
		if !signed {
			key = "not-the-secret-of-this-source"
		}
		m := hmac.New(sha256.New, []byte(key))
		m.Write(body)
		req, err := http.NewRequest("POST", e.URL+"/api/v1/hooks/"+fg.source, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range fg.headers(event, delivery, hex.EncodeToString(m.Sum(nil))) {
			req.Header.Set(k, v)
		}
		resp, out := fuzzDo(t, e, req)
		switch {
		case resp.StatusCode == 429 && strings.Contains(string(out), "bad signature"):
			// The fuzzer's wrongly signed deliveries spent this address's
			// budget: it is refused before any signature is checked.
			return
		case !signed:
			if resp.StatusCode != 401 {
				t.Fatalf("a wrongly signed delivery: %d %s", resp.StatusCode, out)
			}
			return
		case event == "" || delivery == "" || len(event) > 128 || len(delivery) > 128:
			if resp.StatusCode != 400 {
				t.Fatalf("no event or delivery, or one over 128 bytes: %d %s", resp.StatusCode, out)
			}
			return
		}
		var p fuzzPush
		pushErr := json.Unmarshal(body, &p)
		if event == "push" && pushErr != nil {
			if resp.StatusCode != 400 {
				t.Fatalf("a push that is not one (%v): %d %s", pushErr, resp.StatusCode, out)
			}
			return
		}
		mergeable := event == "push" && p.Ref == "refs/heads/"+fg.branch && strings.EqualFold(p.Repository.FullName, fg.repo) &&
			!p.Deleted && strings.Trim(p.After, "0") != ""
		if mergeable && !fuzzCommitID.MatchString(p.After) {
			if resp.StatusCode != 400 || !bytes.Contains(out, []byte("is not a commit id")) {
				t.Fatalf("a push whose after is not a commit id: %d %s", resp.StatusCode, out)
			}
			return
		}
		if resp.StatusCode == 400 && bytes.Contains(body, []byte(`\u0000`)) && bytes.Contains(out, []byte("NUL")) {
			return // PostgreSQL refuses text with a NUL (SQLite stores it): 400, never 500
		}
		if resp.StatusCode != 200 {
			t.Fatalf("a signed %s: %d %s", event, resp.StatusCode, out)
		}
		var r hookResult
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if r.Merge != nil && !mergeable {
			t.Fatalf("merged %+v from %s", p, out)
		}
		if mergeable && r.Merge == nil && !strings.HasPrefix(r.Status, "duplicate") {
			t.Fatalf("a push to %s of %s was not merged: %s", p.Ref, p.Repository.FullName, out)
		}
	})
}

// FuzzReport posts arbitrary report bodies as an enrolled host. A report
// is read leniently, yet one with an unknown outcome or a negative
// generation is refused with 400, and none is answered 5xx.
func FuzzReport(f *testing.F) {
	for _, s := range []string{
		`{"send": "", "generation": 0, "outcome": "refused", "reason": "not verified"}`,
		`{"send": "", "generation": 3, "digest": "sha256:00", "outcome": "applied", "attempt": 1, "host_version": "1.0.0",
		  "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:01Z",
		  "actions": [{"resource": "a.b", "action": "created"}], "running": {"a": {"build": 2}},
		  "checks": [{"resource": "a.s", "ok": true, "at": "2026-01-01T00:00:00Z"}], "from_the_future": [1]}`,
		`{"outcome": "failed", "generation": -1}`,
		`{"outcome": "ok"}`,
		`{"outcome": "rolled_back", "reason": "\u0000"}`,
		`{"send": "nope", "outcome": "applied", "generation": 1}`,
		`{"outcome": "applied", "generation": 9223372036854775807}`,
		`{"outcome": "upgraded", "attempt": 1e9}`,
		`{"outcome": "checked", "generation": 1, "logs": [{"resource": "a.s", "why": "restarted", "lines": ["bind: address already in use"]}]}`,
		`{"outcome": "checked", "generation": 1, "logs": [{"resource": "a.s", "why": "restarted", "lines": ["\u001b[2J\u0000"]}]}`,
		`[]`, `null`, ``, `{"outcome": "applied"} trailing`,
	} {
		f.Add([]byte(s))
	}
	e := fuzzEnv(f)
	// Thousands of reports a second from one host: the per-machine limit
	// (TestReports_RateLimitedPerMachine) would answer most of them 429.
	e.Ctl.Server.SetReportLimit(time.Nanosecond, 1<<30)
	e.Ctl.Server.SetReportBytes(1<<30, 1<<30) // and their bytes (TestReports_BytesBoundedPerMachine)
	host := e.Enroll("m1")
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := http.NewRequest("POST", e.URL+"/api/v1/host/reports", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+host.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, out := fuzzDo(t, e, req)
		var r models.Report
		decErr := json.Unmarshal(body, &r)
		valid := decErr == nil && models.ValidOutcome(r.Outcome) && r.Generation >= 0 && models.ValidateLogs(r.Logs) == nil &&
			models.ValidVersion("host_version", r.HostVersion, false) == nil && models.ValidVersion("launcher_version", r.LauncherVersion, false) == nil
		switch resp.StatusCode {
		case 201:
			if !valid {
				t.Fatalf("took a report it should refuse (%v, outcome %q, generation %d): %s", decErr, r.Outcome, r.Generation, out)
			}
		case 400, 403:
		default:
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		if !valid && resp.StatusCode != 400 {
			t.Fatalf("an unreadable report answered %d: %s", resp.StatusCode, out)
		}
	})
}

// FuzzBlobRange gets a blob with arbitrary Range (and If-Range) headers.
// Whatever is served is the blob's bytes where the answer says they are.
func FuzzBlobRange(f *testing.F) {
	for _, s := range []string{"", "bytes=0-", "bytes=0-0", "bytes=5-9", "bytes=-3", "bytes=1000-", "bytes=0-1,4-6", "bytes=9-5",
		"bytes=0-1,0-1,0-1", "bytes=--1", "items=0-1", "bytes= 2 - 3 ", "bytes=99999999999999999999-"} {
		f.Add(s, "")
	}
	f.Add("bytes=0-3", `"sha256:x"`)
	e := fuzzEnv(f)
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "blobs"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "blobs", `{"resources": []}`, data, ""); resp.StatusCode != 200 && resp.StatusCode != 201 {
		f.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	digest := models.DigestOf(data)
	f.Fuzz(func(t *testing.T, rng, ifRange string) {
		if !headerSafeSpaces(rng) || !headerSafeSpaces(ifRange) {
			return
		}
		req, err := http.NewRequest("GET", e.URL+models.BlobURL(digest), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.Admin)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		if ifRange != "" {
			req.Header.Set("If-Range", ifRange)
		}
		resp, out := fuzzDo(t, e, req)
		switch resp.StatusCode {
		case 200:
			if !bytes.Equal(out, data) {
				t.Fatalf("200 with %d bytes that are not the blob's", len(out))
			}
		case 206:
			ct, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			if ct != "multipart/byteranges" {
				checkPart(t, resp.Header.Get("Content-Range"), out, data)
				return
			}
			mr := multipart.NewReader(bytes.NewReader(out), params["boundary"])
			for {
				p, err := mr.NextPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(p)
				checkPart(t, p.Header.Get("Content-Range"), b, data)
			}
		case 416:
		default:
			t.Fatalf("Range %q: status %d %s", rng, resp.StatusCode, out)
		}
	})
}

// checkPart checks a 206 part against the Content-Range that labels it.
func checkPart(t *testing.T, cr string, got, data []byte) {
	t.Helper()
	var first, last, size int64
	if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &first, &last, &size); err != nil {
		t.Fatalf("Content-Range %q: %v", cr, err)
	}
	if size != int64(len(data)) || first < 0 || last < first || last >= size || cr != "bytes "+strconv.FormatInt(first, 10)+"-"+strconv.FormatInt(last, 10)+"/"+strconv.FormatInt(size, 10) {
		t.Fatalf("Content-Range %q for a blob of %d bytes", cr, len(data))
	}
	if !bytes.Equal(got, data[first:last+1]) {
		t.Fatalf("Content-Range %q labels %d bytes that are not those", cr, len(got))
	}
}

// headerSafeSpaces is headerSafe that allows inner spaces.
func headerSafeSpaces(s string) bool {
	return headerSafe(strings.ReplaceAll(s, " ", "")) && strings.TrimSpace(s) == s
}
