package cli

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"airgapcoder/codersdk"
	"airgapcoder/internal/atomicfile"
)

// caFile is the CA bundle `coder login` stores beside the session, so that
// every later command (and OpenSSH's ProxyCommand) trusts the deployment
// without repeating --ca-file.
const caFile = "ca.pem"

// readCAFiles reads PEM CA bundles: --ca-file (CODER_CA_FILE) when set,
// else the one `coder login` stored; then extra (e.g. provisionerd's
// --ca-cert-file). A file that cannot be read is an error naming it.
func (inv *invocation) readCAFiles(extra ...string) ([]byte, error) {
	var pemData []byte
	if inv.caFile != "" {
		b, err := os.ReadFile(inv.caFile)
		if err != nil {
			return nil, fmt.Errorf("read --ca-file: %w", err)
		}
		pemData = append(pemData, b...)
	} else if b, err := os.ReadFile(filepath.Join(inv.globalConfig, caFile)); err == nil {
		pemData = append(pemData, b...)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read the stored CA: %w", err)
	}
	for _, f := range extra {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pemData = append(pemData, '\n')
		pemData = append(pemData, b...)
	}
	return pemData, nil
}

// newClient returns a client for the deployment at u that trusts the
// system roots plus the CAs of readCAFiles.
func (inv *invocation) newClient(u *url.URL, extraCAFiles ...string) (*codersdk.Client, error) {
	caPEM, err := inv.readCAFiles(extraCAFiles...)
	if err != nil {
		return nil, err
	}
	hc, err := codersdk.NewHTTPClient(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", orStored(inv.caFile), err)
	}
	c := codersdk.New(u)
	c.HTTPClient = hc
	return c, nil
}

func orStored(f string) string {
	if f != "" {
		return "--ca-file " + f
	}
	return "the stored CA"
}

// storeCA keeps the CA choice of a successful login (--ca-file) as a copy
// of the file, not its path, which may move.
func (inv *invocation) storeCA() error {
	pemData, err := os.ReadFile(inv.caFile)
	if err != nil {
		return fmt.Errorf("read --ca-file: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(inv.globalConfig, caFile), pemData, 0o600); err != nil {
		return fmt.Errorf("store CA: %w", err)
	}
	return nil
}

// certificateHint adds what to do to an error from a deployment whose
// certificate the CLI refused.
func certificateHint(err error) error {
	var (
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
	)
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("%w: trust the deployment's CA with --ca-file FILE (CODER_CA_FILE; for the appliance, DIR/certs/ca.pem)", err)
	case errors.As(err, &host):
		return fmt.Errorf("%w: reach the deployment by a name its certificate covers (its access URL)", err)
	}
	return err
}
