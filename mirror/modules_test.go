package mirror

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"airgapcoder/internal/testfs"
)

// TestModuleRegistry: the module registry protocol over a modules folder,
// through the HTTPS server: the hosts list provisioners read, versions,
// download (204 with the package's https URL on the mirror, and the
// module's folder after "//"), the package itself, and 404s in the
// registry's JSON for what is not there. A damaged index stops the server
// from starting.
func TestModuleRegistry(t *testing.T) {
	dir := t.TempDir()
	mods := filepath.Join(dir, ModulesDir)
	write := func(rel, content string) {
		t.Helper()
		testfs.WriteFile(t, mods, rel, content)
	}
	write("registry.acme.corp/acme/base/coder/1.0.0.tar.gz", "package 1.0.0")
	write("registry.acme.corp/acme/base/coder/1.2.0.tar.gz", "package 1.2.0")
	write("registry.terraform.io/hashicorp/consul/aws/0.1.0.tar.gz", "consul")
	write(ModulesIndexFile, `{"modules": [
  {"source": "registry.acme.corp/acme/base/coder", "version": "1.0.0"},
  {"source": "registry.acme.corp/acme/base/coder", "version": "1.2.0", "subdir": "modules/base"},
  {"source": "registry.terraform.io/hashicorp/consul/aws", "version": "0.1.0"}
]}`)
	m := startMirror(t, dir)
	client := m.store.HTTPClient()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	base := "https://" + m.addr + ModulesPath
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	if resp, body := get(""); resp.StatusCode != 200 || strings.TrimSpace(body) != `{"hosts":["registry.acme.corp","registry.terraform.io"]}` {
		t.Errorf("hosts: %d %s", resp.StatusCode, body)
	}
	resp, body := get("registry.acme.corp/acme/base/coder/versions")
	var versions struct {
		Modules []struct {
			Versions []struct{ Version string } `json:"versions"`
		} `json:"modules"`
	}
	if err := json.Unmarshal([]byte(body), &versions); err != nil || resp.StatusCode != 200 || len(versions.Modules) != 1 ||
		len(versions.Modules[0].Versions) != 2 || versions.Modules[0].Versions[1].Version != "1.2.0" {
		t.Errorf("versions: %d %s", resp.StatusCode, body)
	}
	for v, want := range map[string]string{
		"1.0.0": base + "registry.acme.corp/acme/base/coder/1.0.0.tar.gz",
		"1.2.0": base + "registry.acme.corp/acme/base/coder/1.2.0.tar.gz//modules/base",
	} {
		resp, _ := get("registry.acme.corp/acme/base/coder/" + v + "/download")
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Terraform-Get") != want {
			t.Errorf("download %s: %d X-Terraform-Get %q, want 204 %q", v, resp.StatusCode, resp.Header.Get("X-Terraform-Get"), want)
		}
	}
	if resp, body := get("registry.acme.corp/acme/base/coder/1.2.0.tar.gz"); resp.StatusCode != 200 || body != "package 1.2.0" {
		t.Errorf("package: %d %q", resp.StatusCode, body)
	}
	for _, path := range []string{
		"registry.acme.corp/acme/base/coder/9.9.9/download",
		"registry.acme.corp/acme/base/coder/9.9.9.tar.gz",
		"registry.acme.corp/acme/other/coder/versions",
		"registry.acme.corp/acme",
		"registry.acme.corp/acme/base/coder/1.0.0/download/extra",
	} {
		resp, body := get(path)
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(body, `{"errors":["`) {
			t.Errorf("GET %s: %d %s, want 404 with the registry's errors", path, resp.StatusCode, body)
		}
	}

	write(ModulesIndexFile, `{"modules": [{"source": "not/an/address/at/all/x", "version": "1.0.0"}]}`)
	if _, err := NewServer(ServerOptions{Dir: dir, Certificate: m.srv.cert}); err == nil || !strings.Contains(err.Error(), "not HOST/NAMESPACE/NAME/SYSTEM") {
		t.Errorf("a damaged modules index: got %v, want an error naming the entry", err)
	}
}
