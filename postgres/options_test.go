package postgres

import (
	"strings"
	"testing"
)

func TestNewRejects(t *testing.T) {
	good := Options{DataDir: "/srv/pg/data", RuntimeDir: "/run/pg", CacheDir: "/srv/cache", BinariesDir: "/srv/cache/bin"}
	if _, err := New(good); err != nil {
		t.Fatalf("New(%+v): %v", good, err)
	}
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"no data dir", func(o *Options) { o.DataDir = "" }, "DataDir is required"},
		{"data inside runtime", func(o *Options) { o.DataDir = "/run/pg/data" }, "overlap"},
		{"binaries inside runtime", func(o *Options) { o.BinariesDir = "/run/pg/bin" }, "overlap"},
		{"cache is data", func(o *Options) { o.CacheDir = o.DataDir }, "overlap"},
		{"short version", func(o *Options) { o.Version = "15" }, "MAJOR.MINOR.PATCH"},
		{"port", func(o *Options) { o.Port = 70000 }, "not a TCP port"},
		{"quote", func(o *Options) { o.DataDir = `/srv/"pg"` }, "cannot quote"},
		{"long socket path", func(o *Options) { o.RuntimeDir = "/run/" + strings.Repeat("x", 100) }, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := good
			tt.change(&opts)
			_, err := New(opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: got %v, want an error with %q", err, tt.want)
			}
		})
	}
}
