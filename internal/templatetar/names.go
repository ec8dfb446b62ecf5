package templatetar

import (
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	maxPathLen    = 4096 // bytes in a whole entry name (Linux PATH_MAX)
	maxElementLen = 255  // bytes in one name element (Linux NAME_MAX)
)

// cleanName checks an entry name against the name rules in the package
// comment and returns it cleaned: slash-separated, relative, without "./"
// prefix or trailing slash. The template root itself cleans to ".".
func cleanName(name string) (string, error) {
	if reason := unsafeReason(name); reason != "" {
		return "", fmt.Errorf("%w: %s: %s", ErrUnsafePath, quote(name), reason)
	}
	return path.Clean(name), nil
}

// unsafeReason says why name breaks the name rules, or returns "" if it
// does not.
func unsafeReason(name string) string {
	switch {
	case name == "":
		return "empty name"
	case len(name) > maxPathLen:
		return fmt.Sprintf("longer than %d bytes", maxPathLen)
	case !utf8.ValidString(name):
		return "not valid UTF-8"
	case strings.HasPrefix(name, "/"):
		return "absolute path"
	case strings.ContainsRune(name, '\\'):
		return "contains a backslash"
	case strings.ContainsFunc(name, unicode.IsControl):
		return "contains a control character"
	}
	for elem := range strings.SplitSeq(name, "/") {
		if elem == ".." {
			return `contains ".."`
		}
		if len(elem) > maxElementLen {
			return fmt.Sprintf("has an element longer than %d bytes", maxElementLen)
		}
	}
	// The checks above already keep a name inside the folder on Unix; this
	// one also catches volume names and reserved names on Windows.
	if clean := path.Clean(name); clean != "." && !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "not a local path"
	}
	return ""
}

// maxQuoted is how many bytes of a name error messages show.
const maxQuoted = 120

// quote formats an entry name for an error message: Go-quoted, so control
// characters are visible, and cut short with "..." if it is long.
func quote(name string) string {
	if len(name) <= maxQuoted {
		return strconv.Quote(name)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return strconv.Quote(name[:cut]) + "..."
}
