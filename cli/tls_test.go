package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/coderdtest"
)

// tlsFiles are a CA and a serving certificate for 127.0.0.1 and localhost,
// made the way an operator would: coder certs generate.
type tlsFiles struct{ CA, Cert, Key string }

func generateTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	mustRun(t, baseEnv(t), "certs", "generate", "--hosts", "127.0.0.1,localhost", "--dir", dir)
	d := filepath.Join(dir, "certs")
	return tlsFiles{CA: filepath.Join(d, "ca.pem"), Cert: filepath.Join(d, "server.pem"), Key: filepath.Join(d, "server-key.pem")}
}

// curl runs curl and returns its stdout, stderr and exit code.
func curl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command("curl", append([]string{"-sS", "-m", "10"}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("curl: %v", err)
	}
	return stdout.String(), stderr.String(), code
}

// TestServerTLS: coder server with the CODER_TLS_* environment serves
// HTTPS; plain HTTP redirects everything but /healthz to the https access
// URL; HTTPS answers carry Strict-Transport-Security and the session
// cookie is Secure, HttpOnly and SameSite=Lax; the CLI trusts the
// deployment only with --ca-file (stored by coder login for later
// commands); an external provisioner connects with the CA. (Workspaces,
// coder ssh and OpenSSH over HTTPS: the appliance tests and e2e.)
func TestServerTLS(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (make deps)")
	}
	files := generateTLSFiles(t)
	tlsAddr := freeAddr(t)
	dir := t.TempDir()
	// startServer waits for /healthz over plain HTTP, which answers as
	// soon as the server is up.
	srv := startServer(t,
		"CODER_TLS_ENABLE=true", "CODER_TLS_ADDRESS="+tlsAddr,
		"CODER_TLS_CERT_FILE="+files.Cert, "CODER_TLS_KEY_FILE="+files.Key,
	)
	plainHTTP := srv.URL
	https := "https://" + tlsAddr

	t.Run("HTTPS", func(t *testing.T) {
		if out, errOut, code := curl(t, "--cacert", files.CA, https+"/healthz"); code != 0 || out != "OK" {
			t.Fatalf("curl --cacert %s/healthz: exit %d, %q %s; want OK", https, code, out, errOut)
		}
		out, _, code := curl(t, "--cacert", files.CA, "-D", "-", "-o", "/dev/null", https+"/api/v2/buildinfo")
		if code != 0 || !strings.Contains(strings.ToLower(out), "strict-transport-security: max-age=31536000") {
			t.Fatalf("HTTPS headers (exit %d):\n%s\nwant Strict-Transport-Security: max-age=31536000", code, out)
		}
		if _, errOut, code := curl(t, https+"/healthz"); code != 60 {
			t.Fatalf("curl without the CA: exit %d (%s), want 60 (certificate not trusted)", code, errOut)
		}
	})

	t.Run("PlainHTTPRedirects", func(t *testing.T) {
		for _, method := range []string{"GET", "POST"} {
			out, _, code := curl(t, "-X", method, "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", plainHTTP+"/api/v2/users/login?next=%2Fworkspaces&x=1")
			if want := "308 " + https + "/api/v2/users/login?next=%2Fworkspaces&x=1"; code != 0 || out != want {
				t.Fatalf("%s over plain HTTP: exit %d, got %q, want %q", method, code, out, want)
			}
		}
		if out, _, code := curl(t, "-w", " %{http_code}", plainHTTP+"/healthz"); code != 0 || out != "OK 200" {
			t.Fatalf("/healthz over plain HTTP: exit %d, %q; want OK 200", code, out)
		}
		// A client following the redirect lands on the API over HTTPS.
		if out, _, code := curl(t, "-L", "--cacert", files.CA, plainHTTP+"/api/v2/buildinfo"); code != 0 || !strings.Contains(out, `"version":"`+testVersion+`"`) {
			t.Fatalf("curl -L over plain HTTP: exit %d, %s", code, out)
		}
	})

	cfgDir := filepath.Join(dir, "cli")
	env := baseEnv(t, "CODER_CONFIG_DIR="+cfgDir)
	t.Run("CLIWithoutCA", func(t *testing.T) {
		_, stderr, code := run(t, env, "login", https, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "tls-password-1")
		if code != 1 || !strings.Contains(stderr, "x509: certificate signed by unknown authority") || !strings.Contains(stderr, "--ca-file") {
			t.Fatalf("coder login without the CA: exit %d, want 1 with an x509 error and the --ca-file hint\n%s", code, stderr)
		}
	})
	t.Run("CLIWithCA", func(t *testing.T) {
		mustRun(t, env, "login", https, "--ca-file", files.CA, "--first-user-username", "admin", "--first-user-email", "admin@example.com", "--first-user-password", "tls-password-1")
		// Later commands trust the CA login stored, without --ca-file.
		if out := mustRun(t, env, "users", "list"); !strings.Contains(out, "admin") {
			t.Fatalf("coder users list: %q", out)
		}
		if _, err := os.Stat(filepath.Join(cfgDir, "ca.pem")); err != nil {
			t.Fatalf("coder login did not store the CA: %v", err)
		}
		// CODER_CA_FILE works like --ca-file, for a fresh config.
		fresh := baseEnv(t, "CODER_CONFIG_DIR="+filepath.Join(dir, "fresh"), "CODER_CA_FILE="+files.CA)
		mustRun(t, fresh, "login", https, "--email", "admin@example.com", "--password", "tls-password-1")
	})

	t.Run("SessionCookie", func(t *testing.T) {
		out, _, code := curl(t, "--cacert", files.CA, "-D", "-", "-o", "/dev/null", "-H", "Content-Type: application/json",
			"-d", `{"email":"admin@example.com","password":"tls-password-1"}`, https+"/api/v2/users/login")
		var cookie string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.ToLower(line), "set-cookie: coder_session_token=") {
				cookie = strings.TrimSpace(line)
			}
		}
		for _, attr := range []string{"; Secure", "; HttpOnly", "; SameSite=Lax"} {
			if code != 0 || !strings.Contains(cookie, attr) {
				t.Fatalf("session cookie %q (exit %d): want %s\n%s", cookie, code, attr, out)
			}
		}
	})

	t.Run("ExternalProvisioner", func(t *testing.T) {
		args := []string{"provisionerd", "start", "--url", https, "--psk", psk, "--name", "tls-daemon", "--cache-dir", filepath.Join(dir, "pd-cache")}
		_, stderr, code := run(t, baseEnv(t), args...)
		if code != 1 || !strings.Contains(stderr, "x509") {
			t.Fatalf("provisionerd without the CA: exit %d, want 1 with an x509 error\n%s", code, stderr)
		}
		p := start(t, baseEnv(t), append(args, "--ca-file", files.CA)...)
		p.waitStderr(t, "is waiting for jobs", 30*time.Second)
		stopGracefully(t, p)
	})

}

