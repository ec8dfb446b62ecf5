package auditjournal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"airgapcoder/coderd/auditjournal"
	"airgapcoder/internal/testfs"
)

// golden are the records of testdata/v0.jsonl and testdata/v1.jsonl.
var golden = []auditjournal.Record{
	{ID: "3f2b8a50-5b0e-4c1e-9d3a-0c6a1f0e2b11", Time: time.Date(2026, 11, 20, 9, 15, 2, 123456000, time.UTC), UserAgent: "coder appliance v2026.11.1",
		Action: "install", ResourceType: "deployment", ResourceTarget: "2026.11.1", StatusCode: 200, Success: true,
		AdditionalFields: json.RawMessage(`{"host":"coder-1","os_user":"root"}`), Description: "install of release 2026.11.1 (by root on coder-1)"},
	{ID: "9a1c4e77-2f63-4d8b-b0a4-5e9f3c2d7a08", Time: time.Date(2026, 11, 21, 14, 0, 59, 0, time.UTC), UserAgent: "coder appliance v2026.11.2",
		Action: "upgrade", ResourceType: "deployment", ResourceTarget: "2026.11.3", StatusCode: 500, Success: false,
		AdditionalFields: json.RawMessage(`{"error":"the new server did not become healthy","host":"coder-1","os_user":"root"}`),
		Description:      "upgrade to 2026.11.3: failed: the new server did not become healthy (by root on coder-1)"},
	{ID: "c0ffee00-1234-4abc-8def-000000000042", Time: time.Date(2026, 11, 21, 15, 30, 0, 500000000, time.UTC), UserID: "5d1e0b2a-7c3f-4e8a-9b6d-2a4c6e8f0a1b",
		Username: "admin", IP: "10.0.0.7", UserAgent: "Mozilla/5.0", Action: "create", ResourceType: "workspace", ResourceID: "e4b2c1d0-aaaa-4bbb-8ccc-dddddddddddd",
		ResourceTarget: "dev", WorkspaceOwner: "admin", WorkspaceName: "dev", StatusCode: 201, Success: true, AdditionalFields: json.RawMessage(`{}`),
		Description: "admin created workspace admin/dev"},
}

// readAll reads the journal at path from offset, failing on any line it
// cannot read.
func readAll(t *testing.T, path string, offset int64) ([]auditjournal.Record, int64) {
	t.Helper()
	r, err := auditjournal.OpenReader(path, offset)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []auditjournal.Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, r.Offset()
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		out = append(out, rec)
	}
}

func withVersion(recs []auditjournal.Record, v int) []auditjournal.Record {
	out := make([]auditjournal.Record, len(recs))
	for i, r := range recs {
		r.V = v
		out[i] = r
	}
	return out
}

