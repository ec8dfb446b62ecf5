package site

import (
	"net/url"
	"strings"
	"unicode"
)

// LocalRedirect returns to when it is a path on this site, and "/"
// otherwise. Every redirect whose target a visitor can choose goes through
// it: the dashboard's sign-in and setup (?redirect=, the form's hidden
// field) and coderd's dev URL trailing-slash redirect.
//
// Browsers are lenient where a server is strict: they drop tabs and
// newlines anywhere in a URL and read a backslash as a slash, so
// "/\t/evil.example" and "/\evil.example" both lead to evil.example. Rather
// than strip anything silently, LocalRedirect refuses:
//
//   - anything but a path that starts with exactly one "/" (no scheme, no
//     host, no user, not "//");
//   - any byte outside printable ASCII (control characters, spaces, Unicode
//     spaces and everything else non-ASCII; a path this site made is
//     percent-encoded) and any backslash;
//   - a path whose percent-decoding holds a control character, a space, a
//     backslash or starts with "//" ("/%2F%2Fevil", "/%5Cevil", "/%09");
//   - a query or fragment whose decoding holds a control character or a
//     backslash (encoded spaces are fine there: form queries hold text).
func LocalRedirect(to string) string {
	if !isLocalPath(to) {
		return "/"
	}
	return to
}

func isLocalPath(to string) bool {
	if !strings.HasPrefix(to, "/") || strings.HasPrefix(to, "//") {
		return false
	}
	for i := 0; i < len(to); i++ {
		if c := to[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return false
		}
	}
	u, err := url.Parse(to)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return false
	}
	// url.Parse decoded the path (and refused bad escapes) but not the
	// query.
	if strings.HasPrefix(u.Path, "//") || strings.ContainsFunc(u.Path, func(r rune) bool { return unsafeRune(r) || unicode.IsSpace(r) }) {
		return false
	}
	query, err := url.QueryUnescape(u.RawQuery)
	if err != nil {
		return false
	}
	return !strings.ContainsFunc(query+u.Fragment, unsafeRune)
}

// unsafeRune reports a control or invisible formatting character (or the
// replacement character of invalid UTF-8), or a backslash.
func unsafeRune(r rune) bool {
	return r == '\\' || r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
