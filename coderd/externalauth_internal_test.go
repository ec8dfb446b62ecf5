package coderd

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://git.test/org/repo.git":            "https://git.test/org/repo.git",
		"https://bob:s3cret@git.test/org/repo.git": "https://git.test/org/repo.git",
		"https://tok@git.test/a@b/repo.git":        "https://git.test/a@b/repo.git",
		"git.test/org/repo.git":                    "git.test/org/repo.git",
		"ssh://git@git.test:2222/org/repo.git":     "ssh://git.test:2222/org/repo.git",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q): got %q, want %q", in, got, want)
		}
	}
}
