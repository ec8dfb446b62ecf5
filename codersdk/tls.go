package codersdk

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"time"
)

// NewHTTPClient returns an HTTP client for a deployment whose certificate
// is signed by one of the system's roots or by a CA in caPEM (PEM
// certificates; nil adds none). The system roots are Go's: on Linux the OS
// bundle, or SSL_CERT_FILE / SSL_CERT_DIR when set. The client has no
// overall timeout (log streams and relayed connections stay open) and
// speaks HTTP/1.1, which the relay's WebSockets need anyway. It resumes
// TLS sessions: each relay connection is a TLS connection of its own (a
// prepared connection of coder port-forward, an agent's spare), and a
// resumed handshake skips the certificate's signature and the chain's
// verification.
func NewHTTPClient(caPEM []byte) (*http.Client, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if len(caPEM) > 0 && !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("codersdk: the CA file holds no PEM certificate")
	}
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(sessionCacheSize)},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConns:        100,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: t}, nil
}

// sessionCacheSize is how many servers' TLS sessions a client keeps: one
// deployment, or a few replicas behind it.
const sessionCacheSize = 16