// TestFormat: every version's file reads as the same records, and Append
// writes today's version byte for byte. A failure here means the format
// changed: make a new version (see the package comment) rather than edit
// testdata.
func TestJournalFormat(t *testing.T) {
	for _, tc := range []struct {
		file    string
		version int
	}{
		{"v0.jsonl", 0}, // written before versions existed
		{"v1.jsonl", 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			got, offset := readAll(t, path, 0)
			if want := withVersion(golden, tc.version); !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, want)
			}
			if st, err := os.Stat(path); err != nil || offset != st.Size() {
				t.Errorf("offset after reading: got %d, want the file's size (%v)", offset, err)
			}
		})
	}
	t.Run("append writes v1", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.jsonl")
		// A record read from an earlier version is written in today's.
		if err := auditjournal.Append(path, withVersion(golden, 0)...); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("testdata", "v1.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
}

// TestRoundTrip: records come back as appended, with an id and a time
// filled in, from a journal only its owner can read.
func TestJournalRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "audit-journal.jsonl")
	if _, err := auditjournal.OpenReader(path, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing journal: got %v, want fs.ErrNotExist", err)
	}
	in := auditjournal.Record{UserAgent: "coder appliance test", Action: "restore", ResourceType: "deployment", ResourceTarget: "2026.11.2",
		StatusCode: 200, Success: true, AdditionalFields: json.RawMessage(`{"backup_file": "/root/b.dump"}`), Description: "restore of the database from b.dump"}
	before := time.Now().Add(-time.Second)
	if err := auditjournal.Append(path, in, golden[2]); err != nil {
		t.Fatal(err)
	}
	got, offset := readAll(t, path, 0)
	if len(got) != 2 {
		t.Fatalf("got %d records, want 2", len(got))
	}
	if got[0].ID == "" || got[0].Time.Before(before) || got[0].Time.After(time.Now()) || got[0].Time.Location() != time.UTC {
		t.Errorf("filled in: id %q, time %v; want a new id and now (UTC)", got[0].ID, got[0].Time)
	}
	in.V, in.ID, in.Time, in.AdditionalFields = 1, got[0].ID, got[0].Time, json.RawMessage(`{"backup_file":"/root/b.dump"}`)
	if want := withVersion(golden[2:], 1)[0]; !reflect.DeepEqual(got, []auditjournal.Record{in, want}) {
		t.Errorf("got\n%+v\nwant\n%+v", got, []auditjournal.Record{in, want})
	}
	for p, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", p, st.Mode().Perm(), err, mode)
		}
	}

	// Reading again from where the last read ended gives only what was
	// appended since; an offset outside the file reads it all.
	if err := auditjournal.Append(path, golden[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ := readAll(t, path, offset); len(got) != 1 || got[0].ID != golden[0].ID {
		t.Errorf("from offset %d: got %+v, want the one record appended", offset, got)
	}
	for _, off := range []int64{-1, 1 << 40} {
		if got, _ := readAll(t, path, off); len(got) != 3 {
			t.Errorf("from offset %d: got %d records, want all 3", off, len(got))
		}
	}
}

// TestAppendRefuses: a record the server could not store is refused at
// the source, and nothing of the call is written.
func TestJournalAppendRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  auditjournal.Record
		want string
	}{
		{"no action", auditjournal.Record{ResourceType: "deployment"}, "needs an id, a time and an action"},
		{"id not a UUID", auditjournal.Record{ID: "42", Action: "install"}, `id "42" is not a UUID`},
		{"user id not a UUID", auditjournal.Record{Action: "install", UserID: "admin"}, `user_id "admin" is not a UUID`},
		{"ip not an address", auditjournal.Record{Action: "install", IP: "coder-1"}, `ip "coder-1" is not an IP address`},
		{"fields not an object", auditjournal.Record{Action: "install", AdditionalFields: json.RawMessage(`["root"]`)}, "not a JSON object"},
		{"fields not JSON", auditjournal.Record{Action: "install", AdditionalFields: json.RawMessage(`{os_user: root}`)}, "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			err := auditjournal.Append(path, golden[0], tc.rec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
			if b, _ := os.ReadFile(path); len(b) != 0 {
				t.Errorf("the journal holds %q; want nothing", b)
			}
		})
	}
}

