package terraform_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/terraform"
)

// TestFind: a missing or wrong-version terraform is an error that
// names the path and the version expected; the pinned one is found.
func TestFind(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wrong := filepath.Join(dir, "terraform-old")
	if err := os.WriteFile(wrong, []byte("#!/bin/sh\necho 'Terraform v1.5.7'\necho 'on linux_amd64'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "terraform-broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts terraform.Options
		want []string
	}{
		{"WrongVersion", terraform.Options{Path: wrong}, []string{wrong, "1.5.7", "1.11.4"}},
		{"NotTerraform", terraform.Options{Path: broken}, []string{broken, "1.11.4"}},
		{"Missing", terraform.Options{Path: filepath.Join(dir, "nope")}, []string{filepath.Join(dir, "nope"), "1.11.4"}},
		{"OtherPinnedVersion", terraform.Options{Version: "1.9.0"}, []string{"no terraform 1.9.0 found", "downloading is off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := terraform.Find(ctx, tc.opts)
			if err == nil {
				t.Fatal("got no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// The pinned version on the PATH, and by explicit path.
	p, err := terraform.Find(ctx, terraform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := terraform.Find(ctx, terraform.Options{Path: p}); err != nil || got != p {
		t.Fatalf("explicit path: got %q, %v", got, err)
	}
}
