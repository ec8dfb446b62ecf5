package appliance

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"

	"airgapcoder/internal/atomicfile"
	"airgapcoder/internal/egress"
)

// ConfigFile is the settings file inside DIR.
const ConfigFile = "appliance.yaml"

// Config is DIR/appliance.yaml. Keys are the yaml names below.
type Config struct {
	// HTTPAddress is where the dashboard and API listen (http-address).
	HTTPAddress string `koanf:"http-address"`
	// AccessURL is how users and workspaces reach the appliance
	// (access-url); default: http://<http-address>.
	AccessURL string `koanf:"access-url"`
	// MirrorAddress is where the provider mirror and the image registry
	// listen over HTTPS (mirror-address).
	MirrorAddress string `koanf:"mirror-address"`
	// Hosts are the DNS names and IPs the serving certificate covers
	// (hosts); the mirror address's host and localhost are always added.
	Hosts []string `koanf:"hosts"`
	// ProvisionerDaemons is the number of built-in provisioners
	// (provisioner-daemons).
	ProvisionerDaemons int `koanf:"provisioner-daemons"`
	// ServiceUser runs PostgreSQL (and, under systemd, everything) when the
	// appliance is started as root (service-user).
	ServiceUser string `koanf:"service-user"`
	// PostgresURL uses an external database instead of the bundled one
	// (postgres-url).
	PostgresURL string `koanf:"postgres-url"`
	// EgressAllow are the extra destinations (host names, "*.suffix",
	// IPs or CIDRs) the product's HTTP clients may reach (egress-allow).
	// Empty means loopback, Hosts and the hosts of http-address,
	// mirror-address and access-url only; anything else is refused and
	// logged (package internal/egress).
	EgressAllow []string `koanf:"egress-allow"`

	// The air-gap switches exist so that a config carried over from a
	// connected deployment is refused with a clear message rather than
	// silently ignored. They must stay at these values.
	Telemetry              bool `koanf:"telemetry"`                // must be false
	UpdateCheck            bool `koanf:"update-check"`             // must be false
	BlockDirectConnections bool `koanf:"block-direct-connections"` // must be true
}

// DefaultConfig is what install writes.
func DefaultConfig() Config {
	return Config{
		HTTPAddress:            "127.0.0.1:3000",
		MirrorAddress:          "127.0.0.1:8443",
		ProvisionerDaemons:     3,
		ServiceUser:            "coder",
		BlockDirectConnections: true,
	}
}

var knownKeys = map[string]bool{
	"http-address": true, "access-url": true, "mirror-address": true, "hosts": true, "provisioner-daemons": true,
	"service-user": true, "postgres-url": true, "egress-allow": true, "telemetry": true, "update-check": true, "block-direct-connections": true,
}

// LoadConfig reads DIR/appliance.yaml over the defaults and applies
// overrides (flag values that were set). It refuses unknown keys and any
// attempt to undo the air gap.
func LoadConfig(dir string, overrides map[string]any) (Config, error) {
	k := koanf.New(".")
	def := DefaultConfig()
	if err := k.Load(confmap.Provider(map[string]any{
		"http-address": def.HTTPAddress, "mirror-address": def.MirrorAddress, "provisioner-daemons": def.ProvisionerDaemons,
		"service-user": def.ServiceUser, "block-direct-connections": def.BlockDirectConnections,
	}, "."), nil); err != nil {
		return Config{}, err
	}
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err == nil {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return Config{}, fmt.Errorf("read %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Config{}, err
	}
	if len(overrides) > 0 {
		if err := k.Load(confmap.Provider(overrides, "."), nil); err != nil {
			return Config{}, err
		}
	}
	var unknown []string
	for _, key := range k.Keys() {
		if top := strings.SplitN(key, ".", 2)[0]; !knownKeys[top] {
			unknown = append(unknown, top)
		}
	}
	if len(unknown) > 0 {
		return Config{}, fmt.Errorf("%s: unknown key(s) %s", path, strings.Join(unknown, ", "))
	}
	var c Config
	if err := k.Unmarshal("", &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, c.Validate(path)
}

// Validate checks addresses and refuses settings that would break the air
// gap.
func (c Config) Validate(source string) error {
	var errs []error
	if c.Telemetry {
		errs = append(errs, errors.New("telemetry: true is not allowed on the appliance: it runs offline and sends nothing; remove the key"))
	}
	if c.UpdateCheck {
		errs = append(errs, errors.New("update-check: true is not allowed on the appliance: updates arrive as bundles (coder appliance upgrade); remove the key"))
	}
	if !c.BlockDirectConnections {
		errs = append(errs, errors.New("block-direct-connections: false is not allowed on the appliance: every workspace connection is relayed by coderd; remove the key"))
	}
	for name, addr := range map[string]string{"http-address": c.HTTPAddress, "mirror-address": c.MirrorAddress} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port", name, addr))
		}
	}
	if _, err := egress.New(c.EgressAllow, nil); err != nil {
		errs = append(errs, fmt.Errorf("egress-allow: %w", err))
	}
	if c.ProvisionerDaemons < 0 {
		errs = append(errs, fmt.Errorf("provisioner-daemons: %d is negative", c.ProvisionerDaemons))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", source, errors.Join(errs...))
	}
	return nil
}

// configTemplate is the commented file install writes.
const configTemplate = `# Settings of this appliance. Every key is optional; the values shown are
# the defaults. Restart the appliance (coder appliance up) after a change.

# Where the dashboard and API listen, and how users and workspaces reach them.
http-address: %q
# access-url: https://coder.example.internal

# Where the provider mirror (/terraform/providers/) and the image registry
# (/v2/) listen, over HTTPS with the appliance certificate.
mirror-address: %q

# Extra DNS names and IPs for the serving certificate.
hosts: []

# Built-in provisioner daemons (0 disables them).
provisioner-daemons: %d

# The unprivileged user that runs PostgreSQL when started as root.
service-user: %q

# An external PostgreSQL instead of the bundled one.
# postgres-url: postgres://user:password@db.example.internal/coder

# Where the appliance's own HTTP clients may connect besides loopback, the
# hosts above and the hosts of http-address, mirror-address and access-url:
# host names, "*.suffix", IPs or CIDRs. Anything else is refused and logged.
# egress-allow: ["git.example.internal", "*.corp.example", "10.0.0.0/8"]

# The appliance is offline by design: telemetry and update checks stay off
# and every workspace connection is relayed by coderd. Turning any of these
# back on is refused.
telemetry: false
update-check: false
block-direct-connections: true
`

// WriteDefaultConfig writes DIR/appliance.yaml unless it exists.
func WriteDefaultConfig(dir string) error {
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	d := DefaultConfig()
	body := fmt.Sprintf(configTemplate, d.HTTPAddress, d.MirrorAddress, d.ProvisionerDaemons, d.ServiceUser)
	return atomicfile.Write(path, []byte(body), 0o644)
}
