// Package certs owns the appliance's one trust store and its serving
// certificate: which certificate authorities the product's clients trust, and
// which certificate its HTTPS servers present. It is a leaf package (standard
// library only) that every other package may use; it never fetches anything
// and never offers a way to skip verification.
//
// # Files
//
// Everything lives in DIR/certs/ (CertsDir), where DIR is the appliance
// folder:
//
//	trust.pem             system roots + appliance CA + imported CAs (0644)
//	imported/<sha256>.pem one imported CA each, named by the SHA-256 of its DER (0644)
//	ca.pem, ca-key.pem    the appliance CA, when generated (key 0600)
//	server.pem            the serving certificate (leaf first, then any chain)
//	server-key.pem        its private key (0600)
//
// All files are PEM. trust.pem is generated, never edited by hand: Import,
// Generate and Refresh rebuild it from the system bundle, ca.pem and
// imported/. It starts with comment lines naming its sources, and every
// certificate in it appears once (duplicates are dropped by their DER bytes),
// system roots first in the order of the system bundle, then ca.pem, then the
// imported CAs in file-name order, so the same inputs give the same bytes.
// The system bundle is read from the first file of SystemBundles that exists
// (Go's x509.SystemCertPool cannot be exported, so the file itself is
// read); SSL_CERT_FILE is deliberately not consulted, because child
// processes get trust.pem itself through that variable.
//
// Every file is written to a temporary name in its folder, synced, and
// renamed over the old one, so readers see the old or the new content, never
// a mix. Import checks every certificate of every input before writing
// anything: one bad input refuses the whole call and leaves the folder as it
// was. Two writers must not run at the same time on one folder.
//
// # Trust model
//
// A client of the product (coderd's HTTP clients, image pushes, terraform and
// its providers through SSL_CERT_FILE, the CLI, the agent init script)
// trusts exactly the certificates in trust.pem: Load reads it, and
// Store.TLSConfig, Store.Pool, Store.HTTPClient and Store.CertFile hand the
// same set to in-process clients and child processes. Store.Env also sets
// SSL_CERT_DIR, because Go and OpenSSL read /etc/ssl/certs in addition to
// SSL_CERT_FILE unless SSL_CERT_DIR names another folder. There is no other
// source of trust and no switch that turns verification off.
//
// Import accepts only CA certificates (basic constraints valid, IsCA, allowed
// to sign certificates) that are inside their validity period; a leaf, an
// expired CA, a private key or anything that is not a certificate is refused
// with a message saying so. Importing a CA means every client trusts any
// certificate it issues for any name: import only the site's own roots or
// issuing CAs.
//
// The appliance CA (Generate) is an ECDSA P-256 key valid for ten years that
// signs only leaf certificates (path length 0). Whoever can read ca-key.pem
// can mint certificates every client trusts, which is why it is 0600 and
// never leaves the appliance. The server certificate it signs is valid for
// one year, for the DNS names and IP addresses given; Generate renews it when
// it is missing, within RenewBefore of its expiry, issued by another CA, or
// for a different host list. A site that prefers its own certificate replaces
// server.pem and server-key.pem and imports its CA; EnsureServer leaves such
// a certificate alone as long as it is valid.
package certs
