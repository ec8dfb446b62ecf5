// Package redact takes secrets out of text that leaves the process for
// people: log lines kept for support bundles (package logring), settings
// shown by the appliance's overview and diagnostics, and every file of a
// support bundle as a last line of defence.
//
// It works by names and shapes, not by knowing the secrets: a value whose
// name says it is secret (Key), a URL's password, "name=value" and
// "name: value" pairs and JSON members whose name says secret, Bearer and
// Basic credentials, PEM private keys, and strings shaped like a coderd
// session token ("<10 characters>-<22 characters>"). What it replaces
// becomes Mask. It cannot recognise a secret that carries no such sign
// (a bare random string in free text), so callers must still not hand it
// one: redaction here is a net, not the reason the product leaks nothing.
package redact

import (
	"regexp"
	"strings"
	"unicode"
)

// Mask replaces what was taken out. It needs no quoting in JSON, URLs or
// key=value text.
const Mask = "[redacted]"

// secretWords are the words of a name that mark its value secret wherever
// they appear in it ("pgpassword", "CODER_AGENT_TOKEN", "x-api-key").
var secretWords = []string{
	"password", "passwd", "passphrase", "secret", "token", "psk", "cookie",
	"authorization", "credential", "privatekey", "apikey", "signature",
}

// secretExact are names that mark a value secret only as a whole word
// ("key", "tls_key", but not "keyboard" or "monkey").
var secretExact = map[string]bool{"key": true, "keys": true, "pwd": true, "pass": true, "sig": true}

// Key reports whether a value named key (an attribute, a setting, a header)
// is secret by its name: it holds one of the words password, passwd,
// passphrase, secret, token, psk, cookie, authorization, credential,
// privatekey, apikey or signature, or has key, keys, pwd, pass or sig as a
// word of its own (words split at non-letters and at lower-to-upper case
// changes).
func Key(key string) bool {
	lower := strings.ToLower(key)
	flat := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return -1
	}, lower)
	for _, w := range secretWords {
		if strings.Contains(flat, w) {
			return true
		}
	}
	for _, w := range words(key) {
		if secretExact[w] {
			return true
		}
	}
	return false
}

// words splits a name into lower-case words at non-letters and at
// lower-to-upper case changes ("tlsKeyFile" -> tls, key, file).
func words(s string) []string {
	var out []string
	var cur []rune
	var prev rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
		prev = r
	}
	flush()
	return out
}

// Value is what may be shown of a value named key: Mask when the name says
// it is secret (and it is not empty), else String(value).
func Value(key, value string) string {
	if Key(key) && value != "" {
		return Mask
	}
	return String(value)
}

// secretName is the tail of a name that marks the value after it secret in
// free text.
const secretName = `[A-Za-z0-9_.-]*(?i:password|passwd|passphrase|pwd|secret|token|psk|api[_-]?key|private[_-]?key|credentials?|cookie|authorization|signature|sig)`

var rules = []struct {
	re   *regexp.Regexp
	with string
}{
	// PEM private keys, whole (to the end of the text when cut short).
	{regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`), "-----BEGIN PRIVATE KEY----- " + Mask + " -----END PRIVATE KEY-----"},
	// The password of a URL (postgres://user:password@host/db).
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@"'<>\\]*):[^@\s/"'<>\\]*@`), "${1}:" + Mask + "@"},
	// JSON members: "password": "value".
	{regexp.MustCompile(`("` + secretName + `"\s*:\s*")(?:[^"\\]|\\.)*(")`), "${1}" + Mask + "${2}"},
	// Bearer and Basic credentials (Authorization: Bearer xyz).
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`), "${1} " + Mask},
	// SQL: PASSWORD 'value'.
	{regexp.MustCompile(`(?i)\b(password)\s+'[^']*'`), "${1} '" + Mask + "'"},
	// name=value and name: value (query strings, conninfo, environment,
	// headers, error messages). "name:value" without a space is left to
	// the URL rule (https://x-access-token:value@host).
	{regexp.MustCompile(`\b(` + secretName + `)(=|:[ \t])(?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\s&,;"'\\]+)`), "${1}${2}" + Mask},
	// A coderd session or API token: <10 characters>-<22 characters>.
	{regexp.MustCompile(`\b[0-9A-Za-z]{10}-[0-9A-Za-z]{22}\b`), Mask},
}

// String returns s with what looks secret replaced by Mask (see the
// package comment). It is idempotent.
func String(s string) string {
	for _, r := range rules {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}
