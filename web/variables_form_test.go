package web_test

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// varsForm reads the variables form of a machine's page as a browser
// fills it: the textarea's text and the generation it was read at.
func varsForm(t *testing.T, b *browser, path string) (text, gen string) {
	t.Helper()
	_, page := b.get(path)
	ta := regexp.MustCompile(`(?s)<textarea id="vars" name="vars"[^>]*>(.*?)</textarea>`).FindStringSubmatch(page)
	g := regexp.MustCompile(`name="generation" value="(\d+)"`).FindStringSubmatch(page)
	if ta == nil || g == nil {
		t.Fatalf("no variables form:\n%.2000s", page)
	}
	return html.UnescapeString(ta[1]), g[1]
}

// TestVariables_AMultiLineValueSurvivesTheDashboard: a variable's value
// may hold newlines (an env file, a certificate), but the form wrote each
// variable as one bare KEY=value line and read it back line by line,
// trimmed: "LOG_LEVEL=debug\nWORKERS=4" showed as two variables, and an
// operator who changed only the port saved a variable WORKERS nobody set
// and cut env_file to its first line; a value's trailing space was lost;
// a certificate's lines (no "=") refused every later save.
func TestVariables_AMultiLineValueSurvivesTheDashboard(t *testing.T) {
	e, op, vw := fixture(t)
	const envFile = "LOG_LEVEL=debug\nWORKERS=4"
	const pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"env_file": envFile, "port": "8080", "prompt": "$ ", "ca": pem}}}, 200, nil)

	_, page := vw.get("/machines/m1")
	if m := regexp.MustCompile(`(?s)<pre>([^<]*)</pre>`).FindStringSubmatch(page); m != nil {
		for _, line := range strings.Split(html.UnescapeString(m[1]), "\n") {
			if strings.HasPrefix(line, "WORKERS=") {
				t.Errorf("a viewer is shown a variable WORKERS the machine does not have:\n%s", html.UnescapeString(m[1]))
			}
		}
	}
	text, gen := varsForm(t, op, "/machines/m1")
	text = strings.Replace(text, "port=8080", "port=9090", 1)
	if st, body := op.post("/machines/m1/variables", url.Values{"generation": {gen}, "vars": {text}}, true); st != 303 {
		t.Fatalf("saving the form with only the port changed: %d\n%.1500s", st, body)
	}
	var got struct {
		Variables map[string]string `json:"variables"`
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/variables", Token: e.Admin}, 200, &got)
	want := map[string]string{"env_file": envFile, "port": "9090", "prompt": "$ ", "ca": pem}
	if len(got.Variables) != len(want) {
		t.Fatalf("after changing only the port: %q, want %q", got.Variables, want)
	}
	for k, v := range want {
		if got.Variables[k] != v {
			t.Errorf("after changing only the port, %s is %q, want %q", k, got.Variables[k], v)
		}
	}
}

// TestVariables_AQuotedValueIsText: the form reads a value in quotes as Go
// writes a string, so `"caf\xe9"` is the byte 0xe9, not UTF-8: SQLite kept
// it (the API then said U+FFFD), PostgreSQL refused it.
func TestVariables_AQuotedValueIsText(t *testing.T) {
	for _, dialect := range []string{store.SQLite, store.Postgres} {
		t.Run(dialect, func(t *testing.T) {
			e := ctltest.Start(t, dialect)
			e.AddUser("olga", "operator")
			e.Enroll("m1")
			op := newBrowser(t, e.URL)
			op.login("olga", "password-of-olga")
			_, g := varsForm(t, op, "/machines/m1")
			st, body := op.post("/machines/m1/variables", url.Values{"generation": {g}, "vars": {`latin1="caf\xe9"` + "\r\n"}}, true)
			if st != 400 || !strings.Contains(body, "UTF-8") {
				t.Errorf("a value in quotes that is not UTF-8: %d", st)
			}
		})
	}
}
