package cli

import (
	"strings"
)

// parseKeyValues turns ["k=v", ...] into a map; flag names the flag for errors.
func parseKeyValues(flag string, in []string) (map[string]string, error) {
	return keyValues(flag, in, false)
}

// parseKeyValuesLastWins is parseKeyValues where a key given again takes
// its last value, as Coder's CLI treats --parameter and --variable.
func parseKeyValuesLastWins(flag string, in []string) (map[string]string, error) {
	return keyValues(flag, in, true)
}

func keyValues(flag string, in []string, lastWins bool) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--%s %q must look like key=value", flag, kv)
		}
		if _, dup := out[k]; dup && !lastWins {
			return nil, usageErrorf("--%s %s given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}
