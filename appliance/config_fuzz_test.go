package appliance

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// canonicalApplianceYAML writes c back as appliance.yaml: every key its
// koanf tag names, with c's value.
func canonicalApplianceYAML(tb testing.TB, c Config) []byte {
	tb.Helper()
	m := map[string]any{}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if key := v.Type().Field(i).Tag.Get("koanf"); key != "" {
			m[key] = v.Field(i).Interface()
		}
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		tb.Fatalf("encode the loaded config: %v", err)
	}
	return b
}

// comparableAppliance is c with empty lists as nil.
func comparableAppliance(c Config) Config {
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Slice && f.Len() == 0 {
			f.SetZero()
		}
	}
	return c
}

// FuzzLoadConfig checks how appliance.yaml is read: koanf's YAML parser,
// the unknown-key check, decoding into Config, and Validate.
//
// Properties: no panic or hang (input capped at 64 KiB); every error names
// the file; a config that loads keeps the air gap (telemetry and update
// checks off, direct connections blocked), passes Validate again, and,
// written back with one key per field, loads to the same Config.
func FuzzLoadConfig(f *testing.F) {
	def := f.TempDir()
	if err := WriteDefaultConfig(def); err != nil {
		f.Fatal(err)
	}
	written, err := os.ReadFile(filepath.Join(def, ConfigFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(written)
	for _, s := range []string{
		"",
		"{}\n",
		"http-address: 0.0.0.0:3000\naccess-url: https://coder.corp.example\nhosts: [coder.corp.example, 10.0.0.5]\n" +
			"provisioner-daemons: 0\negress-allow: [\"git.corp.example\", \"*.corp.example\", 10.0.0.0/8]\n",
		"postgres-url: postgres://coder:secret@db.corp.example/coder?sslmode=verify-full\nservice-user: svc-coder\n",
		"hosts: coder.corp.example\nprovisioner-daemons: \"2\"\ntelemetry: \"false\"\n",
		// The proxy role: valid, then with a primary's key.
		"role: proxy\nprimary-access-url: https://coder.corp.example\nproxy-session-token-file: /etc/coder/proxy-token\nprimary-ca-file: /etc/coder/ca.pem\n",
		"role: proxy\nprimary-access-url: https://coder.corp.example\nproxy-session-token: a:b\npostgres-url: postgres://db/coder\n",
		"base: &b 127.0.0.1:3000\nhttp-address: *b\n",
		// Broken: the air gap undone, unknown and nested keys, bad values,
		// YAML errors.
		"telemetry: true\n",
		"update-check: yes\n",
		"block-direct-connections: false\n",
		"http-addres: 127.0.0.1:3000\n",
		"hosts:\n  a: b\n",
		"http-address: localhost\n",
		"provisioner-daemons: -1\n",
		"provisioner-daemons: 1e30\n",
		"egress-allow: [\"300.1.1.1/40\"]\n",
		"- a\n- b\n",
		"http-address: [\n",
		"a: &a [*a]\n",
		"\thttp-address: x\n",
	} {
		f.Add([]byte(s))
	}

	dir := f.TempDir()
	path := filepath.Join(dir, ConfigFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			t.Skip("input over the size cap")
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(dir, nil)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			return
		}
		switch {
		case c.Telemetry || c.UpdateCheck || !c.BlockDirectConnections:
			t.Fatalf("loaded a config that undoes the air gap: %+v", c)
		case c.ProvisionerDaemons < 0:
			t.Fatalf("loaded %d provisioner daemons", c.ProvisionerDaemons)
		}
		if err := c.Validate(path); err != nil {
			t.Fatalf("loaded, but Validate: %v", err)
		}

		canon := canonicalApplianceYAML(t, c)
		if err := os.WriteFile(path, canon, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := LoadConfig(dir, nil)
		if err != nil {
			t.Fatalf("the loaded config, written back, does not load: %v\n%s", err, canon)
		}
		if a, b := comparableAppliance(c), comparableAppliance(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("the loaded config changes when written back:\n%+v\nthen\n%+v\n%s", a, b, canon)
		}
	})
}
