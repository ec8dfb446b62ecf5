package upstreamtest

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
)

// Postgres describes the fake zonky jars of the Maven tree under /maven2/.
type Postgres struct {
	// RepositoryURL is the Maven repository, for postgres.repository_url.
	RepositoryURL string
	// Version is the one version served.
	Version string
	// Archives maps a zonky platform ("linux-amd64", "linux-arm64v8") to
	// the .txz its jar holds (fake content with an xz header).
	Archives map[string][]byte
	// Jars maps a jar's path under RepositoryURL to its content.
	Jars map[string][]byte
}

// zonkyPlatforms are the zonky names of the platforms served, with the
// archive name zonky uses inside the jar.
var zonkyPlatforms = map[string]string{
	"linux-amd64":   "postgres-linux-x86_64.txz",
	"linux-arm64v8": "postgres-linux-arm_64.txz",
}

func (u *Upstream) setupMaven(mux *http.ServeMux) error {
	p := Postgres{
		RepositoryURL: u.URL + "/maven2/",
		Version:       u.opts.PostgresVersion,
		Archives:      map[string][]byte{},
		Jars:          map[string][]byte{},
	}
	for plat, inner := range zonkyPlatforms {
		txz := append([]byte("\xfd7zXZ\x00"), []byte(fmt.Sprintf("fake postgres %s %s", plat, p.Version))...)
		var jar bytes.Buffer
		zw := zip.NewWriter(&jar)
		for _, e := range []struct {
			name string
			data []byte
		}{{"META-INF/MANIFEST.MF", []byte("Manifest-Version: 1.0\n")}, {inner, txz}} {
			w, err := zw.Create(e.name)
			if err != nil {
				return err
			}
			w.Write(e.data)
		}
		if err := zw.Close(); err != nil {
			return err
		}
		artifact := "embedded-postgres-binaries-" + plat
		path := fmt.Sprintf("io/zonky/test/postgres/%s/%s/%s-%s.jar", artifact, p.Version, artifact, p.Version)
		p.Archives[plat] = txz
		p.Jars[path] = jar.Bytes()
	}
	u.Postgres = p
	mux.HandleFunc("GET /maven2/", func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.Path, "/maven2/")
		if jarPath, ok := strings.CutSuffix(path, ".sha256"); ok {
			if b, ok := p.Jars[jarPath]; ok {
				sum := sha256.Sum256(b)
				io.WriteString(w, hex.EncodeToString(sum[:]))
				return
			}
		}
		if b, ok := p.Jars[path]; ok {
			http.ServeContent(w, r, path, zeroTime, bytes.NewReader(b))
			return
		}
		http.NotFound(w, r)
	})
	return nil
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
