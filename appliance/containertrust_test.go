package appliance

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestTrustForContainers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test writes the CA as root does: run it as root (make test)")
	}
	root := t.TempDir()
	ca := filepath.Join(root, "agent-ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	podman := filepath.Join(root, "etc", "containers", "certs.d")
	docker := filepath.Join(root, "etc", "docker", "certs.d")
	if err := os.MkdirAll(filepath.Dir(podman), 0o755); err != nil { // podman installed, docker not
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	wrote, err := trustForContainers(log, "127.0.0.1:8443", ca, []string{podman, docker})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(podman, "127.0.0.1:8443", "ca.crt")
	if !slices.Equal(wrote, []string{want}) {
		t.Errorf("wrote %v, want only %s (docker is not installed)", wrote, want)
	}
	got, _ := os.ReadFile(want)
	if orig, _ := os.ReadFile(ca); string(got) != string(orig) {
		t.Errorf("%s: got %q, want the CA bundle", want, got)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "docker")); !os.IsNotExist(err) {
		t.Errorf("a certs.d for an engine that is not installed was created: %v", err)
	}
	// A second boot rewrites the same file.
	if _, err := trustForContainers(log, "127.0.0.1:8443", ca, []string{podman, docker}); err != nil {
		t.Fatal(err)
	}
	if _, err := trustForContainers(log, "127.0.0.1:8443", filepath.Join(root, "missing.pem"), []string{podman}); err == nil {
		t.Error("a missing CA file gave no error")
	}
}
