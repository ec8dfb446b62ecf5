package upstreamtest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// Releases describes the HashiCorp-style releases tree under /terraform/,
// as hc-install reads it: index.json, a SHA256SUMS signed with the same
// test key as the provider registry's, and one zip for the build host's
// platform.
type Releases struct {
	// Version is the terraform version served.
	Version string
	// ArmoredKey is the public key SHA256SUMS verifies with (hc-install's
	// ArmoredPublicKey).
	ArmoredKey string
	// Script is the "terraform" executable inside the zip: a shell script
	// that answers `terraform version` like the real one.
	Script []byte
}

func (u *Upstream) setupReleases(mux *http.ServeMux) error {
	v := u.opts.TerraformVersion
	script := []byte(fmt.Sprintf("#!/bin/sh\necho 'Terraform v%s'\necho 'on %s_%s'\n", v, runtime.GOOS, runtime.GOARCH))
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	h := &zip.FileHeader{Name: "terraform", Method: zip.Deflate}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	w.Write(script)
	if err := zw.Close(); err != nil {
		return err
	}
	zipName := fmt.Sprintf("terraform_%s_%s_%s.zip", v, runtime.GOOS, runtime.GOARCH)
	sum := sha256.Sum256(zb.Bytes())
	sums := []byte(fmt.Sprintf("%s  %s\n", hex.EncodeToString(sum[:]), zipName))
	var sig bytes.Buffer
	if err := openpgp.DetachSign(&sig, u.Provider.signer, bytes.NewReader(sums), nil); err != nil {
		return err
	}
	sumsName := fmt.Sprintf("terraform_%s_SHA256SUMS", v)
	index, err := json.Marshal(map[string]any{
		"name":              "terraform",
		"version":           v,
		"shasums":           sumsName,
		"shasums_signature": sumsName + ".sig",
		"builds": []map[string]string{{
			"name": "terraform", "version": v, "os": runtime.GOOS, "arch": runtime.GOARCH,
			"filename": zipName, "url": "https://releases.hashicorp.com/terraform/" + v + "/" + zipName,
		}},
	})
	if err != nil {
		return err
	}
	u.Releases = Releases{Version: v, ArmoredKey: u.Provider.ArmoredKey, Script: script}
	files := map[string][]byte{"index.json": index, sumsName: sums, sumsName + ".sig": sig.Bytes(), zipName: zb.Bytes()}
	mux.HandleFunc("GET /terraform/"+v+"/{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		b, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		switch name {
		case "index.json":
			w.Header().Set("Content-Type", "application/json") // exactly: hc-install refuses a charset
		case zipName:
			w.Header().Set("Content-Type", "application/zip")
		}
		w.Write(b)
	})
	return nil
}
