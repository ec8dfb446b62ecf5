package updatecheck

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// version is a parsed "vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]" string. The
// leading "v" is optional and build metadata is ignored, as in Semantic
// Versioning 2.0.0.
type version struct {
	major, minor, patch uint64
	pre                 []string // dot-separated pre-release identifiers; nil for a release
}

// parseVersion parses s. It accepts what coderd's build info reports, for
// example "v2.14.1", "v2.15.0-rc.1", "v2.14.1+3f2a9c" and "v0.0.0-devel".
func parseVersion(s string) (version, error) {
	rest := strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(rest, '+'); i >= 0 {
		rest = rest[:i]
	}
	core, pre, hasPre := strings.Cut(rest, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return version{}, fmt.Errorf("parse version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE]", s)
	}
	var nums [3]uint64
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return version{}, fmt.Errorf("parse version %q: %q is not a number", s, p)
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return version{}, fmt.Errorf("parse version %q: %w", s, err)
		}
		nums[i] = n
	}
	v := version{major: nums[0], minor: nums[1], patch: nums[2]}
	if hasPre {
		v.pre = strings.Split(pre, ".")
		for _, id := range v.pre {
			if !validIdentifier(id) {
				return version{}, fmt.Errorf("parse version %q: bad pre-release identifier %q", s, id)
			}
		}
	}
	return v, nil
}

func validIdentifier(id string) bool {
	if id == "" {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// devel reports whether v is a development build ("v0.0.0-devel…"), which
// is older than every other version.
func (v version) devel() bool {
	return v.major == 0 && v.minor == 0 && v.patch == 0 && len(v.pre) > 0 && v.pre[0] == "devel"
}

// compareVersions returns -1 if a is older than b, +1 if a is newer, and 0
// if they are equal. It follows Semantic Versioning precedence, except that
// a development build is older than everything else.
func compareVersions(a, b version) int {
	if ad, bd := a.devel(), b.devel(); ad != bd {
		if ad {
			return -1
		}
		return 1
	}
	for _, c := range [...][2]uint64{{a.major, b.major}, {a.minor, b.minor}, {a.patch, b.patch}} {
		if c[0] != c[1] {
			return cmp.Compare(c[0], c[1])
		}
	}
	// A release is newer than any of its pre-releases.
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		if c := compareIdentifiers(a.pre[i], b.pre[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.pre), len(b.pre))
}

// compareIdentifiers compares two pre-release identifiers: numeric ones
// numerically, others in ASCII order, and numeric below alphanumeric.
func compareIdentifiers(a, b string) int {
	an, aErr := strconv.ParseUint(a, 10, 64)
	bn, bErr := strconv.ParseUint(b, 10, 64)
	switch {
	case aErr == nil && bErr == nil:
		return cmp.Compare(an, bn)
	case aErr == nil:
		return -1
	case bErr == nil:
		return 1
	}
	return strings.Compare(a, b)
}
