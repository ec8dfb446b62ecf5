package upstreamtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"airgapcoder/internal/coderprovider"
	"airgapcoder/mirror"
)

// Provider is the provider the registry serves.
type Provider struct {
	// Namespace and Type are the address parts after the host, whatever
	// host a test maps to the server ("coder", "coder").
	Namespace, Type string
	// Versions are the versions offered.
	Versions []string
	// Platforms are the "os_arch" platforms of every version.
	Platforms []string
	// Zips maps a zip file name to its content.
	Zips map[string][]byte
	// SHA256SUMS maps a version to its SHA256SUMS file.
	SHA256SUMS map[string][]byte
	// KeyID is the signing key's id, as the registry announces it.
	KeyID string
	// ArmoredKey is the signing key's public half.
	ArmoredKey string

	signer, stranger *openpgp.Entity
	binary           string
}

// Binary returns the host-platform provider executable the zips hold.
func (p Provider) Binary() string { return p.binary }

// Hashes returns the h1: and zh: hashes of a version's zip for platform.
func (p Provider) Hashes(version, platform string) (h1, zh string, err error) {
	f, err := os.CreateTemp("", "provider-*.zip")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(p.Zips[zipName(p.Type, version, platform)]); err != nil {
		f.Close()
		return "", "", err
	}
	f.Close()
	return mirror.Hashes(f.Name())
}

func zipName(typ, version, platform string) string {
	return fmt.Sprintf("terraform-provider-%s_%s_%s.zip", typ, version, platform)
}

func (u *Upstream) setupProvider(mux *http.ServeMux) error {
	bin, err := coderprovider.Binary()
	if err != nil {
		return err
	}
	p := Provider{
		binary:     bin,
		Namespace:  "coder",
		Type:       "coder",
		Versions:   u.opts.ProviderVersions,
		Platforms:  u.opts.ProviderPlatforms,
		Zips:       map[string][]byte{},
		SHA256SUMS: map[string][]byte{},
	}
	// Pack with mirror.AddProvider: fixed timestamps, the layout make
	// build writes. The address only names the files.
	tmp, err := os.MkdirTemp("", "upstreamtest-zips-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	addr := mirror.ProviderAddress{Hostname: "upstream.test", Namespace: p.Namespace, Type: p.Type}
	for _, v := range p.Versions {
		var sums strings.Builder
		for _, pl := range p.Platforms {
			platform, err := mirror.ParsePlatform(pl)
			if err != nil {
				return err
			}
			if err := mirror.AddProvider(tmp, addr, v, platform, bin); err != nil {
				return err
			}
			name := zipName(p.Type, v, pl)
			b, err := os.ReadFile(filepath.Join(mirror.ProviderDir(tmp, addr), name))
			if err != nil {
				return err
			}
			p.Zips[name] = b
			sum := sha256.Sum256(b)
			fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
		}
		p.SHA256SUMS[v] = []byte(sums.String())
	}
	cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA}
	if p.signer, err = openpgp.NewEntity("upstreamtest registry", "", "signing@upstream.test", cfg); err != nil {
		return err
	}
	if p.stranger, err = openpgp.NewEntity("someone else", "", "other@upstream.test", cfg); err != nil {
		return err
	}
	p.KeyID = p.signer.PrimaryKey.KeyIdString()
	var armored bytes.Buffer
	aw, err := armor.Encode(&armored, openpgp.PublicKeyType, nil)
	if err != nil {
		return err
	}
	if err := p.signer.Serialize(aw); err != nil {
		return err
	}
	if err := aw.Close(); err != nil {
		return err
	}
	p.ArmoredKey = armored.String()
	u.Provider = p

	mux.HandleFunc("GET /.well-known/terraform.json", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]string{"providers.v1": "/v1/providers/", "modules.v1": "/v1/modules/"})
	})
	mux.HandleFunc("GET /v1/providers/{ns}/{type}/versions", u.serveVersions)
	mux.HandleFunc("GET /v1/providers/{ns}/{type}/{version}/download/{os}/{arch}", u.serveDownload)
	mux.HandleFunc("GET /files/{version}/{file}", u.serveFile)
	return nil
}

