package controlplane_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"airgapcoder/certs"
	"airgapcoder/coderd/coderdtest"
	"airgapcoder/controlplane"
	"airgapcoder/internal/testport"
	"airgapcoder/internal/testtier"
	"airgapcoder/internal/testwait"
)

// TestServerExternalPostgresTLS: a site database that accepts TLS only,
// with a certificate the site's CA issued, as docs/multi-node.md sets it up
// (postgres-url with sslmode=verify-full and sslrootcert). The server
// starts and keeps its state there, and the listener that waits for other
// replicas' notifications is a TLS connection too. A postgres-url that
// trusts another CA, or names the database by a name its certificate
// lacks, stops the start with what is wrong and what to add.
func TestServerExternalPostgresTLS(t *testing.T) {
	port, pki := tlsPostgres(t)
	ca := filepath.Join(pki, "ca.pem")
	dir := t.TempDir()
	// The appliance passes its trust store (postgres-url without an
	// sslrootcert): the CA among the system roots.
	url := fmt.Sprintf("postgres://postgres@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s", port, filepath.Join(pki, certs.TrustFile))
	anon, stop := runServer(t, controlplane.Config{PostgresURL: url, ConfigDir: filepath.Join(dir, "config")})
	ctx := context.Background()
	coderdtest.CreateFirstUser(t, anon)
	if has, err := anon.HasFirstUser(ctx); err != nil || !has {
		t.Fatalf("first user: %v, %v", has, err)
	}
	// Every connection the server holds is encrypted: the database's
	// pg_stat_ssl says so for each of its client backends.
	psql := func(query string) string {
		out, err := exec.Command("psql", "-X", "-A", "-t", url, "-c", query).CombinedOutput()
		if err != nil {
			t.Fatalf("psql %q: %v\n%s", query, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	got := psql(`SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
		WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()`)
	parts := strings.Split(got, "|")
	if len(parts) != 2 || parts[0] != parts[1] || parts[1] == "0" {
		t.Errorf("server's connections, encrypted|all: %q; want all encrypted", got)
	}
	listening := func() bool {
		return psql(`SELECT count(*) FROM pg_stat_activity WHERE state = 'idle' AND query LIKE 'LISTEN%'`) != "0"
	}
	testwait.For(t, 10*time.Second, "a connection of the server LISTENing (the notifications listener)", testwait.Bool(listening))
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	otherCA := filepath.Join(t.TempDir(), "other")
	if _, err := certs.Generate(otherCA, []string{"localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url string
		want      []string
	}{
		{"AnotherCA", fmt.Sprintf("postgres://postgres@localhost:%d/postgres?sslmode=verify-full&sslrootcert=%s", port, filepath.Join(certs.CertsDir(otherCA), "ca.pem")),
			[]string{"open database", "certificate", "a CA this host does not trust", "sslrootcert=FILE"}},
		{"NameNotInCertificate", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s", port, ca),
			[]string{"open database", "a name the certificate holds (localhost), not 127.0.0.1"}},
		{"NoTLS", fmt.Sprintf("postgres://postgres@localhost:%d/postgres?sslmode=disable", port),
			[]string{"open database", "no encryption", "encrypted connections only", "sslmode=verify-full"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := controlplane.New(controlplane.Config{
				HTTPAddress: "127.0.0.1:0", PostgresURL: tc.url, ConfigDir: filepath.Join(t.TempDir(), "config"),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = srv.Run(ctx)
			if err == nil {
				t.Fatal("Run returned nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "password") {
				t.Errorf("error %q mentions a password", err)
			}
		})
	}
}

// tlsPostgres starts Debian's PostgreSQL (the one make test uses) in a
// cluster of the test's own, on loopback, accepting TLS connections only,
// with a certificate for "localhost" that a CA of its own (package certs)
// issued. It returns the port and the certs folder: ca.pem, trust.pem.
func tlsPostgres(t *testing.T) (int, string) {
	t.Helper()
	testtier.Heavy(t, "starts PostgreSQL")
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(bins) == 0 {
		t.Fatal("no /usr/lib/postgresql/*/bin: scripts/install-deps.sh installs PostgreSQL")
	}
	sort.Slice(bins, func(i, j int) bool { return major(bins[i]) < major(bins[j]) })
	bin := bins[len(bins)-1]
	// Not t.TempDir: its parent is private, and PostgreSQL runs as the
	// postgres user when the tests run as root.
	dir, err := os.MkdirTemp("", "pgtls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	command := func(name string, args ...string) *exec.Cmd {
		if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
		return exec.Command(filepath.Join(bin, name), args...)
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	// own gives a file to the user PostgreSQL runs as.
	own := func(string) {}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		own = func(p string) {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	own(data)
	run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")

	pki := filepath.Join(dir, "pki")
	if _, err := certs.Generate(pki, []string{"localhost"}, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"pg_hba.conf": []byte("local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n"),
	}
	for _, f := range []string{"server.pem", "server-key.pem"} {
		if files[f], err = os.ReadFile(filepath.Join(certs.CertsDir(pki), f)); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(data, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		own(filepath.Join(data, name))
	}
	port := testport.Port(t)
	t.Cleanup(func() { command("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop").Run() })
	run("pg_ctl", "-D", data, "-l", filepath.Join(data, "log"), "-w", "-t", "60", "-o",
		fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off -c ssl=on -c ssl_cert_file=server.pem -c ssl_key_file=server-key.pem", port, data),
		"start")
	return port, certs.CertsDir(pki)
}

// major is the major version in /usr/lib/postgresql/<major>/bin.
func major(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}
