package site

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestVendorMatchesLockFile fails when the committed vendored browser code
// (static/vendor/VERSIONS, written by make web-vendor) is not what
// web/package-lock.json pins: same packages, versions and tarball integrity.
func TestVendorMatchesLockFile(t *testing.T) {
	raw, err := os.ReadFile("../../web/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatalf("parse package-lock.json: %v", err)
	}
	f, err := staticFS.Open("static/vendor/VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string][2]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			t.Fatalf("VERSIONS line %q: want name version integrity", line)
		}
		got[fields[0]] = [2]string{fields[1], fields[2]}
	}
	want := 0
	for key, p := range lock.Packages {
		name, ok := strings.CutPrefix(key, "node_modules/")
		if !ok {
			continue
		}
		want++
		v, ok := got[name]
		if !ok {
			t.Errorf("%s %s is in package-lock.json but not vendored: run make web-vendor", name, p.Version)
			continue
		}
		if v != [2]string{p.Version, p.Integrity} {
			t.Errorf("%s: vendored %s %s, lock file pins %s %s: run make web-vendor", name, v[0], v[1], p.Version, p.Integrity)
		}
	}
	if len(got) != want {
		t.Errorf("VERSIONS lists %d packages, package-lock.json %d: run make web-vendor", len(got), want)
	}
	for _, f := range []string{"xterm.js", "xterm.css", "addon-fit.js"} {
		if _, err := staticFS.Open("static/vendor/" + f); err != nil {
			t.Errorf("vendored %s: %v", f, err)
		}
	}
}

func TestOwns(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/", true}, {"/login", true}, {"/setup", true}, {"/logout", true}, {"/workspaces", true},
		{"/workspaces/new", true}, {"/templates", true}, {"/favicon.ico", true}, {"/static/site.css", true},
		{"/@alice/dev", true}, {"/@alice/dev/terminal", true}, {"/@alice/dev/build", true},
		{"/@alice/dev/apps/web/", false}, {"/@alice/dev/ports/8080/", false}, {"/@alice/dev/apps", false},
		{"/@alice", false}, {"/@/dev", false}, {"/api/v2/buildinfo", false}, {"/healthz", false},
		{"/bin/coder-linux-amd64", false}, {"/metrics", false}, {"/workspaces/x", false},
	} {
		if got := Owns(tc.path); got != tc.want {
			t.Errorf("Owns(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