func (u *Upstream) knownProvider(r *http.Request) bool {
	return r.PathValue("ns") == u.Provider.Namespace && r.PathValue("type") == u.Provider.Type
}

func (u *Upstream) serveVersions(w http.ResponseWriter, r *http.Request) {
	if !u.knownProvider(r) {
		http.Error(w, `{"errors":["Not Found"]}`, http.StatusNotFound)
		return
	}
	type platform struct {
		OS   string `json:"os"`
		Arch string `json:"arch"`
	}
	type version struct {
		Version   string     `json:"version"`
		Protocols []string   `json:"protocols"`
		Platforms []platform `json:"platforms"`
	}
	var resp struct {
		Versions []version `json:"versions"`
	}
	for _, v := range u.Provider.Versions {
		ver := version{Version: v, Protocols: []string{"6.0"}}
		for _, pl := range u.Provider.Platforms {
			os, arch, _ := strings.Cut(pl, "_")
			ver.Platforms = append(ver.Platforms, platform{os, arch})
		}
		resp.Versions = append(resp.Versions, ver)
	}
	writeJSON(w, resp)
}

func (u *Upstream) serveDownload(w http.ResponseWriter, r *http.Request) {
	v := r.PathValue("version")
	pl := r.PathValue("os") + "_" + r.PathValue("arch")
	if !u.knownProvider(r) || !slices.Contains(u.Provider.Versions, v) || !slices.Contains(u.Provider.Platforms, pl) {
		http.Error(w, `{"errors":["Not Found"]}`, http.StatusNotFound)
		return
	}
	name := zipName(u.Provider.Type, v, pl)
	sum := sha256.Sum256(u.Provider.Zips[name])
	files := u.URL + "/files/" + v + "/"
	writeJSON(w, map[string]any{
		"protocols":             []string{"6.0"},
		"os":                    r.PathValue("os"),
		"arch":                  r.PathValue("arch"),
		"filename":              name,
		"download_url":          files + name,
		"shasums_url":           files + "SHA256SUMS",
		"shasums_signature_url": files + "SHA256SUMS.sig",
		"shasum":                hex.EncodeToString(sum[:]),
		"signing_keys": map[string]any{
			"gpg_public_keys": []map[string]any{{
				"key_id":      u.Provider.KeyID,
				"ascii_armor": u.Provider.ArmoredKey,
				"source":      "upstreamtest",
			}},
		},
	})
}

func (u *Upstream) serveFile(w http.ResponseWriter, r *http.Request) {
	v, file := r.PathValue("version"), r.PathValue("file")
	sums, ok := u.Provider.SHA256SUMS[v]
	if !ok {
		http.NotFound(w, r)
		return
	}
	corrupt, sig := u.currentKnobs()
	switch {
	case file == "SHA256SUMS":
		if sig == SignatureTampered {
			sums = append([]byte("0000000000000000000000000000000000000000000000000000000000000000  extra.zip\n"), sums...)
		}
		w.Write(sums)
	case file == "SHA256SUMS.sig":
		signer := u.Provider.signer
		if sig == SignatureWrongKey {
			signer = u.Provider.stranger
		}
		var b bytes.Buffer
		if err := openpgp.DetachSign(&b, signer, bytes.NewReader(sums), nil); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(b.Bytes())
	default:
		b, ok := u.Provider.Zips[file]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if corrupt[file] {
			b = slices.Clone(b)
			b[len(b)/2] ^= 0xff
		}
		w.Header().Set("Content-Type", "application/zip")
		http.ServeContent(w, r, file, zeroTime, bytes.NewReader(b))
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
