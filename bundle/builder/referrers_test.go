package builder

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"airgapcoder/bundle"
	"airgapcoder/internal/upstreamtest"
	"airgapcoder/mirror"
)

// TestBuildSignatures: an image's cosign signature (as a referrer and
// under cosign's tag) and its SBOM cross the gap with it. The bundle lists
// them; the mirror serves them through the referrers API (with the
// artifactType filter) and the tag; push-images puts them in the site
// registry, whose referrers API then lists them too. A verify: rule checks
// the signature at build: with the signer's key the build passes and says
// so, with another key it fails naming the image, and a rule that matches
// no image is refused.
func TestBuildSignatures(t *testing.T) {
	e := newBuildEnv(t, upstreamtest.Options{})
	host := []string{"linux/amd64", "linux/arm64"}
	signed := e.up.Signed
	verify := func(key string) string {
		return "verify:\n  - images: images.test/team/*\n    key: " + key + "\n"
	}
	res, err := e.build(t, e.config(t, host, imagesBody()+verify(e.up.CosignKeyFile)), t.TempDir(), e.cache)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "extracted")
	m, err := bundle.Extract(context.Background(), res.Path, dir, e.pub, false)
	if err != nil {
		t.Fatal(err)
	}

	// The bundle manifest lists what came along, and what was verified.
	i := slices.IndexFunc(m.Components.Images, func(im bundle.Image) bool { return im.Ref == "images.test/team/tool:2" })
	if i < 0 {
		t.Fatalf("no tool image in %+v", m.Components.Images)
	}
	var kinds []string
	for _, r := range m.Components.Images[i].Referrers {
		if r.Subject != signed.Digest.String() {
			t.Errorf("referrer %s: subject %s, want %s", r.Digest, r.Subject, signed.Digest)
		}
		if r.Kind == "signature" && r.VerifiedWith != e.up.CosignKeyFile {
			t.Errorf("signature %s: verified with %q, want the verify: key", r.Digest, r.VerifiedWith)
		}
		kinds = append(kinds, r.Kind+"/"+r.Tag)
	}
	if want := []string{"sbom/", "signature/", "signature/" + signed.SignatureTag}; !slices.Equal(sorted(kinds), want) {
		t.Errorf("tool's referrers: got %v, want %v", kinds, want)
	}
	if len(m.Components.Images[0].Referrers) != 0 {
		t.Errorf("testbase (unsigned): referrers %+v, want none", m.Components.Images[0].Referrers)
	}

	// The mirror serves them.
	reg, err := mirror.NewRegistry(filepath.Join(dir, "images"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ours := httptest.NewServer(reg)
	t.Cleanup(ours.Close)
	checkReferrers(t, "our mirror", http.DefaultClient, ours.URL+"/v2/images.test/team/tool", signed, true)

	// push-images takes them to the site registry.
	site := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true)))
	t.Cleanup(site.Close)
	siteHost := strings.TrimPrefix(site.URL, "https://")
	if _, err := mirror.PushImages(context.Background(), mirror.PushOptions{Dir: dir, To: siteHost + "/site", Transport: site.Client().Transport}); err != nil {
		t.Fatal(err)
	}
	// (go-containerregistry's registry does not filter by artifactType.)
	checkReferrers(t, "the site registry", site.Client(), site.URL+"/v2/site/images.test/team/tool", signed, false)

	// Another key: the build fails naming the image, and writes nothing.
	other := filepath.Join(t.TempDir(), "other.pub")
	writeECDSAPublicKey(t, other)
	out := t.TempDir()
	_, err = e.build(t, e.config(t, host, imagesBody()+verify(other)), out, e.cache)
	if err == nil || !strings.Contains(err.Error(), "images.test/team/tool:2") || !strings.Contains(err.Error(), "no signature verifies with "+other) {
		t.Fatalf("build with another key: got %v, want a failure naming the image and the key", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("a failed build left %d files in the output folder", len(entries))
	}

	// A rule for no image is a mistake.
	p := filepath.Join(e.dir, "bundle.yaml")
	yaml := "version: 1\nname: test\nrelease: \"1\"\nplatforms: [linux/amd64]\n" + imagesBody() + "verify:\n  - images: ghcr.io/acme/*\n    key: " + e.up.CosignKeyFile + "\n"
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), `verify[0].images: "ghcr.io/acme/*" matches none of the images`) {
		t.Errorf("a verify rule matching no image: got %v", err)
	}
}

// checkReferrers checks what a registry at repo (".../v2/NAME") answers
// about the signed image: both referrers, the artifactType filter, nothing
// (when filters), nothing for a digest nothing refers to, and the cosign
// signature tag.
func checkReferrers(t *testing.T, where string, client *http.Client, repo string, signed *upstreamtest.SignedImage, filters bool) {
	t.Helper()
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := client.Get(repo + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET %s: %s %s", where, path, resp.Status, body)
		}
		return resp, body
	}
	listed := func(path string) []string {
		t.Helper()
		_, body := get(path)
		var idx v1.IndexManifest
		if err := json.Unmarshal(body, &idx); err != nil {
			t.Fatalf("%s: GET %s: %v", where, path, err)
		}
		var out []string
		for _, d := range idx.Manifests {
			out = append(out, d.Digest.String()+" "+d.ArtifactType)
		}
		return sorted(out)
	}
	var all []string
	for _, r := range signed.Referrers {
		all = append(all, r.Digest.String()+" "+r.ArtifactType)
	}
	if got := listed("/referrers/" + signed.Digest.String()); !slices.Equal(got, sorted(all)) {
		t.Errorf("%s: referrers of the signed image: got %v, want %v", where, got, sorted(all))
	}
	sig := signed.Referrers[0]
	if filters {
		path := "/referrers/" + signed.Digest.String() + "?artifactType=" + url.QueryEscape(sig.ArtifactType)
		if got := listed(path); !slices.Equal(got, []string{sig.Digest.String() + " " + sig.ArtifactType}) {
			t.Errorf("%s: referrers filtered by %s: got %v", where, sig.ArtifactType, got)
		}
		if resp, _ := get(path); resp.Header.Get("OCI-Filters-Applied") != "artifactType" {
			t.Errorf("%s: a filtered answer without OCI-Filters-Applied: %v", where, resp.Header)
		}
	}
	if got := listed("/referrers/" + sig.Digest.String()); len(got) != 0 {
		t.Errorf("%s: referrers of the signature itself: got %v, want none", where, got)
	}
	if resp, _ := get("/manifests/" + signed.SignatureTag); resp.Header.Get("Docker-Content-Digest") != signed.SignatureTagDigest.String() {
		t.Errorf("%s: tag %s is %s, want %s", where, signed.SignatureTag, resp.Header.Get("Docker-Content-Digest"), signed.SignatureTagDigest)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func writeECDSAPublicKey(t *testing.T, file string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}