// TestUnreadableLines: a line in a newer format, or one that is not a
// record, is reported with where it is, and the lines after it are read.
func TestJournalUnreadableLines(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("testdata", "v1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(v1, []byte("\n"))
	for _, tc := range []struct {
		name        string
		line        string
		wantVersion int
		unknown     bool
		wantMessage string
	}{
		{"newer version", `{"v":2,"id":"x","when":"2027-01-01T00:00:00Z","what":"install"}`, 2, true,
			"format version 2; this release reads versions up to 1"},
		{"torn write", `{"v":1,"id":"0b6d","action":"ins`, 0, false, "not a record"},
		{"no id", `{"v":1,"time":"2026-11-20T09:15:02Z","action":"install","resource_type":"deployment","status_code":200,"success":true}`, 1, false,
			"needs an id, a time and an action"},
		{"legacy without action", `{"id":"x","time":"2026-11-20T09:15:02Z"}`, 0, false, "needs an id, a time and an action"},
		// The server would refuse these every time it read the journal.
		{"id not a UUID", `{"v":1,"id":"x","time":"2026-11-20T09:15:02Z","action":"install"}`, 1, false, `id "x" is not a UUID`},
		{"legacy ip not an address", `{"id":"3f2b8a50-5b0e-4c1e-9d3a-0c6a1f0e2b11","time":"2026-11-20T09:15:02Z","action":"install","ip":"localhost"}`, 0, false,
			`ip "localhost" is not an IP address`},
		{"version 0 spelled out", `{"v":0,"id":"x","time":"2026-11-20T09:15:02Z","action":"install"}`, 0, false, "no format version 0"},
		{"version not a number", `{"v":"2","id":"x"}`, 0, false, "not a record"},
		{"fields not an object", `{"v":1,"id":"3f2b8a50-5b0e-4c1e-9d3a-0c6a1f0e2b11","time":"2026-11-20T09:15:02Z","action":"install","additional_fields":"root"}`, 1, false,
			"not a JSON object"},
		{"empty line", ``, 0, false, "not a record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			content := string(first) + "\n" + tc.line + "\n" + string(first) + "\n"
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := auditjournal.OpenReader(path, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if _, err := r.Next(); err != nil {
				t.Fatalf("first line: %v", err)
			}
			_, err = r.Next()
			var le *auditjournal.LineError
			if !errors.As(err, &le) {
				t.Fatalf("got %v, want a *LineError", err)
			}
			if le.Offset != int64(len(first)+1) || le.Version != tc.wantVersion {
				t.Errorf("got offset %d, version %d; want %d, %d", le.Offset, le.Version, len(first)+1, tc.wantVersion)
			}
			if errors.Is(err, auditjournal.ErrUnknownVersion) != tc.unknown {
				t.Errorf("errors.Is(%v, ErrUnknownVersion): got %v, want %v", err, !tc.unknown, tc.unknown)
			}
			if !strings.Contains(err.Error(), tc.wantMessage) {
				t.Errorf("message %q does not say %q", err, tc.wantMessage)
			}
			if rec, err := r.Next(); err != nil || rec.ID != golden[0].ID {
				t.Errorf("the line after: %+v, %v", rec, err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("at the end: got %v, want io.EOF", err)
			}
			if r.Offset() != int64(len(content)) {
				t.Errorf("offset: got %d, want %d", r.Offset(), len(content))
			}
		})
	}
}

// TestTornWrite: a line without its newline is not read (it may still be
// being written); when the next append comes, it becomes one broken line
// and the new record is whole.
func TestJournalTornWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := auditjournal.Append(path, golden[0]); err != nil {
		t.Fatal(err)
	}
	_, offset := readAll(t, path, 0)
	testfs.Append(t, path, `{"v":1,"id":"0b6d","action":"ins`)
	if got, off := readAll(t, path, offset); len(got) != 0 || off != offset {
		t.Fatalf("with a torn tail: got %d records, offset %d; want none, %d", len(got), off, offset)
	}
	if err := auditjournal.Append(path, golden[1]); err != nil {
		t.Fatal(err)
	}
	r, err := auditjournal.OpenReader(path, offset)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var le *auditjournal.LineError
	if _, err := r.Next(); !errors.As(err, &le) || le.Offset != offset {
		t.Fatalf("the torn line: got %v, want a *LineError at %d", err, offset)
	}
	if rec, err := r.Next(); err != nil || rec.ID != golden[1].ID {
		t.Fatalf("the record after the torn line: %+v, %v", rec, err)
	}
}

// TestConcurrentAppends: tools appending at once never interleave their
// lines.
func TestJournalConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-journal.jsonl")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			w, err := auditjournal.Open(path)
			if err != nil {
				t.Error(err)
				return
			}
			defer w.Close()
			for j := range 50 {
				r := auditjournal.Record{Action: "install", ResourceType: "deployment", Description: fmt.Sprintf("%d-%d", i, j),
					AdditionalFields: json.RawMessage(`{"os_user":"root"}`)}
				if err := w.Append(r, r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _ := readAll(t, path, 0)
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.ID] = true
	}
	if len(got) != 8*50*2 || len(ids) != len(got) {
		t.Fatalf("got %d records with %d ids; want %d, all different", len(got), len(ids), 8*50*2)
	}
}
