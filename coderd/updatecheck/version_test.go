package updatecheck

import "testing"

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"v1.2.3", "v1.2.3", 0},
		{"1.2.3", "v1.2.3", 0},
		{"v1.2.3+abc", "v1.2.3+def", 0},
		{"v1.2.4", "v1.2.3", 1},
		{"v1.3.0", "v1.2.9", 1},
		{"v2.0.0", "v1.99.99", 1},
		{"v1.10.0", "v1.9.0", 1},
		{"v1.2.3", "v1.2.3-rc.1", 1},
		{"v1.2.3-rc.2", "v1.2.3-rc.1", 1},
		{"v1.2.3-rc.10", "v1.2.3-rc.9", 1},
		{"v1.2.3-beta", "v1.2.3-alpha", 1},
		{"v1.2.3-alpha.1", "v1.2.3-alpha", 1},
		{"v1.2.3-alpha.beta", "v1.2.3-alpha.1", 1},
		{"v1.2.3-rc.1", "v1.2.2", 1},
		{"v0.0.1", "v0.0.0-devel", 1},
		{"v0.0.0-alpha", "v0.0.0-devel", 1},
		{"v0.0.0-rc.1", "v0.0.0-devel+abc123", 1},
		{"v0.0.0-devel", "v0.0.0-devel+abc123", 0},
		{"v0.0.0-devel.1", "v0.0.0-devel", 1}, // two devel builds: ordinary precedence
	}
	for _, tt := range tests {
		t.Run(tt.a+"_vs_"+tt.b, func(t *testing.T) {
			t.Parallel()
			a, err := parseVersion(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := parseVersion(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if got := compareVersions(a, b); got != tt.want {
				t.Errorf("compare(%s, %s): got %d, want %d", tt.a, tt.b, got, tt.want)
			}
			if got := compareVersions(b, a); got != -tt.want {
				t.Errorf("compare(%s, %s): got %d, want %d", tt.b, tt.a, got, -tt.want)
			}
		})
	}
}

func TestParseVersionRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"v",
		"v1",
		"v1.2",
		"v1.2.3.4",
		"v1..3",
		"v1.2.x",
		"v1.-2.3",
		"v+1.2.3",
		"v1.2.3-",
		"v1.2.3-rc..1",
		"v1.2.3-rc_1",
		"latest",
		"v99999999999999999999.0.0",
	} {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			if v, err := parseVersion(s); err == nil {
				t.Errorf("parseVersion(%q): got %+v, want an error", s, v)
			}
		})
	}
}
