package cli

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// option ties a flag to its environment variable. The flag itself (name,
// default, usage) is declared on the command with pflag; options only add
// the CODER_* name, so that koanf can layer the sources:
//
//	flags > CODER_* environment > YAML config file > defaults
//
// The YAML file uses the flag names as keys (e.g. `http-address: ...`).
type option struct {
	flag string
	env  string
}

// options is a command's option table.
type options []option

func (o options) envToFlag() map[string]string {
	m := map[string]string{}
	for _, opt := range o {
		if opt.env != "" {
			m[opt.env] = opt.flag
		}
	}
	return m
}

// resolve layers defaults, the YAML file (when configPath is set), the
// environment and the command line, and writes the result back into the
// command's flags, so the variables they are bound to hold the final values.
// A bad value names where it came from.
func (o options) resolve(cmd *cobra.Command, configPath string, environ []string) error {
	fs := cmd.Flags()
	k := koanf.New(".")
	known := map[string]bool{}
	for _, opt := range o {
		known[opt.flag] = true
	}
	source := map[string]string{}
	if configPath != "" {
		if err := k.Load(file.Provider(configPath), yaml.Parser()); err != nil {
			return usageErrorf("read config file %s: %v", configPath, err)
		}
		var unknown []string
		for _, key := range k.Keys() {
			top := strings.SplitN(key, ".", 2)[0]
			if !known[top] {
				unknown = append(unknown, top)
			}
			source[top] = "config file " + configPath
		}
		if len(unknown) > 0 {
			keys := make([]string, 0, len(known))
			for key := range known {
				keys = append(keys, key)
			}
			sort.Strings(keys)
			return usageErrorf("config file %s: unknown key(s) %s; known keys: %s", configPath, strings.Join(slices.Compact(unknown), ", "), strings.Join(keys, ", "))
		}
	}
	envMap := o.envToFlag()
	err := k.Load(env.Provider(".", env.Opt{
		Prefix: "CODER_",
		TransformFunc: func(name, value string) (string, any) {
			flag, ok := envMap[name]
			if !ok {
				return "", nil
			}
			source[flag] = "environment variable " + name
			return flag, value
		},
		EnvironFunc: func() []string { return environ },
	}), nil)
	if err != nil {
		return err
	}
	if err := k.Load(posflag.ProviderWithFlag(fs, ".", k, func(f *pflag.Flag) (string, any) {
		if f.Changed {
			source[f.Name] = "flag --" + f.Name
		}
		return f.Name, posflag.FlagVal(fs, f)
	}), nil); err != nil {
		return err
	}
	for _, opt := range o {
		f := fs.Lookup(opt.flag)
		if f == nil || f.Changed || !k.Exists(opt.flag) {
			continue
		}
		val := k.Get(opt.flag)
		var s string
		switch v := val.(type) {
		case []any:
			parts := make([]string, len(v))
			for i, p := range v {
				parts[i] = fmt.Sprint(p)
			}
			s = strings.Join(parts, ",")
		case []string:
			s = strings.Join(v, ",")
		default:
			s = fmt.Sprint(v)
		}
		if s == f.DefValue && source[opt.flag] == "" {
			continue
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if err := sv.Replace(splitList(s)); err != nil {
				return usageErrorf("invalid value %q for %s (--%s): %v", s, source[opt.flag], opt.flag, err)
			}
			continue
		}
		if err := f.Value.Set(s); err != nil {
			return usageErrorf("invalid value %q for %s (--%s): %v", s, source[opt.flag], opt.flag, err)
		}
	}
	return nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// configPathFrom returns --config, else CODER_CONFIG_PATH.
func configPathFrom(cmd *cobra.Command, environ []string) string {
	if f := cmd.Flags().Lookup("config"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CODER_CONFIG_PATH="); ok {
			return v
		}
	}
	return ""
}