// TestServerTLSBadFiles: a certificate or key coder server cannot use
// stops it within seconds with exit 1 and one line naming the file; a
// taken --tls-address too, after the plain HTTP listener was opened.
func TestServerTLSBadFiles(t *testing.T) {
	good := generateTLSFiles(t)
	other := generateTLSFiles(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expired, expiredKey := writeExpiredCert(t, dir)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name, cert, key, tlsAddr string
		want                     []string
	}{
		{"MissingCert", missing, good.Key, "", []string{missing, "no such file"}},
		{"MissingKey", good.Cert, missing, "", []string{missing, "no such file"}},
		{"GarbageCert", garbage, good.Key, "", []string{garbage, "no PEM certificate"}},
		{"KeyIsACertificate", good.Cert, good.Cert, "", []string{good.Cert, "no PEM private key"}},
		{"KeyOfAnotherCertificate", good.Cert, other.Key, "", []string{other.Key, "does not belong", good.Cert}},
		{"Expired", expired, expiredKey, "", []string{expired, "expired"}},
		{"TLSAddressTaken", good.Cert, good.Key, taken.Addr().String(), []string{"--tls-address", taken.Addr().String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsAddr := tc.tlsAddr
			if tlsAddr == "" {
				tlsAddr = freeAddr(t)
			}
			httpAddr := freeAddr(t)
			began := time.Now()
			p := start(t, baseEnv(t), "server", "--http-address", httpAddr,
				"--tls-enable", "--tls-address", tlsAddr, "--tls-cert-file", tc.cert, "--tls-key-file", tc.key,
				"--postgres-url", coderdtest.NewDatabase(t), "--provisioner-daemons", "0",
				"--global-config", filepath.Join(t.TempDir(), "config"))
			code := p.wait(t, 30*time.Second)
			stderr := p.stderr.String()
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, stderr)
			}
			var errLine string
			for _, line := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(line, "error: ") {
					errLine = line
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(errLine, w) {
					t.Fatalf("error line %q does not mention %q\n%s", errLine, w, stderr)
				}
			}
			// Nothing is left listening.
			if ln, err := net.Listen("tcp", httpAddr); err != nil {
				t.Fatalf("the plain HTTP address is still taken after exit: %v", err)
			} else {
				ln.Close()
			}
			t.Logf("exit 1 after %s: %s", time.Since(began).Round(time.Millisecond), errLine)
		})
	}
}

// writeExpiredCert writes a self-signed certificate that expired yesterday
// and its key (certs generate makes only valid ones).
func writeExpiredCert(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "expired"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "expired.pem"), filepath.Join(dir, "expired-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
